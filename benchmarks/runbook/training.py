"""The training sections: the baseline rows, cnnbench beside the plain peers, one option at a time,
the DDP compile options, Keras' engines, model parallelism and pipeline micro-batches."""

from __future__ import annotations

from runbook.pairs import PERF_ROWS, TRAIN_SPEC, compare, run_pair
from runbook.steps import SMOKE_TRAIN, Context


def baseline(ctx: Context) -> None:
    """Every training path once: ResNet-50 (torch eager and compiled, jax sharded and pmap), ResNet-18."""
    for model, base, rows, smoke in (("resnet50", TRAIN_SPEC, "h200_resnet50.csv", SMOKE_TRAIN),
                                     ("resnet18", "experiments/resnet18_synthetic.toml", "h200_resnet18.csv",
                                      SMOKE_TRAIN)):
        stem = base.rsplit("/", 1)[-1].removesuffix(".toml")
        for label, changes, limit in (("torch eager", {"backends": ["torch"]}, 80),
                                      ("torch compiled", {"backends": ["torch"], "compile": True}, 120),
                                      ("jax", {"backends": ["jax"], "jax.strategies": ["sharded", "pmap"]}, 110)):
            spec = ctx.spec(base, stem, {**changes, "timeout_s": limit}, smoke)
            ctx.cnnbench(f"{model} {label}", "run", spec, rows, limit + 20)


def training(ctx: Context) -> None:
    for name in ("eager", "model", "step"):
        run_pair(ctx, name)


def training_graphs(ctx: Context) -> None:
    run_pair(ctx, "step-cudagraphs")


def training_jax(ctx: Context) -> None:
    for name in ("jax", "jax-b512"):
        run_pair(ctx, name)


# One option changed at a time in resnet50_synthetic.toml: name -> (changes, limit on the H200).
OPTIONS = {
    "torch_eager_fused": ({"backends": ["torch"], "torch.optimizer_impl": "fused"}, 70),
    "torch_eager_foreach": ({"backends": ["torch"], "torch.optimizer_impl": "foreach"}, 70),
    "torch_compile_reduce_overhead": ({"backends": ["torch"], "compile": True, "torch.compile_mode": "reduce-overhead"},
                                      150),
    "jax_b512": ({"backends": ["jax"], "per_device_batch": 512}, 80),
    "jax_b1024": ({"backends": ["jax"], "per_device_batch": 1024}, 170),  # 100 s ran out in its 5th window (H100)
    "jax_no_command_buffers": ({"backends": ["jax"], "jax.xla_flags": "--xla_gpu_enable_command_buffer="}, 80),
}
# max-autotune benchmarks Triton candidates for each convolution and matmul of the forward and the backward
# (about 12 s for one convolution's 18 candidates on an H100): still compiling after 240 s and, in a section of
# its own, after 450 s (2026-12-07, cold caches). Inductor keeps each autotuned kernel's choice and the Triton
# builds in the compile cache as it goes, so a second call on the same host with the same --cache resumes.
AUTOTUNE_OPTIONS = {
    "torch_compile_max_autotune_no_cudagraphs": ({"backends": ["torch"], "compile": True,
                                                  "torch.compile_mode": "max-autotune-no-cudagraphs"}, 450),
}


def options(ctx: Context, chosen: dict[str, tuple[dict, int]] = OPTIONS) -> None:
    for name, (changes, limit) in chosen.items():
        smoke = {**SMOKE_TRAIN, **({"per_device_batch": 8} if "per_device_batch" in changes else {})}
        spec = ctx.spec(TRAIN_SPEC, name, {"jax.strategies": ["sharded"], "timeout_s": limit, **changes}, smoke)
        ctx.cnnbench(name, "run", spec, "h200_options.csv", limit + 20)


def options_autotune(ctx: Context) -> None:
    options(ctx, AUTOTUNE_OPTIONS)


DDP_MODES = ("ddp_optimizer", "no_optimization", "python_reducer")


def options_ddp(ctx: Context) -> None:
    """The 1-process DDP wrapper with each ddp_compile mode (option rows), beside the peer's --ddp."""
    for mode in DDP_MODES:
        spec = ctx.spec(TRAIN_SPEC, f"torch_ddp_{mode}", {"backends": ["torch"], "compile": True,
                                                          "torch.wrap_ddp_single": True, "torch.ddp_compile": mode,
                                                          "timeout_s": 150}, SMOKE_TRAIN)
        # both step names contain MODE, so that `--only MODE` reruns one pair
        compare(ctx, mode, f"1-process DDP, ddp_compile = {mode}", f"ddp {mode} cnnbench", spec, PERF_ROWS, 170,
                f"ddp-{mode}", ("torch_resnet50.py", "--compile", "step", "--ddp", mode), 150)


def keras(ctx: Context) -> None:
    """experiments/keras_resnet50.toml: Keras' engines beside the native backends (keras-tensorflow is not
    in the spec: TensorFlow's CUDA wheels are not on the GPU host)."""
    spec = ctx.spec("experiments/keras_resnet50.toml", "keras_resnet50", {}, SMOKE_TRAIN)
    ctx.cnnbench("keras engines and native backends", "run", spec, "h200_keras.csv", 500)


MP_SPEC = "experiments/resnet50_model_parallel.toml"


def model_parallel(ctx: Context) -> None:
    spec = ctx.spec(MP_SPEC, "resnet50_model_parallel", {}, {**SMOKE_TRAIN, "per_device_batch": 8})
    for backend, limit in (("torch", 150), ("jax", 200)):
        ctx.cnnbench(f"model parallel {backend}", "run", spec, "h200_model_parallel.csv", limit, "-b", backend)


def microbatches(ctx: Context) -> None:
    """Both frameworks' pipelines on one stage with 1, 2 and 8 micro-batches (4 is in the spec)."""
    for count in (1, 2, 8):
        spec = ctx.spec(MP_SPEC, f"resnet50_pipeline_{count}mb",
                        {"microbatches": count, "torch.strategies": ["pipeline"], "jax.strategies": ["pipeline"]},
                        {**SMOKE_TRAIN, "per_device_batch": 8})
        ctx.cnnbench(f"pipeline, {count} micro-batches", "run", spec, "h200_model_parallel.csv", 170)
