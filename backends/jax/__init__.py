"""JAX/Flax backend's face: the contract functions, the trainer chosen by strategy.

- ``sharded``, ``pmap``, ``tensor``, ``data+tensor``: one jitted step over a device mesh, or
  ``jax.pmap`` (:mod:`backends.jax.train`).
- ``pipeline``: one stage per device, GPipe micro-batches (:mod:`backends.jax.pipeline`).

Emulated devices come from ``--xla_force_host_platform_device_count``, set here in the launch layout
before JAX is imported; across hosts ``jax.distributed.initialize`` joins the processes. JAX is
imported only inside the trainers and :func:`devices`, never at module level.
"""

from __future__ import annotations

import os
from pathlib import Path

from cnnbench import envinfo
from cnnbench.backend import BuildContext, Layout
from cnnbench.model.pipeline import pipeline_unsupported
from cnnbench.runs import Run


def version() -> str | None:
    return envinfo.backend_version("jax")



def unsupported(run: Run) -> str | None:
    """Why a configuration is impossible here (the spec is refused before anything is launched)."""
    if run.strategy == "pmap" and run.hosts > 1:
        return "strategy pmap runs on one host here; use sharded across hosts"
    if run.strategy == "data+tensor" and (run.devices % run.model_parallel or run.devices == run.model_parallel):
        return (f"data+tensor splits {run.devices} devices into data x model = ? x {run.model_parallel}: needs a "
                f"multiple of model_parallel larger than it (use tensor for model parallelism alone)")
    if run.strategy in ("tensor", "data+tensor") and run.hosts > 1:
        return "tensor parallel strategies run on one host here"
    if run.strategy == "pipeline":
        return pipeline_unsupported(run.model, run.devices, run.hosts, run.global_batch, run.microbatches)
    return None


def launch_layout(run: Run) -> Layout:
    env = {"TF_CPP_MIN_LOG_LEVEL": "2"}
    # the caller's own XLA_FLAGS stay (the worker's environment replaces the variable), then the spec's
    flags = [os.environ.get("XLA_FLAGS", ""), run.options.xla_flags]
    if run.device_kind == "cpu":
        env["JAX_PLATFORMS"] = "cpu"
        flags.insert(0, f"--xla_force_host_platform_device_count={run.devices_per_host}")
    if any(flags):
        env["XLA_FLAGS"] = " ".join(f for f in flags if f)
    cache = run.options.compile_cache_dir
    if cache:  # JAX reads these at import: every compilation is kept, however quick
        env.update(JAX_COMPILATION_CACHE_DIR=str(Path(cache).expanduser().resolve() / "jax"),
                   JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1")
    return Layout(processes=1, env=env)


def build(run: Run, ctx: BuildContext):
    if run.strategy == "pipeline":
        from backends.jax.pipeline import JaxPipelineTrainer

        return JaxPipelineTrainer(run, ctx)
    from backends.jax.train import JaxTrainer

    return JaxTrainer(run, ctx)


def infer_unsupported(variant) -> str | None:
    if variant.channels_last:
        return "XLA picks the layout itself (Flax models take NHWC); channels_last is a PyTorch option"
    return None


def build_inference(run: Run, variant):
    from backends.jax.infer import JaxInference

    return JaxInference(run, variant)


def build_serve_engine(run: Run, variant, top_k: int, pad_multiple: int):
    """The engine of `cnnbench serve`: staging buffers, asynchronous device_put, top-k in the jit."""
    from backends.jax.serve import JaxServeEngine

    return JaxServeEngine(run, variant, top_k, pad_multiple)


def devices() -> list[str]:
    import jax

    return [f"{d.platform}:{d.id} {d.device_kind}" for d in jax.devices()]
