"""Cost of the on-device input preparation (``backends/<fw>/transforms.py`` ``prepare``), ms per batch.

    python benchmarks/prepare_speed.py torch|jax [--device gpu|cpu] [--smoke] [--json OUT.json]

A uint8 NHWC batch already on the device; each iteration draws new crops on the host (``crop_draws``
for a new epoch), and ``prepare`` crops, resizes, flips, normalises and casts. Cases: ImageNet-like
training (256 x 375x500 -> random resized crop 224, bf16), evaluation (centre crop 224) and 1080p
inference frames (16 x 1080x1920, whole frame, fp16: the convert-and-normalise fast path). PyTorch is
timed eager and under torch.compile; JAX's prepare is jitted. The device is synchronised at both ends
of each timed window; the median of 5 windows is printed. ``--smoke`` runs tiny sizes (for a CPU check).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cnnbench.data.augment import crop_draws  # noqa: E402
from cnnbench.data.normalize import IMAGENET_MEAN, IMAGENET_STD  # noqa: E402


def cases(smoke: bool) -> list[dict]:
    scale = 8 if smoke else 1
    batch = (lambda n: max(2, n // 64)) if smoke else (lambda n: n)
    return [
        dict(name="train_rrc_224_bf16", n=batch(256), src=(375 // scale, 500 // scale), kind="random_resized_crop",
             out=(224 // scale, 224 // scale), dtype="bfloat16"),
        dict(name="eval_center_224_bf16", n=batch(256), src=(375 // scale, 500 // scale), kind="center",
             out=(224 // scale, 224 // scale), dtype="bfloat16"),
        dict(name="frames_1080p_fp16", n=batch(16), src=(1080 // scale, 1920 // scale), kind="identity",
             out=None, dtype="float16"),
    ]


def draws(case: dict, epoch: int):
    if case["kind"] == "identity":
        return None, None
    d = crop_draws(0, epoch, np.arange(case["n"]), case["src"], case["kind"], case["out"])
    return d.boxes, d.flips


def time_windows(step, sync, iters: int, windows: int = 5) -> float:
    step(0)
    sync()
    times = []
    for w in range(windows):
        start = time.perf_counter()
        for i in range(iters):
            step(1 + w * iters + i)
        sync()
        times.append((time.perf_counter() - start) / iters * 1000)
    return statistics.median(times)


def bench_torch(case: dict, device: str, iters: int) -> dict[str, float]:
    import torch

    from backends.torch.transforms import prepare

    dev = torch.device("cuda" if device == "gpu" else "cpu")
    rng = np.random.default_rng(0)
    images = torch.from_numpy(rng.integers(0, 256, (case["n"], *case["src"], 3), dtype=np.uint8)).to(dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    out = {}
    for label, fn in (("torch eager", prepare), ("torch compiled", torch.compile(prepare))):
        def step(epoch, fn=fn):
            boxes, flips = draws(case, epoch)
            return fn(images, boxes, flips, case["out"], IMAGENET_MEAN, IMAGENET_STD, case["dtype"],
                      channels_last=True)
        out[label] = time_windows(step, sync, iters)
    return out


def bench_jax(case: dict, device: str, iters: int) -> dict[str, float]:
    import jax

    from backends.jax.transforms import prepare

    rng = np.random.default_rng(0)
    images = jax.device_put(rng.integers(0, 256, (case["n"], *case["src"], 3), dtype=np.uint8), jax.devices()[0])
    last = []

    def step(epoch):
        boxes, flips = draws(case, epoch)
        last[:] = [prepare(images, boxes, flips, case["out"], IMAGENET_MEAN, IMAGENET_STD, case["dtype"])]

    return {"jax jit": time_windows(step, lambda: jax.block_until_ready(last), iters)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("framework", choices=["torch", "jax"])
    parser.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, few iterations")
    parser.add_argument("--json", type=Path, help="append the numbers here as JSON lines")
    args = parser.parse_args()
    if args.device == "cpu" and args.framework == "jax":
        import os

        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    bench = bench_torch if args.framework == "torch" else bench_jax
    iters = 2 if args.smoke else 20
    for case in cases(args.smoke):
        results = bench(case, args.device, iters)
        shape = f"{case['n']}x{case['src'][0]}x{case['src'][1]}"
        for label, ms in results.items():
            print(f"{case['name']:22s} {shape:>14s} {label:15s} {ms:9.3f} ms/batch")
            if args.json:
                with args.json.open("a") as f:
                    f.write(json.dumps({"case": case["name"], "input": shape, "impl": label, "device": args.device,
                                        "ms_per_batch": round(ms, 4)}) + "\n")


if __name__ == "__main__":
    main()
