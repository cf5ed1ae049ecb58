"""The backend contract: what a backend package (``backends/<framework>/``) provides, and how the core
loads one.

A backend package's ``__init__.py`` is its face: plain functions (the :class:`Backend` Protocol), no
framework import at module level, so the launching process can ask it for a process layout without
starting PyTorch, TensorFlow or JAX. Its trainers, inference models and serving engines are built in the
worker (:class:`Trainer`, :class:`InferenceModel`, :class:`ServeEngine`). The core reaches a backend only
through :func:`load`, by the module path its :mod:`cnnbench.registry` entry names; nothing in the core
imports ``backends``.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from cnnbench.data.arrays import Dataset
from cnnbench.data.loader import InputPlan
from cnnbench.registry import REGISTRY
from cnnbench.runs import InferRun, Run, RunCommon, Variant


@dataclass(frozen=True)
class Layout:
    """How a backend wants its processes started on this host."""

    processes: int  # processes on this host
    env: dict[str, str] = field(default_factory=dict)  # set before the worker imports its framework
    torchrun: bool = False  # start through torch.distributed.run


@dataclass(frozen=True)
class BuildContext:
    """What the worker hands a backend's ``build`` besides the run."""

    dataset: Dataset  # full arrays (NCHW float32); each process takes its own shard
    lr_table: np.ndarray  # learning rate for every step
    process_index: int  # this process among all processes of the run
    process_count: int
    local_rank: int  # this process among those of its host
    # uint8 sources (image folders, video, CIFAR-10 training images): what the input pipeline reads
    inputs: InputPlan | None = None


class Trainer(Protocol):
    """A model, its optimizer, its input pipeline and one compiled/traced training step."""

    steps_per_epoch: int  # 0 when there are no epochs (synthetic data)
    # A trainer whose framework owns the loop (Keras fit) sets owns_loop and implements
    # run_loop(protocol), calling protocol.before_step/after_step around every step.
    owns_loop: bool = False
    # A trainer whose framework can fail the process in its exit-time destructors after a run that
    # finished sets leaves_at_once: the worker then ends with os._exit once close() has run and its
    # result is written (cnnbench.process_exit.leave).
    leaves_at_once: bool = False

    def step(self, batch=None) -> None:
        """One global training step on ``batch`` (default: the next one); asynchronous where the
        framework is."""

    # Optional: ``next_batch()`` returns the next batch ready for ``step(batch)``; the runner then
    # times how long each step waited for its input (data_wait_* columns).

    def sync(self) -> None:
        """Block until every device (and, across processes, every rank) has finished its work."""

    def train_loss(self) -> float:
        """Mean training loss over the steps since the last call (all devices)."""

    def evaluate(self) -> tuple[float, float]:
        """(loss, accuracy) on the whole test split, BN in inference mode."""

    def predict(self, images: np.ndarray) -> np.ndarray:
        """Logits for NCHW float32 images, inference mode, float32."""

    def param_count(self) -> int: ...

    def get_weights(self) -> dict[str, np.ndarray]:
        """Framework-neutral weights: PyTorch state-dict names and layouts, in layer order."""

    def set_weights(self, weights: dict[str, np.ndarray]) -> None: ...

    def peak_memory_bytes(self) -> int | None: ...

    def device_name(self) -> str: ...

    # Optional: ``close()`` releases process-group resources at the end of a run.


class InferenceModel(Protocol):
    def host_batch(self, images: np.ndarray, input: str | None = None) -> Any:
        """Images -> the batch where ``input`` (default: the variant's own) starts it, untimed:
        float32 NCHW images for the float32 inputs and ``resident`` (placed on the device), uint8
        NHWC pixels for ``uint8_pinned``."""

    def infer(self, host_batch: Any) -> Any:
        """Copy to the device (unless resident), convert and normalise uint8 there, run the forward
        pass; asynchronous where the framework is."""

    def fetch(self, output: Any) -> np.ndarray:
        """Logits on the host, float32 (waits for them)."""

    def sync(self) -> None: ...

    def profiler(self, directory: Path) -> contextlib.AbstractContextManager: ...

    def device_name(self) -> str: ...

    def peak_memory_bytes(self) -> int | None: ...


