"""What the PyTorch trainers share: the optimizer's implementation switch, the cuDNN switches, pinning."""

from __future__ import annotations

from cnnbench.options import TorchOptions


def optimizer_kwargs(impl: str, on_gpu: bool) -> dict[str, bool]:
    """torch.optim.SGD's implementation switch: one fused kernel, foreach (multi-tensor) or a loop."""
    if impl == "auto":
        impl = "fused" if on_gpu else "foreach"
    return {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}[impl]


def apply_cudnn_options(options: TorchOptions) -> None:
    """``[torch] cudnn_benchmark`` (default on) and ``deterministic`` for a GPU process."""
    import torch

    deterministic = options.deterministic
    torch.backends.cudnn.benchmark = options.cudnn_benchmark
    torch.backends.cudnn.deterministic = deterministic
    if deterministic:  # cuBLAS needs CUBLAS_WORKSPACE_CONFIG, set by the launch layout
        # warn_only: an op with no deterministic CUDA kernel (e.g. the backward of an adaptive average
        # pool to more than 1x1, scatter_add) warns and stays as it is, rather than failing the run
        torch.use_deterministic_algorithms(True, warn_only=True)


class PinnedMemoryError(RuntimeError):
    """Page-locking host memory failed (named as such, not as a CUDA out-of-memory)."""


def pinned(tensor):
    """``tensor.pin_memory()``, with a failure that names the host limits instead of "CUDA out of memory"."""
    try:
        return tensor.pin_memory()
    except RuntimeError as exc:
        from cnnbench.run.host_memory import pinning_error

        raise PinnedMemoryError(pinning_error(tensor.nbytes, exc)) from exc


def shut_down_loader(loader) -> None:
    """Stop a DataLoader's persistent workers now, while the interpreter is fully alive.

    Left to interpreter exit, a loader with both persistent_workers and pin_memory waits 5 s per
    worker to join (pytorch/pytorch#81794): 14 workers held a finished GPU run past its time limit. There is no
    public call for this; PyTorch Lightning shuts loaders down the same way.
    """
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    iterator = getattr(loader, "_iterator", None)
    if isinstance(iterator, _MultiProcessingDataLoaderIter):
        iterator._shutdown_workers()
    if hasattr(loader, "_iterator"):
        loader._iterator = None
