"""Where a batch of frames spends its time on its way into ResNet-50 under PyTorch: decode, copy, compute.

Uses cnnbench's own pieces (the neutral loader, backends/torch/input.py's DataLoader, the on-device
prepare, the ResNet-50 of backends/torch/models.py) and measures each stage alone, then the pipeline:

- decode: one batch decoded serially on one core (ms per batch, images/s per core), from the JPEG folder
  and from the video; and the DataLoader, host side only (ms per batch of pinned host tensors): the JPEG
  folder with ``--workers`` processes, the video with its one reader in the main process (decode, stacking
  and pinning in one thread, as the end to end below runs it);
- copy: one batch host -> device as uint8 NHWC from pinned memory, as float32 NCHW from pageable memory
  and from pinned memory (median of 10, synchronized);
- compute: prepare (uint8 -> normalised float, on the device) + the model in ``--precision``, compiled
  with ``--compile``, on a resident uint8 batch; and the model alone on a resident float batch (what the
  plain peer benchmarks/plain_peers/torch_frames.py measures);
- end to end: DataLoader -> non-blocking copy -> prepare -> model, ms per batch (the copy and decode of
  the next batch overlap the current one's compute), and the part of it the main thread waited for the
  loader: near the whole when the host side bounds the loop, near zero when the device path does.

Loader figures are steady state: each worker decodes whole batches, so the workers' first batches arrive
together; ``workers + 1`` batches are drawn before the clock starts, then ``--batches`` are timed (at least
two rounds of the workers by default).

python benchmarks/data_split.py --jpeg DIR --video FILE [--batch 16] [--size 1080 1920] [--precision bf16]
       [--workers 14] [--compile] [--device cuda|cpu] [--batches 32] [--repeat 10] [--out split.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from backends.torch.input import TorchInput  # noqa: E402
from backends.torch.models import build_model  # noqa: E402
from backends.torch.transforms import prepare  # noqa: E402
from cnnbench.data.loader import SampleReader, plan_for  # noqa: E402
from cnnbench.options import DataSpec  # noqa: E402


def _plan(dataset: str, path: str, size: tuple[int, int], workers: int, prefetch: int = 4):
    run = SimpleNamespace(dataset=dataset, data_path=path, image_size=size, seed=0,
                          data=DataSpec(workers=workers, prefetch=prefetch, pin_memory=True, augment="none",
                                test_fraction=0.0))
    return plan_for(run)


def _timed(fn, sync, repeat: int = 10) -> float:
    """Median ms of ``fn`` over ``repeat`` calls, synchronized around each."""
    times = []
    for _ in range(repeat):
        sync()
        begun = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - begun) * 1000.0)
    return statistics.median(times)


def decode_serial(plan, batch: int) -> dict:
    reader = SampleReader(plan)
    items = [int(plan.train_items[k % len(plan.train_items)]) for k in range(batch)]
    reader.pixels(items[0])  # open files / the video once
    begun = time.perf_counter()
    for item in items:
        reader.pixels(item)
    ms = (time.perf_counter() - begun) * 1000.0
    return {"decode_ms_per_batch_1core": ms, "decode_images_per_s_per_core": batch / (ms / 1000.0)}


def warm_batches(plan) -> int:
    """Batches drawn before timing a loader: one round of its workers' first batches, which arrive together
    (timing them would read a burst, not the rate the workers sustain), and one more."""
    return plan.workers + 1


def loader_host(plan, batch: int, device, batches: int) -> float:
    """ms per batch the DataLoader delivers (pinned, host side), in steady state."""
    source = TorchInput(plan, device, batch, 0, 1, channels_last=True)
    try:
        iterator = source.host_batches()
        for _ in range(warm_batches(plan)):
            next(iterator)
        begun = time.perf_counter()
        for _ in range(batches):
            next(iterator)
        return (time.perf_counter() - begun) * 1000.0 / batches
    finally:
        source.close()  # its workers would idle beside the later stages, then wait 5 s each at exit


def end_to_end(source: TorchInput, infer, sync, warm: int, batches: int) -> dict:
    """ms per batch of loader -> queued copy and prepare -> model, and how much of it the main thread spent
    waiting for the loader's next batch (the rest: queueing the device work, or blocked behind the device)."""
    host = source.host_batches()
    with torch.inference_mode():  # prepare's output too, as in the compute stage above
        for _ in range(warm):
            infer(source.to_device(next(host))[0])
        sync()
        waited = 0.0
        begun = time.perf_counter()
        for _ in range(batches):
            asked = time.perf_counter()
            batch = next(host)
            waited += time.perf_counter() - asked
            infer(source.to_device(batch)[0])
        sync()
    return {"end_to_end_ms_per_batch": (time.perf_counter() - begun) * 1000.0 / batches,
            "end_to_end_loader_wait_ms_per_batch": waited * 1000.0 / batches}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jpeg", required=True)
    parser.add_argument("--video", required=True)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, nargs=2, default=(1080, 1920))
    parser.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default="bf16")
    parser.add_argument("--workers", type=int, default=14)
    parser.add_argument("--batches", type=int, default=32,
                        help="batches timed per loader, after warm_batches(); two rounds of 14 workers and more")
    parser.add_argument("--repeat", type=int, default=10, help="timed calls per copy and compute median")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out")
    args = parser.parse_args()
    size, b = tuple(args.size), args.batch
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    if on_gpu:
        torch.backends.cudnn.benchmark = True
    result: dict = {"batch": b, "size": f"{size[0]}x{size[1]}", "precision": args.precision,
                    "compile": args.compile, "workers": args.workers, "device": args.device,
                    "timed_batches": args.batches}
    jpeg, video = _plan("image_folder", args.jpeg, size, args.workers), _plan("video", args.video, size, 0)
    result["jpeg"] = decode_serial(jpeg, b)
    result["video"] = decode_serial(video, b)
    result["jpeg"]["loader_ms_per_batch"] = loader_host(jpeg, b, device, args.batches)
    result["video"]["loader_ms_per_batch"] = loader_host(video, b, device, args.batches)

    # -- copies -------------------------------------------------------------------------------------
    u8 = torch.randint(0, 256, (b, *size, 3), dtype=torch.uint8)
    f32 = torch.randn(b, 3, *size)
    copies = {"uint8_pinned": u8.pin_memory() if on_gpu else u8, "fp32_pageable": f32,
              "fp32_pinned": f32.pin_memory() if on_gpu else f32}
    result["copy_ms"] = {name: _timed(lambda t=t: t.to(device, non_blocking=True), sync, args.repeat)
                         for name, t in copies.items()}

    # -- compute ------------------------------------------------------------------------------------
    model = build_model("resnet50", size, 3, 1000).to(device, memory_format=torch.channels_last).eval()
    forward = torch.compile(model) if args.compile else model
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    resident_u8, resident_x = u8.to(device), f32.to(device).contiguous(memory_format=torch.channels_last)

    @torch.inference_mode()
    def model_only():
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            forward(resident_x)

    @torch.inference_mode()
    def prepare_and_model():
        x = prepare(resident_u8, None, None, size, jpeg.mean, jpeg.std, "float32", channels_last=True)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            forward(x)

    begun = time.perf_counter()
    model_only()
    prepare_and_model()
    sync()
    result["first_call_s"] = time.perf_counter() - begun
    result["compute_ms"] = {"model": _timed(model_only, sync, args.repeat),
                            "prepare_and_model": _timed(prepare_and_model, sync, args.repeat)}

    # -- end to end ---------------------------------------------------------------------------------
    def infer(x: torch.Tensor) -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            forward(x)

    for name, plan in (("jpeg", jpeg), ("video", video)):
        source = TorchInput(plan, device, b, 0, 1, channels_last=True)
        try:
            result[name].update(end_to_end(source, infer, sync, warm_batches(plan), args.batches))
        finally:
            source.close()
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    print(text, flush=True)


if __name__ == "__main__":
    main()
