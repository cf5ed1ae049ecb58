"""Real input: sample data written once per cache folder, training from JPEG files beside the same
backend on resident synthetic images, JPEG decode speed and the on-device prepare."""

from __future__ import annotations

from pathlib import Path

from runbook.pairs import TRAIN_SPEC
from runbook.steps import SMOKE_TRAIN, Context, install_wheels, wheels_hint

# (folder, `cnnbench samples` arguments on the GPU host, in SMOKE)
SAMPLES = {
    "samples": (["--size", "375", "500", "--per-class", "256", "--classes", "8", "--video-frames", "0"],
                ["--size", "48", "64", "--per-class", "10", "--classes", "2", "--video-frames", "0"]),
    "frames": (["--size", "1080", "1920", "--per-class", "48", "--classes", "1", "--video-frames", "48"],
               ["--size", "64", "96", "--per-class", "16", "--classes", "1", "--video-frames", "16"]),
}


def data_root(ctx: Context) -> Path:
    return Path(ctx.env()["CNNBENCH_DATA"])


def samples(ctx: Context, kind: str) -> Path | None:
    """The sample folder of KIND, written by `cnnbench samples` unless an earlier section of the same
    cache wrote it (a marker file says it finished)."""
    folder = data_root(ctx) / kind
    done = folder / ".complete"
    if done.exists():
        return folder
    gpu_args, smoke_args = SAMPLES[kind]
    step = ctx.run(f"{kind} data", [ctx.python, "-m", "cnnbench.cli", "samples", folder,
                                    *(smoke_args if ctx.smoke else gpu_args)], 150, needed=True)
    if not step or not step.ok:
        ctx.skip(f"steps on the {kind} data", "the sample data was not written")
        return None
    done.touch()
    return folder


def frame_samples(ctx: Context) -> Path | None:
    return samples(ctx, "frames")


IMAGEFOLDER = "experiments/resnet50_imagefolder.toml"
SMOKE_FILES = {"image_size": 32, "per_device_batch": 4, "device": "cpu", "precision": "fp32", "data.workers": 1,
               "model": "resnet18_cifar", "timing.window_steps": 2}


def real_input(ctx: Context) -> None:
    """ResNet-50 bf16 at 224 from 2,048 JPEG files (PyTorch DataLoader, JAX grain) beside the same
    backend on resident synthetic images; PyTorch with nvJPEG decode last."""
    missing = install_wheels(ctx, ["simplejpeg", "grain"])  # the JPEG decoder, JAX's loader
    if "simplejpeg" in missing:
        ctx.say(f"simplejpeg is not installed: decode falls back to OpenCV ({wheels_hint()})")
    if samples(ctx, "samples") is None:
        return
    files = ctx.spec(IMAGEFOLDER, "resnet50_imagefolder", {"timeout_s": 200}, SMOKE_FILES)
    synthetic = ctx.spec(TRAIN_SPEC, "resnet50_synthetic",
                         {"timing.warmup_steps": 5, "timing.window_steps": 10, "timing.windows": 3,
                          "jax.strategies": ["sharded"], "timeout_s": 100}, SMOKE_TRAIN)
    for backend in ("torch", "jax"):
        if backend == "jax" and "grain" in missing:
            ctx.skip("jax from files", f"grain is not installed: {wheels_hint()}")
        else:
            ctx.cnnbench(f"{backend} from files", "run", files, "h200_data.csv", 220, "-b", backend, "-v")
        ctx.cnnbench(f"{backend} synthetic", "run", synthetic, "h200_data.csv", 120, "-b", backend)
    if ctx.smoke:
        ctx.skip("torch nvJPEG decode", "GPU decode needs a GPU")
        return
    gpu_decode = ctx.spec(IMAGEFOLDER, "resnet50_imagefolder_gpu_decode",
                          {"data.decode_device": "gpu", "timeout_s": 150})
    ctx.cnnbench("torch nvJPEG decode", "run", gpu_decode, "h200_data.csv", 170, "-b", "torch", "-v")


def input_prep(ctx: Context) -> None:
    """JPEG decoders on one core of the host, each framework's on-device prepare, ms per batch."""
    produced = ctx.scratch("decode.json")
    seconds = ["--seconds", "0.3", "--rounds", "2"] if ctx.smoke else ["--seconds", "3", "--rounds", "5"]
    ctx.run("decode speed, one core", [ctx.python, "benchmarks/decode_speed.py", *seconds, "--json", produced], 240)
    ctx.keep(produced, "h200_decode.jsonl")
    for framework in ("torch", "jax"):
        produced = ctx.scratch(f"prepare_{framework}.jsonl")
        mode = ["--device", "cpu", "--smoke"] if ctx.smoke else ["--device", "gpu"]
        ctx.run(f"{framework} prepare", [ctx.python, "benchmarks/prepare_speed.py", framework, *mode, "--json",
                                         produced], 150)
        ctx.keep(produced, "h200_prepare_speed.jsonl")
