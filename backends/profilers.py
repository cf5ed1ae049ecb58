"""Trace one window with the framework's own profiler (``--profile DIR``); imported in workers only.

Each returns a context manager that writes into ``directory``: PyTorch a Chrome trace
(``trace.json``, open in Perfetto or chrome://tracing), JAX and TensorFlow a TensorBoard profile
(``plugins/profile/...``, open with TensorBoard's profile plugin or xprof).

Inside the profiler, the body runs in one host scope named :data:`WINDOW_SCOPE`: the health table
measures its shares over that scope's span, which is the timed window itself (the protocol syncs
the device before entering and before leaving), not over the profiler session, which also holds
the tracer's own start and stop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from cnnbench.report.traces import WINDOW_SCOPE


@contextlib.contextmanager
def torch_trace(directory: Path, gpu: bool, module=None) -> Iterator[None]:
    """``module``: an eager model whose layers get ``layer:<name>`` scopes in the trace (the health
    table's top layers); leave it out for a compiled model (hooks would make dynamo recompile)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    directory.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    with profile(activities=activities) as traced, layer_scopes(module), \
            torch.profiler.record_function(WINDOW_SCOPE):
        yield
    traced.export_chrome_trace(str(directory / "trace.json"))


@contextlib.contextmanager
def layer_scopes(module) -> Iterator[None]:
    """A ``record_function("layer:<module path>")`` scope around each leaf module's forward."""
    if module is None:
        yield
        return
    import torch

    opened: list = []

    def enter(name: str):
        def hook(_module, _args) -> None:
            scope = torch.profiler.record_function(f"layer:{name}")
            scope.__enter__()
            opened.append(scope)
        return hook

    def leave(_module, _args, _output) -> None:
        if opened:
            opened.pop().__exit__(None, None, None)

    handles = []
    for name, child in module.named_modules():
        if name and next(child.children(), None) is None:
            handles += [child.register_forward_pre_hook(enter(name)), child.register_forward_hook(leave)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def jax_trace(directory: Path) -> Iterator[None]:
    import jax

    directory.mkdir(parents=True, exist_ok=True)
    jax.profiler.start_trace(str(directory))
    try:
        with jax.profiler.TraceAnnotation(WINDOW_SCOPE):
            yield
    finally:
        jax.profiler.stop_trace()


@contextlib.contextmanager
def tf_trace(directory: Path) -> Iterator[None]:
    import tensorflow as tf

    directory.mkdir(parents=True, exist_ok=True)
    tf.profiler.experimental.start(str(directory))
    try:
        with tf.profiler.experimental.Trace(WINDOW_SCOPE):
            yield
    finally:
        tf.profiler.experimental.stop()


def for_engine(engine: str, directory: Path, gpu: bool) -> contextlib.AbstractContextManager:
    """The profiler of an engine named torch, jax or tensorflow."""
    if engine == "torch":
        return torch_trace(directory, gpu)
    return jax_trace(directory) if engine == "jax" else tf_trace(directory)
