"""Expansion: a spec -> the training runs it stands for, in the order they execute; the timing plan.

Device availability and what a backend can run are checked here, before anything is launched.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import uuid
from typing import Any

from cnnbench.backend import load as load_backend
from cnnbench.data.loader import input_unsupported
from cnnbench.errors import SpecError
from cnnbench.model.facts import MODELS
from cnnbench.runs import Run
from cnnbench.spec import Spec, check_training_batches, dataset_info_for, spec_hash

# Emulated CPU devices share the machine's cores; beyond this they only measure contention.
MAX_EMULATED_DEVICES = max(8, os.cpu_count() or 1)


def plan_windows(total_steps: int, steps_per_epoch: int, warmup_steps: int, windows: int,
                 window_steps: int) -> list[tuple[int, int]]:
    """Step ranges [start, end) of the timed windows.

    Step 0 is the first step (timed alone), then ``warmup_steps`` discarded steps. A window never
    spans an epoch boundary, because the evaluation at the end of an epoch must not be timed and the
    device is synchronized only at the ends of a window; a window that would cross one starts at
    the next epoch instead. Raises ValueError when the windows do not fit.
    """
    if steps_per_epoch and window_steps > steps_per_epoch:
        raise ValueError(f"timing.window_steps {window_steps} exceeds the {steps_per_epoch} steps "
                         f"of one epoch")
    plan, start = [], 1 + warmup_steps
    while len(plan) < windows:
        if steps_per_epoch and start % steps_per_epoch + window_steps > steps_per_epoch:
            start = (start // steps_per_epoch + 1) * steps_per_epoch
        if start + window_steps > total_steps:
            raise ValueError(f"the timing protocol needs {windows} windows of {window_steps} steps after "
                             f"1 + {warmup_steps} steps, but the run has only {total_steps} steps")
        plan.append((start, start + window_steps))
        start += window_steps
    return plan


def protocol_steps(warmup_steps: int, windows: int, window_steps: int) -> int:
    return 1 + warmup_steps + windows * window_steps


def count_gpus() -> int:
    """GPUs on this host, asked of nvidia-smi so that no framework is imported here."""
    if not shutil.which("nvidia-smi"):
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def resolve_device_kind(requested: str) -> str:
    if requested == "auto":
        return "gpu" if count_gpus() else "cpu"
    return requested


def expand(spec: Spec, *, backends: tuple[str, ...] | None = None,
           devices: tuple[int, ...] | None = None, trials: int | None = None, hosts: int = 1,
           host_rank: int = 0, coordinator: str = "", device_kind: str | None = None,
           check_devices: bool = True) -> list[Run]:
    """All runs of a spec, in the order they execute; CLI overrides narrow the spec's lists."""
    src = spec.source
    check_training_batches(spec)
    kind = device_kind or resolve_device_kind(spec.device)
    devices = devices or spec.devices
    backends = backends or spec.backends
    if check_devices:
        _check_devices(spec, kind, devices, hosts)
    info = dataset_info_for(spec)
    if not info.labelled:
        raise SpecError(src, "data_path", f"{spec.data_path} is a flat folder without labels: only `cnnbench infer` "
                                          f"can use it; training needs CLASS/ sub-folders")
    model = MODELS[spec.model]
    if "fp16" in spec.precision and kind != "gpu":
        raise SpecError(src, "precision", "fp16 (with loss scaling) needs a GPU; use fp32 or bf16 on CPU")
    digest = spec_hash(spec)
    runs = []
    batches = [("weak", b) for b in spec.per_device_batch if "weak" in spec.scaling]
    batches += [("strong", b) for b in spec.global_batch if "strong" in spec.scaling]
    for backend, (scaling, batch), precision, n, trial in itertools.product(
        backends, batches, spec.precision, devices, range(trials or spec.trials)
    ):
        options = spec.run_options(backend)
        if scaling == "strong" and batch % n:
            raise SpecError(src, "global_batch", f"strong scaling splits global_batch {batch} over {n} "
                                                 f"devices: {batch} is not divisible by {n}")
        per_device = batch if scaling == "weak" else batch // n
        global_batch = per_device * n
        steps_per_epoch, total_steps, epochs = _steps(spec, info, global_batch)
        for strategy in options.strategies:
            run = Run(
                run_id=uuid.uuid4().hex[:12], spec_name=spec.name, spec_hash=digest, source=src,
                backend=backend, strategy=strategy, trial=trial, model=spec.model,
                dataset=spec.dataset, data_path=spec.data_path, image_size=info.image_size,
                channels=info.channels, num_classes=info.num_classes,
                synthetic_size=max(spec.synthetic_size, global_batch), device_kind=kind, devices=n,
                hosts=hosts, scaling=scaling, per_device_batch=per_device, global_batch=global_batch,
                precision=precision, compile=spec.compile,
                # A pipeline normalises each micro-batch on its own: its rows say so rather than echo the spec.
                sync_bn=spec.sync_bn and model.has_batchnorm and strategy != "pipeline",
                lr=spec.optimizer.lr * global_batch / 256, momentum=spec.optimizer.momentum,
                weight_decay=spec.optimizer.weight_decay, nesterov=spec.optimizer.nesterov,
                schedule=spec.optimizer.schedule, warmup_epochs=spec.optimizer.warmup_epochs,
                epochs=epochs, steps_per_epoch=steps_per_epoch, total_steps=total_steps,
                warmup_steps=spec.timing.warmup_steps, windows=spec.timing.windows,
                window_steps=spec.timing.window_steps, seed=spec.seed,
                target_accuracy=spec.target_accuracy, timeout_s=spec.timeout_s, options=options,
                host_rank=host_rank, coordinator=coordinator, model_parallel=spec.model_parallel,
                microbatches=spec.microbatches, spread_limit=spec.timing.spread_limit,
                data=spec.data,
            )
            problem = load_backend(backend).unsupported(run)
            if problem:
                raise SpecError(src, f"{backend}.strategies", problem)
            input_problem = input_unsupported(run)
            if input_problem:
                raise SpecError(src, *input_problem)
            runs.append(run)
    return runs


