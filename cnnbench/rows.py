"""Turns a run and what came back from its process tree into one CSV row."""

from __future__ import annotations

import datetime as dt
from typing import Any

from cnnbench import envinfo, flops
from cnnbench.launch import Outcome
from cnnbench.runs import Run
from cnnbench.schema import SCHEMA_VERSION, STATUS_SKIPPED


def _options_text(options: dict[str, Any]) -> str:
    return ";".join(f"{k}={v}" for k, v in sorted(options.items()))


def base_row(run: Run) -> dict[str, Any]:
    """Columns known before the run: the configuration and the environment."""
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run.run_id,
        "timestamp_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "spec_name": run.spec_name,
        "spec_hash": run.spec_hash,
        "trial": run.trial,
        "mode": "train",
        "backend": run.backend,
        "backend_version": envinfo.backend_version(run.backend, run.strategy),
        "stack_versions": envinfo.stack_versions(run.backend, run.strategy),
        "strategy": run.strategy,
        "sync_bn": run.sync_bn,
        "scaling": run.scaling,
        "model": run.model,
        "dataset": run.dataset,
        "image_size": run.image_size,
        "num_classes": run.num_classes,
        "precision": run.precision,
        "compile": run.compile,
        "backend_options": _options_text(run.options),
        "device_type": run.device_type,
        "hosts": run.hosts,
        "devices": run.devices,
        "per_device_batch": run.per_device_batch,
        "global_batch": run.global_batch,
        "lr": run.lr,
        "epochs": run.epochs,
        "steps": run.total_steps,
        "warmup_steps": run.warmup_steps,
        "windows": run.windows,
        "window_steps": run.window_steps,
        "gflops_per_image": flops.gflops_per_image(run.model, run.image_size, run.channels,
                                                   run.num_classes),
        "target_accuracy": run.target_accuracy or None,
        "seed": run.seed,
        "git_sha": envinfo.git_sha(),
        "python": envinfo.python_version(),
        "host": envinfo.host_name(),
    }


def outcome_row(run: Run, outcome: Outcome, peak_tflops: float | None = None) -> dict[str, Any]:
    row = base_row(run)
    row["status"], row["error"] = outcome.status, outcome.error or None
    result = outcome.result
    if outcome.status != "ok":
        row["device_name"] = envinfo.cpu_name() if run.device_kind == "cpu" else None
        return row
    for name in ("first_step_s", "step_time_ms_median", "step_time_ms_p10", "step_time_ms_p90",
                 "images_per_sec", "images_per_sec_per_device", "peak_memory_mb", "params",
                 "train_loss_final", "test_loss", "test_accuracy", "time_to_accuracy_s",
                 "train_wall_s", "device_name", "python"):
        row[name] = result.get(name)
    peak = peak_tflops or flops.peak_tflops(row["device_name"] or "", run.precision)
    row["mfu"] = flops.mfu(row["gflops_per_image"], row["images_per_sec"], run.devices, peak)
    return row


def skipped_row(run: Run, reason: str) -> dict[str, Any]:
    row = base_row(run)
    row["status"], row["error"] = STATUS_SKIPPED, reason
    return row
