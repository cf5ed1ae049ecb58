"""Runs: what one worker process tree is given (a training :class:`Run` or an :class:`InferRun`) and what
comes back from it (:class:`Outcome`).

A run is plain, typed data: it crosses to the worker as JSON (:meth:`RunCommon.to_json`,
:func:`run_from_json`) and comes back as the same types, options included, so a trainer reads
``run.options.bucket_cap_mb`` with the default declared once in :mod:`cnnbench.options`. Runs are made
by :mod:`cnnbench.expand` (training) and :mod:`cnnbench.infer.plan` (inference).
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from cnnbench.options import OPTIONS_OF, BackendOptions, DataSpec
from cnnbench.table.spread import DEFAULT_SPREAD_LIMIT


@dataclass(frozen=True, kw_only=True)
class RunCommon:
    """What every run has, whatever it does: identity, model, data, devices, options, the timing."""

    mode: ClassVar[str]
    run_id: str
    spec_name: str
    spec_hash: str
    source: str
    backend: str
    strategy: str
    trial: int
    model: str
    dataset: str
    data_path: str
    image_size: tuple[int, int]  # (height, width)
    channels: int
    num_classes: int
    synthetic_size: int
    device_kind: str  # cpu | gpu
    devices: int
    hosts: int
    per_device_batch: int
    global_batch: int
    precision: str
    compile: bool
    warmup_steps: int
    windows: int
    window_steps: int
    seed: int
    timeout_s: float
    options: BackendOptions  # the backend's own table ([torch], [jax], ...), compile_cache_dir resolved
    data: DataSpec = DataSpec()  # the spec's [data] table (real input)
    host_rank: int = 0
    coordinator: str = ""
    profile_dir: str = ""  # --profile: trace one window into this folder
    spread_limit: float = DEFAULT_SPREAD_LIMIT  # timing.spread_limit: a row spread more is flagged noisy

    @property
    def device_type(self) -> str:
        if self.device_kind == "gpu":
            return "gpu"
        return "cpu-emulated" if self.devices > 1 else "cpu"

    @property
    def devices_per_host(self) -> int:
        return self.devices // self.hosts

    @property
    def label(self) -> str:
        return (f"{self.backend}/{self.strategy} {self.model} {self.dataset} x{self.devices} "
                f"{self.device_type} b{self.per_device_batch} {self.precision} trial {self.trial}")

    def to_json(self) -> str:
        return json.dumps({"mode": self.mode, **dataclasses.asdict(self)})


@dataclass(frozen=True, kw_only=True)
class Run(RunCommon):
    """One training configuration: everything a worker needs to train it."""

    mode: ClassVar[str] = "train"
    scaling: str
    sync_bn: bool
    lr: float
    momentum: float
    weight_decay: float
    nesterov: bool
    schedule: str
    warmup_epochs: float
    epochs: int  # 0 for synthetic data: no evaluation
    steps_per_epoch: int  # 0 for synthetic data
    total_steps: int
    target_accuracy: float
    model_parallel: int = 1  # devices per model copy (data+tensor)
    microbatches: int = 1  # pipeline micro-batches per step


@dataclass(frozen=True)
class Variant:
    """One inference configuration of a model."""

    name: str
    precision: str = "fp32"
    compile: bool = False
    compile_mode: str = "default"
    channels_last: bool = False
    # Where each batch starts (one of options.INFER_INPUTS): resident on the device; uint8 NHWC in
    # pinned host memory, converted and normalised on the device; float32 (normalised on the
    # host) in pinned or in pageable memory. Pinned copies are issued with non_blocking.
    input: str = "float32_pageable"
    pad_multiple: int = 0  # pad every batch up to a multiple of this (0: never)
    cuda_graphs: bool = False  # serving (PyTorch on a GPU): one captured CUDA graph per padded batch shape

    @property
    def pinned(self) -> bool:
        return self.input.endswith("_pinned")

    def options_text(self) -> str:
        text = (f"channels_last={self.channels_last};compile_mode={self.compile_mode};"
                f"input={self.input};pad_multiple={self.pad_multiple}")
        return text + ";cuda_graphs=True" if self.cuda_graphs else text


@dataclass(frozen=True)
class InferJob:
    """One measurement of an inference run: a variant at a batch size (``sweep``, ``ablation``), or the
    in-process micro-batcher under one offered load (``serve``)."""

    kind: Literal["sweep", "ablation", "serve"]
    variant: Variant
    batch: int  # the batch size; serve: the batcher's max batch
    # serve only: the offered load and the batcher's settings
    rate: float = 0.0
    timeout_ms: float = 0.0
    requests: int = 0
    max_duration_s: float = 0.0
    pad_multiple: int = 1

    @property
    def label(self) -> str:
        if self.kind == "serve":
            return f"serve {self.variant.name} {self.rate:g} req/s"
        return f"{self.kind} {self.variant.name} b{self.batch}"


@dataclass(frozen=True, kw_only=True)
class InferRun(RunCommon):
    """A forward-only run on one device: one model per variant, its jobs measured in order."""

    mode: ClassVar[str] = "infer"
    jobs: tuple[InferJob, ...] = ()
    latency_samples: int = 30  # batches timed one at a time for the latency percentiles
    rounds: int = 1  # the ablation's variants are measured in this many interleaved rounds


AnyRun = Run | InferRun


@dataclass
class Outcome:
    """What came back from one process tree."""

    status: str  # ok | failed
    result: dict = field(default_factory=dict)
    error: str = ""
    wall_s: float = 0.0
    log_tail: list[str] = field(default_factory=list)
    worker_reported: bool = False  # the error is one a worker caught and wrote (not a crash or a timeout)
    skipped_inputs: list[tuple[str, str]] = field(default_factory=list)  # (file, why) of [data] corrupt = "skip"


def from_plain(cls: Any, value: Any) -> Any:
    """A dataclass (or tuple, or scalar) of type ``cls`` rebuilt from what ``dataclasses.asdict`` and JSON
    made of it: nested tables become their dataclasses again and lists their tuples."""
    if dataclasses.is_dataclass(cls):
        hints = typing.get_type_hints(cls)
        known = {f.name for f in dataclasses.fields(cls) if f.init}
        return cls(**{k: from_plain(hints[k], v) for k, v in value.items() if k in known})
    if typing.get_origin(cls) is tuple:
        args = typing.get_args(cls)
        item = args[0] if len(args) == 2 and args[1] is Ellipsis else None
        return tuple(from_plain(item or args[i], v) for i, v in enumerate(value))
    return value


def run_from_json(text: str) -> AnyRun:
    fields = json.loads(text)
    cls = InferRun if fields.pop("mode", "train") == "infer" else Run
    options = OPTIONS_OF[fields["backend"]]
    fields["options"] = from_plain(options, fields["options"])
    hints = typing.get_type_hints(cls)
    return cls(**{k: v if k == "options" else from_plain(hints[k], v) for k, v in fields.items()})