class ServeEngine(Protocol):
    """A model on one device, fed from host staging buffers of uint8 NHWC images."""

    image_shape: tuple[int, int, int]  # (H, W, C) of one request
    pad_multiple: int  # launches pad each batch to a multiple of this (compiled models see few shapes)

    def staging_buffers(self, count: int, max_batch: int) -> list[np.ndarray]:
        """``count`` host buffers of shape (max_batch, H, W, C), uint8 (page-locked on a GPU)."""

    def launch(self, index: int, valid: int) -> Any:
        """Start copy + forward of the first ``valid`` images of buffer ``index``; do not wait."""

    def collect(self, handle: Any) -> tuple[np.ndarray, np.ndarray]:
        """Wait for a launched batch: (top-k class ids, top-k probabilities), ``valid`` rows each."""

    def infer_now(self, images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The plain path: one synchronous forward of these images, no staging, no batching."""

    def device_name(self) -> str: ...


class Backend(Protocol):
    """What every backend package's face provides. The first three are required; for the others
    :func:`load` supplies the default named in each docstring when a package leaves them out."""

    def version(self) -> str | None:
        """The framework's version; None when it is not installed (the run becomes a skipped row)."""

    def launch_layout(self, run: RunCommon) -> Layout:
        """Processes per host and the environment they start with (device emulation, caches)."""

    def build(self, run: Run, ctx: BuildContext) -> Trainer:
        """In the worker: model, optimizer, input pipeline and one compiled step, ready to call."""

    def unsupported(self, run: Run) -> str | None:
        """Why a configuration is impossible (the spec is refused before launch). Default: None."""

    def not_supported(self, run: Run) -> str | None:
        """What the framework itself lacks for a run ("not supported: ...": a skipped row, so that a
        comparison shows the gap). Default: None."""

    def infer_unsupported(self, variant: Variant) -> str | None:
        """Why an inference variant cannot run here. Default: the backend has no inference path."""

    def build_inference(self, run: InferRun, variant: Variant) -> InferenceModel:
        """In the worker: one model configured as ``variant`` says. Default: refused."""

    def build_serve_engine(self, run: InferRun, variant: Variant, top_k: int, pad_multiple: int) -> ServeEngine:
        """The engine of ``cnnbench serve``. Default: refused (the plan allows serving only for backends
        that have one)."""

    def devices(self) -> list[str]:
        """The devices the framework sees (called in a process of its own). Default: not listed."""


class LoadedBackend:
    """A backend package behind the :class:`Backend` contract, its optional functions defaulted."""

    def __init__(self, name: str, module: ModuleType) -> None:
        self.name, self.module = name, module

    def _optional(self, function: str) -> Callable[..., Any] | None:
        return getattr(self.module, function, None)

    def version(self) -> str | None:
        return self.module.version()

    def launch_layout(self, run: RunCommon) -> Layout:
        return self.module.launch_layout(run)

    def build(self, run: Run, ctx: BuildContext) -> Trainer:
        return self.module.build(run, ctx)

    def unsupported(self, run: Run) -> str | None:
        function = self._optional("unsupported")
        return function(run) if function else None

    def not_supported(self, run: Run) -> str | None:
        function = self._optional("not_supported")
        return function(run) if function else None

    @property
    def has_inference(self) -> bool:
        return self._optional("build_inference") is not None

    @property
    def has_serve_engine(self) -> bool:
        return self._optional("build_serve_engine") is not None

    def infer_unsupported(self, variant: Variant) -> str | None:
        function = self._optional("infer_unsupported")
        if function is None or not self.has_inference:
            return f"the {self.name} backend has no inference path (use torch, tensorflow or jax)"
        return function(variant)

    def build_inference(self, run: InferRun, variant: Variant) -> InferenceModel:
        function = self._optional("build_inference")
        if function is None:
            raise NotImplementedError(f"the {self.name} backend has no inference path")
        return function(run, variant)

    def build_serve_engine(self, run: InferRun, variant: Variant, top_k: int, pad_multiple: int) -> ServeEngine:
        function = self._optional("build_serve_engine")
        if function is None:
            raise NotImplementedError(f"the {self.name} backend has no serving engine")
        return function(run, variant, top_k, pad_multiple)

    def devices(self) -> list[str]:
        function = self._optional("devices")
        if function is None:
            raise NotImplementedError(f"the {self.name} backend does not list its devices")
        return function()


def load(name: str) -> LoadedBackend:
    """Import a backend's face by its registry entry's module path (cheap: no framework import)."""
    return LoadedBackend(name, importlib.import_module(REGISTRY[name].module))
