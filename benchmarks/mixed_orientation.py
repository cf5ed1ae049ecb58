"""A folder of portrait and landscape photographs at a small model size: what crosses to the device.

    python benchmarks/mixed_orientation.py [--out results/cpu_mixed_orientation.jsonl] [--images 16]
(docs/real-input.md's table is generated from the rows by benchmarks/tables.py)

Writes a folder of 1080x1920 JPEGs from `cnnbench samples`' photographs, every other one turned to
1920x1080, and reads batches of 16 for a 32x32 model (random resized crop, as training does) with the
shared reader (cnnbench.data.loader), twice: as before the host shrank large images (every image padded
into the dataset's 1920x1920 canvas) and as now (images above 4x the model's size shrunk on the host,
the canvas bounded by 128x128). Per batch: the uint8 bytes that cross to the device, the host's read
(decode + shrink + pad + collate) and PyTorch's `prepare` (crop, resize, flip, normalise; here on the
CPU, the device of this machine, one thread). One JSON line per mode; medians of 10 batches after one warm-up, the modes
taking turns batch by batch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cnnbench.data import loader  # noqa: E402
from cnnbench.data.samples import write_image_folder  # noqa: E402
from cnnbench.options import DataSpec  # noqa: E402

BATCH, OUT_HW = 16, (32, 32)


def mixed_folder(root: Path, count: int) -> Path:
    import cv2

    write_image_folder(root / "folder", count, ["astronaut"], (1080, 1920), seed=0)
    for index, path in enumerate(sorted((root / "folder" / "astronaut").glob("*.jpg"))):
        if index % 2:
            cv2.imwrite(str(path), cv2.rotate(cv2.imread(str(path)), cv2.ROTATE_90_CLOCKWISE))
    return root / "folder"


def reader_for(folder: Path, factor: int):
    """The plan and reader of a 32x32 run, with images above ``factor`` x 32 shrunk on the host."""
    loader.HOST_CANVAS_FACTOR = factor  # read when the plan's canvas is first asked for, and per sample
    run = SimpleNamespace(dataset="image_folder", data_path=str(folder), image_size=OUT_HW, seed=0,
                          data=DataSpec(test_fraction=0.0))
    plan = loader.plan_for(run)
    return plan, loader.SampleReader(plan), factor


def one_batch(plan, reader, factor: int, step: int) -> tuple[float, float, int]:
    """(host read ms, prepare ms, uint8 bytes) of one batch of a new epoch (its own order and crops)."""
    import torch

    from backends.torch.transforms import prepare

    loader.HOST_CANVAS_FACTOR = factor
    start = time.perf_counter()
    items = plan.step_items(step, 0, BATCH)
    images, _, boxes, flips = loader.collate([reader.sample(step, int(i), True) for i in items])
    read = time.perf_counter() - start
    start = time.perf_counter()
    prepare(torch.from_numpy(images), boxes, flips, OUT_HW, plan.mean, plan.std, "float32")
    return read * 1000, (time.perf_counter() - start) * 1000, images.nbytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results/cpu_mixed_orientation.jsonl"))
    parser.add_argument("--images", type=int, default=16, help="photographs in the folder (half turned)")
    args = parser.parse_args()
    import cv2
    import torch

    # one thread each: on a shared machine two threads spin-waiting on each other made the times vary 100x
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = mixed_folder(Path(tmp), args.images)
        modes = {"before: pad into the dataset canvas": reader_for(folder, 10**6),
                 "after: shrink on the host to 4x the model": reader_for(folder, 4)}
        timings: dict[str, list] = {mode: [] for mode in modes}
        for step in range(11):  # the modes take turns, so a busy spell of the machine hits both
            for mode, (plan, reader, factor) in modes.items():
                timings[mode].append(one_batch(plan, reader, factor, step))
        lines = []
        for mode, (plan, _, _) in modes.items():
            read, prep, nbytes = zip(*timings[mode][1:])  # the first batch warms up
            lines.append({"mode": mode, "batch": BATCH, "model_hw": "x".join(map(str, OUT_HW)),
                          "canvas": "x".join(map(str, plan.canvas_hw)),
                          "uint8_mb_per_batch": round(nbytes[0] / 2**20, 2),
                          "host_read_ms": round(statistics.median(read), 1),
                          "prepare_ms": round(statistics.median(prep), 1)})
            print(json.dumps(lines[-1]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(line) + "\n" for line in lines))
    print(f"wrote {len(lines)} rows to {args.out}; python benchmarks/tables.py puts them in docs/real-input.md")


if __name__ == "__main__":
    main()
