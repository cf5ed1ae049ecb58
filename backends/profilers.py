"""Trace one window with the framework's own profiler (``--profile DIR``); imported in workers only.

Each returns a context manager that writes into ``directory``: PyTorch a Chrome trace
(``trace.json``, open in Perfetto or chrome://tracing), JAX and TensorFlow a TensorBoard profile
(``plugins/profile/...``, open with TensorBoard's profile plugin or xprof).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def torch_trace(directory: Path, gpu: bool) -> Iterator[None]:
    from torch.profiler import ProfilerActivity, profile

    directory.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    with profile(activities=activities) as traced:
        yield
    traced.export_chrome_trace(str(directory / "trace.json"))


@contextlib.contextmanager
def jax_trace(directory: Path) -> Iterator[None]:
    import jax

    directory.mkdir(parents=True, exist_ok=True)
    jax.profiler.start_trace(str(directory))
    try:
        yield
    finally:
        jax.profiler.stop_trace()


@contextlib.contextmanager
def tf_trace(directory: Path) -> Iterator[None]:
    import tensorflow as tf

    directory.mkdir(parents=True, exist_ok=True)
    tf.profiler.experimental.start(str(directory))
    try:
        yield
    finally:
        tf.profiler.experimental.stop()


def for_engine(engine: str, directory: Path, gpu: bool) -> contextlib.AbstractContextManager:
    """The profiler of an engine named torch, jax or tensorflow."""
    if engine == "torch":
        return torch_trace(directory, gpu)
    return jax_trace(directory) if engine == "jax" else tf_trace(directory)
