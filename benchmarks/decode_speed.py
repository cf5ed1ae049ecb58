"""JPEG decode speed on one core: OpenCV, Pillow, simplejpeg and PyTurboJPEG, images/s.

    python benchmarks/decode_speed.py [--seconds S] [--json OUT.json]

Decodes sample JPEGs (scikit-image photographs written by cnnbench.data.samples at 1080x1920 and at the
ImageNet-like 375x500, quality 90) to uint8 HWC RGB with each installed decoder, pinned to one CPU core
with decoder threading off, and prints the median images per second of CPU time over interleaved
rounds. cnnbench's ``decode_image`` (simplejpeg or OpenCV, plus the truncation checks) is measured too,
so the checks' cost shows. Decoders that are not installed are listed as such.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cnnbench.data.decode import decode_image, jpeg_decoder  # noqa: E402
from cnnbench.data.samples import write_image_folder  # noqa: E402

SIZES = {"1080x1920": (1080, 1920), "375x500": (375, 500)}


def decoders() -> dict[str, object]:
    """name -> function(bytes) -> RGB array, or the reason it is unavailable."""
    out: dict[str, object] = {}
    try:
        import cv2

        cv2.setNumThreads(1)
        flags = cv2.IMREAD_COLOR_RGB | cv2.IMREAD_IGNORE_ORIENTATION
        out[f"opencv {cv2.__version__}"] = lambda b: cv2.imdecode(np.frombuffer(b, np.uint8), flags)
        out[f"cnnbench decode_image ({jpeg_decoder()} + checks)"] = lambda b: decode_image(b, "bench")
    except ImportError as exc:
        out["opencv"] = f"not installed ({exc})"
    try:
        import PIL
        from PIL import Image

        out[f"pillow {PIL.__version__}"] = lambda b: np.asarray(Image.open(io.BytesIO(b)).convert("RGB"))
    except ImportError as exc:
        out["pillow"] = f"not installed ({exc})"
    try:
        import simplejpeg

        out[f"simplejpeg {simplejpeg.__version__}"] = lambda b: simplejpeg.decode_jpeg(b, colorspace="RGB")
    except ImportError as exc:
        out["simplejpeg"] = f"not installed ({exc})"
    try:
        from importlib.metadata import version

        from turbojpeg import TJPF_RGB, TurboJPEG

        jpeg = TurboJPEG()
        out[f"pyturbojpeg {version('pyturbojpeg')}"] = lambda b: jpeg.decode(b, pixel_format=TJPF_RGB)
    except (ImportError, OSError, RuntimeError) as exc:
        out["pyturbojpeg"] = f"unavailable ({str(exc).splitlines()[0]})"
    return out


def images_per_second(decode, files: list[bytes], seconds: float) -> float:
    """Images per second of this thread's CPU time: on a busy shared machine, wall time would count the
    time other processes held the core; CPU time is what one dedicated core would need."""
    count, start = 0, time.thread_time()
    while time.thread_time() - start < seconds:
        decode(files[count % len(files)])
        count += 1
    return count / (time.thread_time() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="time per decoder and size")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (the median is reported)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    found = decoders()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        blobs = {}
        for label, size in SIZES.items():
            paths = write_image_folder(Path(tmp) / label, 2, 4, size, seed=0)
            blobs[label] = [p.read_bytes() for p in paths]
        reference = {label: np.asarray(decode_image(files[0], "ref")) for label, files in blobs.items()}
        usable = {name: decode for name, decode in found.items() if not isinstance(decode, str)}
        for name, reason in found.items():
            if name not in usable:
                print(f"{name:42s} {reason}")
        rates: dict[tuple[str, str], list[float]] = {}
        for name, decode in usable.items():
            results[name] = {}
            for label, files in blobs.items():
                same = np.abs(decode(files[0]).astype(int) - reference[label]).max()  # also warms it up
                results[name][f"{label}_max_diff_vs_opencv"] = int(same)
        # Rounds interleave the decoders, so a busy spell on a shared machine hits all of them alike.
        for _ in range(args.rounds):
            for name, decode in usable.items():
                for label, files in blobs.items():
                    rate = images_per_second(decode, files, args.seconds / args.rounds)
                    rates.setdefault((name, label), []).append(rate)
        for (name, label), values in rates.items():
            results[name][label] = statistics.median(values)
    sizes_kb = {label: round(sum(map(len, files)) / len(files) / 1024) for label, files in blobs.items()}
    print(f"\none core, quality-90 JPEGs (mean {sizes_kb['1080x1920']} KiB at 1080x1920, "
          f"{sizes_kb['375x500']} KiB at 375x500); images per CPU-second, median of {args.rounds} rounds")
    print(f"{'decoder':42s} {'1080x1920':>10s} {'ms':>6s} {'375x500':>10s} {'ms':>6s}  max |diff| vs opencv")
    for name, row in results.items():
        big, small = row["1080x1920"], row["375x500"]
        print(f"{name:42s} {big:10.1f} {1000 / big:6.2f} {small:10.1f} {1000 / small:6.2f}  "
              f"{row['1080x1920_max_diff_vs_opencv']}, {row['375x500_max_diff_vs_opencv']}")
    if args.json:
        args.json.write_text(json.dumps({"sizes_kib": sizes_kb, "images_per_sec": results}, indent=1))


if __name__ == "__main__":
    main()
