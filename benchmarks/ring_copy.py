"""How fast the serving engine can move pixels out of the shared-memory ring, per frame size.

The multi-process server's engine copies every request's pixels from its ring slot into a pinned
staging batch in one thread (``PipelinedBatcher.submit``), and the batch then goes to the device in
one copy. For 224x224 images that is 150 KB a request; for the seed's 1080x1920 frames it is 6.2 MB,
and at 600 frames/s the one thread must copy 3.7 GB/s. This measures, for each size, in one process:

- ``slot_to_staging``: ``np.copyto`` from a ring slot (POSIX shared memory, pages already written by
  another view, as a front end would) into a pinned staging slot: the engine's copy today;
- ``staging_to_device``: one batch from pinned staging to the device (``non_blocking``, then a sync);
- ``registered_slot_to_device`` (GPU only): the ring registered with ``cudaHostRegister`` and each
  slot copied straight to its row of a device batch, no host copy at all;
- ``pageable_slot_to_device`` (GPU only): the same without registering: what a direct copy costs when
  the framework cannot pin the ring.

Usage: python benchmarks/ring_copy.py OUT.jsonl [--device cuda] [--seconds 2]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np
import torch

SIZES = {"224x224": (224, 224, 3), "1080x1920": (1080, 1920, 3)}
BATCH = 16


def _rate(step: Callable[[], None], frames_per_step: int, seconds: float) -> float:
    """Frames per second of ``step`` after one warm-up call, over at least ``seconds``."""
    step()
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        done += frames_per_step
    return done / (time.perf_counter() - start)


def measure(shape: tuple[int, int, int], device: str, seconds: float) -> dict[str, float]:
    frame_bytes = int(np.prod(shape))
    segment = shared_memory.SharedMemory(create=True, size=2 * BATCH * frame_bytes)
    try:
        ring = np.ndarray((2 * BATCH, *shape), np.uint8, buffer=segment.buf)
        ring[:] = np.random.default_rng(0).integers(0, 255, ring.shape, dtype=np.uint8)  # pages written
        rates = _rates(ring, shape, device, seconds)
        del ring  # the segment cannot close while a view of it exists
        return rates
    finally:
        segment.close()
        segment.unlink()


def _rates(ring: np.ndarray, shape: tuple[int, int, int], device: str, seconds: float) -> dict[str, float]:
    on_gpu = device.startswith("cuda")
    staging = torch.empty((BATCH, *shape), dtype=torch.uint8, pin_memory=on_gpu)
    staging_np = staging.numpy()

    def slot_to_staging() -> None:
        for i in range(BATCH):
            np.copyto(staging_np[i], ring[i])

    rates = {"slot_to_staging": _rate(slot_to_staging, BATCH, seconds)}
    if on_gpu:
        target = torch.empty((BATCH, *shape), dtype=torch.uint8, device=device)

        def staging_to_device() -> None:
            target.copy_(staging, non_blocking=True)
            torch.cuda.synchronize()

        def slots_to_device() -> None:
            for i in range(BATCH):
                target[i].copy_(torch.from_numpy(ring[i]), non_blocking=True)
            torch.cuda.synchronize()

        rates["staging_to_device"] = _rate(staging_to_device, BATCH, seconds)
        rates["pageable_slot_to_device"] = _rate(slots_to_device, BATCH, seconds)
        code = torch.cuda.cudart().cudaHostRegister(ring.ctypes.data, ring.nbytes, 0)
        if int(code) == 0:
            rates["registered_slot_to_device"] = _rate(slots_to_device, BATCH, seconds)
            torch.cuda.cudart().cudaHostUnregister(ring.ctypes.data)
        else:
            rates["register_error"] = int(code)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    with args.out.open("a") as out:
        for name, shape in SIZES.items():
            rates = measure(shape, args.device, args.seconds)
            row = {"benchmark": "ring_copy", "size": name, "batch": BATCH, "device": args.device,
                   "frames_per_s": {k: round(v, 1) for k, v in rates.items()},
                   "gb_per_s": {k: round(v * int(np.prod(shape)) / 1e9, 2) for k, v in rates.items()
                                if not k.endswith("error")}}
            out.write(json.dumps(row) + "\n")
            print(json.dumps(row))


if __name__ == "__main__":
    main()
