"""PyTorch backend's face: the contract functions, the trainer chosen by strategy.

``ddp`` (:mod:`backends.torch.train`): DistributedDataParallel, one process per device, started by
torchrun; gloo on CPU (emulated devices: N processes sharing the cores), NCCL on GPU (one process per
GPU; a single process trains the bare model in its group of one unless ``wrap_ddp_single``). ``pipeline``
(:mod:`backends.torch.pipeline`): one process per stage, GPipe. PyTorch is imported only inside the
trainers, never here.
"""

from __future__ import annotations

from pathlib import Path

from cnnbench import envinfo
from cnnbench.backend import BuildContext, Layout
from cnnbench.model.pipeline import pipeline_unsupported
from cnnbench.run.launch import cpu_threads_per_process
from cnnbench.runs import Run


def version() -> str | None:
    return envinfo.backend_version("torch")



def devices() -> list[str]:
    """What PyTorch sees: each CUDA device, then the CPU. Imports torch: `cnnbench env` calls it in a
    process of its own."""
    import torch

    found = [f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(torch.cuda.device_count())]
    return [*found, f"cpu ({torch.get_num_threads()} threads)"]


def launch_layout(run: Run) -> Layout:
    processes = run.devices_per_host
    env = {"OMP_NUM_THREADS": str(cpu_threads_per_process(processes))}
    if run.device_kind == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU run must not touch a GPU that happens to be there
    if run.options.deterministic:  # cuBLAS refuses deterministic mode without a fixed workspace
        env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    cache = run.options.compile_cache_dir
    if cache:  # read when inductor first starts: set before the worker imports torch
        env.update(TORCHINDUCTOR_CACHE_DIR=str(Path(cache).expanduser().resolve() / "torch"),
                   TORCHINDUCTOR_FX_GRAPH_CACHE="1", TORCHINDUCTOR_AUTOGRAD_CACHE="1")
    if processes == 1 and run.hosts == 1:
        # One process: the environment torchrun would give it, without torchrun's own interpreter
        # (which costs a second PyTorch import per run). The process group is the same.
        env.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
        return Layout(processes=1, env=env)
    return Layout(processes=processes, env=env, torchrun=True)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def not_supported(run: Run) -> str | None:
    """What PyTorch itself lacks for a run (it becomes a ``skipped`` row with this reason)."""
    if run.strategy in ("tensor", "data+tensor"):
        return (f"not supported: strategy {run.strategy}: DTensor in torch {version()} shards convolutions along "
                f"the batch only (aten.convolution's sharding rule replicates the weight), so channel-sharded "
                f"tensor parallelism for CNNs has no native support; use jax for tensor parallelism")
    return None


def unsupported(run: Run) -> str | None:
    """Why a configuration is impossible here (the spec is refused before anything is launched)."""
    if run.strategy == "pipeline":
        return pipeline_unsupported(run.model, run.devices, run.hosts, run.global_batch, run.microbatches)
    return None


def build(run: Run, ctx: BuildContext):
    if run.strategy == "pipeline":
        from backends.torch.pipeline import PipelineTrainer

        return PipelineTrainer(run, ctx)
    from backends.torch.train import TorchTrainer

    return TorchTrainer(run, ctx)


def infer_unsupported(variant) -> str | None:
    """Every inference toggle and input applies to PyTorch (fp16 and pinned memory on GPUs only)."""
    return None


def build_inference(run: Run, variant):
    from backends.torch.infer import TorchInference

    return TorchInference(run, variant)


def build_serve_engine(run: Run, variant, top_k: int, pad_multiple: int):
    """The engine of `cnnbench serve`: pinned staging buffers, a copy stream, top-k on the device."""
    from backends.torch.serve import TorchServeEngine

    return TorchServeEngine(run, variant, top_k, pad_multiple)
