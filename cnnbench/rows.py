"""The columns every row shares, whatever its run did: the configuration and the environment.

Training rows (:mod:`cnnbench.run.rows`) and inference rows (:mod:`cnnbench.infer.rows`) start from
:func:`config_row` and add what their kind measured.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from cnnbench import envinfo
from cnnbench.data.catalog import INPUT_SOURCES
from cnnbench.model import flops
from cnnbench.model.facts import hw_text
from cnnbench.options import options_text
from cnnbench.runs import Outcome, RunCommon
from cnnbench.table.schema import SCHEMA_VERSION

# Filled by the worker's NVML sampler (cnnbench/gpu_monitor.py) where NVML is available.
NVML_COLUMNS = ("nvml_gpu_util_pct", "nvml_memory_used_mb", "nvml_power_w", "loader_gpu_mb",
                "energy_j_per_image", "mean_power_w")


def config_row(run: RunCommon) -> dict[str, Any]:
    """Columns known before the run: the configuration and the environment."""
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run.run_id,
        "timestamp_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "spec_name": run.spec_name,
        "spec_hash": run.spec_hash,
        "trial": run.trial,
        "mode": run.mode,
        "backend": run.backend,
        "backend_version": envinfo.backend_version(run.backend, run.strategy),
        "stack_versions": envinfo.stack_versions(run.backend, run.strategy, gpu=run.device_kind == "gpu"),
        "strategy": run.strategy,
        "model": run.model,
        "dataset": run.dataset,
        "image_size": hw_text(run.image_size),
        "num_classes": run.num_classes,
        "precision": run.precision,
        "compile": run.compile,
        "backend_options": options_text(run.options),
        "device_type": run.device_type,
        "hosts": run.hosts,
        "devices": run.devices,
        "per_device_batch": run.per_device_batch,
        "global_batch": run.global_batch,
        "warmup_steps": run.warmup_steps,
        "windows": run.windows,
        "window_steps": run.window_steps,
        "gflops_per_image": flops.gflops_per_image(run.model, run.image_size, run.channels,
                                                   run.num_classes),
        "input_source": INPUT_SOURCES.get(run.dataset),
        "loader_workers": run.data.workers if INPUT_SOURCES.get(run.dataset) != "synthetic" else None,
        "seed": run.seed,
        "git_sha": envinfo.git_sha(),
        "python": envinfo.python_version(),
        "host": envinfo.host_name(),
    }


FIRST_SKIPPED = "_first_skipped_input"  # not a column: "file: why" of the first skip, for the summary line


def with_skips(row: dict[str, Any], run: RunCommon, outcome: Outcome) -> dict[str, Any]:
    """``skipped_inputs`` (distinct files, with [data] corrupt = "skip"; empty otherwise) and the first
    skipped file, which the run's summary line names."""
    if run.data.corrupt == "skip":
        row["skipped_inputs"] = len(outcome.skipped_inputs)
    if outcome.skipped_inputs:
        row[FIRST_SKIPPED] = outcome.skipped_inputs[0][1]  # the reason names the file
    return row
