"""The inference sections: inputs (resident, uint8 pinned, float32 pinned and pageable) beside the plain
compiled forwards, the batch-size sweep with in-process serving, the ablation, and 1080p frames."""

from __future__ import annotations

from runbook.data import frame_samples
from runbook.pairs import PERF_ROWS, peer
from runbook.steps import SMOKE_INFER, Context

INFER_SPEC = "experiments/resnet50_infer.toml"
INPUTS = ["resident", "uint8_pinned", "float32_pinned", "float32_pageable"]


def _by_input(ctx: Context, backend: str, batches: list[int], limit_s: float) -> None:
    """resnet50_infer.toml's sweep at BATCHES, every input, without its ablation and serving jobs."""
    spec = ctx.spec(INFER_SPEC, "perf_infer", {"compile": True, "precision": "bf16", "infer.latency_samples": 10,
                                               "infer.input": INPUTS, "infer.batch_sizes": batches,
                                               "infer.ablation": None, "serve.rates": None, "timeout_s": limit_s},
                    {**SMOKE_INFER, "infer.batch_sizes": [2 * b for b in range(1, len(batches) + 1)]})
    ctx.cnnbench(f"{backend} inference at batches {batches}", "infer", spec, PERF_ROWS, limit_s + 20, "-b", backend)


def inference_torch(ctx: Context) -> None:
    """PyTorch compiles each batch shape for float32 and for uint8 input: the batches the ratios need first,
    then the small ones, each group in its own step so that a limit loses one group's rows only."""
    _by_input(ctx, "torch", [256, 512], 200)
    peer(ctx, "infer-torch-b256", ("torch_resnet50_infer.py", "--batch", "256"), 90)
    _by_input(ctx, "torch", [1, 64], 230)


def inference_jax(ctx: Context) -> None:
    _by_input(ctx, "jax", [1, 64, 256, 512], 200)
    peer(ctx, "infer-jax-b256", ("jax_resnet50_infer.py", "--batch", "256"), 90)


def infer_sweep(ctx: Context) -> None:
    """The sweep of batch sizes 1-512 from float32 pageable memory (eager PyTorch; JAX jits) and dynamic
    batching under Poisson load in process (the spec's serve rates)."""
    spec = ctx.spec(INFER_SPEC, "resnet50_infer", {"compile": False, "infer.input": ["float32_pageable"],
                                                   "infer.ablation": None, "infer.latency_samples": 20,
                                                   "timeout_s": 220},
                    {**SMOKE_INFER, "serve.rates": [20], "serve.requests": 40, "serve.max_duration_s": 2,
                     "serve.max_batch": 4, "serve.pad_multiple": 2})
    for backend in ("torch", "jax"):
        ctx.cnnbench(f"{backend} sweep and in-process serving", "infer", spec, "h200_infer.csv", 240, "-b", backend)


def ablation(ctx: Context) -> None:
    """experiments/resnet50_ablation.toml: each toggle against the fp32 baseline, 3 interleaved rounds."""
    spec = ctx.spec("experiments/resnet50_ablation.toml", "resnet50_ablation", {"timeout_s": 230},
                    {**SMOKE_INFER, "infer.ablation_batch": 3, "infer.rounds": 2})
    for backend in ("torch", "jax"):
        ctx.cnnbench(f"{backend} ablation", "infer", spec, "h200_ablation.csv", 250, "-b", backend)


def frames(ctx: Context) -> None:
    """A batch of 16 x 3 x 1080 x 1920 split into decode, copy and compute (benchmarks/data_split.py),
    and the plain PyTorch peer over the same frames (benchmarks/plain_peers/torch_frames.py)."""
    data = frame_samples(ctx)
    if data is None:
        return
    produced = ctx.scratch("split.json")
    size = ["64", "96"] if ctx.smoke else ["1080", "1920"]
    args = ["--jpeg", data / "images" / "astronaut", "--video", data / "video.mp4", "--size", *size,
            "--out", produced]
    args += (["--batch", "4", "--workers", "1", "--precision", "fp32", "--device", "cpu", "--batches", "1",
              "--repeat", "2"]
             if ctx.smoke else ["--batch", "16", "--workers", "14", "--precision", "bf16", "--compile"])
    ctx.run("frames split", [ctx.python, "benchmarks/data_split.py", *args], 200)
    ctx.keep(produced, "h200_data_split.jsonl")
    if ctx.smoke:
        ctx.skip("frames peer", "the peer is torchvision's ResNet-50 on a GPU; SMOKE runs on the CPU")
    elif ctx.missing("torchvision"):
        ctx.skip("frames peer", "torchvision is not installed")
    else:
        peer(ctx, "frames-torch-bf16", ("torch_frames.py", "--precision", "bf16"), 150, "h200_data_peer.jsonl")


def frames_infer(ctx: Context) -> None:
    """`cnnbench infer experiments/frames_1080p_infer.toml`: the frames, compiled, bf16 and fp16, both
    frameworks (frames decoded off the clock)."""
    if frame_samples(ctx) is None:
        return
    spec = ctx.spec("experiments/frames_1080p_infer.toml", "frames_1080p_infer", {"timeout_s": 230},
                    {**SMOKE_INFER, "model": "resnet18_cifar", "image_size": [64, 96], "compile": False,
                     "precision": "fp32", "infer.input": ["resident"],  # a CPU has no pinned copy to make
                     "infer.batch_sizes": [4], "channels": None, "num_classes": None})
    for backend in ("torch", "jax"):
        ctx.cnnbench(f"{backend} 1080p frames", "infer", spec, "h200_data.csv", 250, "-b", backend)