def not_supported(run: Run) -> str | None:
    """What the run's framework lacks for it (a native mechanism, a feature of this version): such a
    run is not an error in the spec but a ``skipped`` row saying so, so a comparison shows the gap."""
    return load_backend(run.backend).not_supported(run)


def _check_devices(spec: Spec, kind: str, devices: tuple[int, ...], hosts: int) -> None:
    src = spec.source
    for n in devices:
        if n < 1:
            raise SpecError(src, "devices", f"expected device counts >= 1, found {n}")
        if n % hosts:
            raise SpecError(src, "devices", f"{n} devices cannot be split evenly over {hosts} hosts")
    most = max(devices) // hosts
    if kind == "gpu":
        available = count_gpus()
        if most > available:
            raise SpecError(src, "devices", f"{most} GPUs per host requested, {available} found on this host")
    elif most > MAX_EMULATED_DEVICES:
        raise SpecError(src, "devices", f"{most} emulated CPU devices per host requested; at most "
                                        f"{MAX_EMULATED_DEVICES} are allowed on this machine")


def _steps(spec: Spec, info: Any, global_batch: int) -> tuple[int, int, int]:
    """(steps_per_epoch, total_steps, epochs) for one global batch, validated against the timing."""
    t = spec.timing
    if spec.dataset in ("synthetic", "video"):  # a stream of steps, no epochs or test split
        needed = protocol_steps(t.warmup_steps, t.windows, t.window_steps)
        total = spec.steps or needed
        steps_per_epoch, epochs = 0, 0
    else:
        steps_per_epoch = info.train_size // global_batch
        if steps_per_epoch == 0:
            raise SpecError(spec.source, "per_device_batch",
                            f"global batch {global_batch} exceeds the {info.train_size} training images of "
                            f"{spec.dataset}")
        total, epochs = spec.epochs * steps_per_epoch, spec.epochs
    try:
        plan_windows(total, steps_per_epoch, t.warmup_steps, t.windows, t.window_steps)
    except ValueError as exc:
        field_name = "steps" if spec.dataset in ("synthetic", "video") else "epochs"
        raise SpecError(spec.source, field_name, f"{exc} (global batch {global_batch})") from None
    return steps_per_epoch, total, epochs
