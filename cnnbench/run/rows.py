"""A training run and what came back from its process tree, as one CSV row."""

from __future__ import annotations

from typing import Any

from cnnbench import envinfo
from cnnbench.model import flops
from cnnbench.rows import NVML_COLUMNS, config_row, with_skips
from cnnbench.runs import Outcome, Run
from cnnbench.table.schema import STATUS_SKIPPED
from cnnbench.table.spread import step_time_spread


def mesh_text(run: Run) -> str | None:
    """The device mesh of a model-parallel strategy: data x model (pipeline: stages)."""
    if run.strategy == "tensor":
        return f"data=1xmodel={run.devices}"
    if run.strategy == "data+tensor":
        return f"data={run.devices // run.model_parallel}xmodel={run.model_parallel}"
    if run.strategy == "pipeline":
        return f"stages={run.devices}"
    return None


def base_row(run: Run) -> dict[str, Any]:
    """A training run's configuration: the shared columns and what only training has."""
    row = config_row(run)
    row.update({
        "mesh_shape": mesh_text(run),
        "microbatches": run.microbatches if run.strategy == "pipeline" else None,
        "sync_bn": run.sync_bn,
        "scaling": run.scaling,
        "lr": run.lr,
        "epochs": run.epochs,
        "steps": run.total_steps,
        "target_accuracy": run.target_accuracy or None,
    })
    return row


def outcome_row(run: Run, outcome: Outcome, peak_tflops: float | None = None) -> dict[str, Any]:
    row = with_skips(base_row(run), run, outcome)
    row["status"], row["error"] = outcome.status, outcome.error or None
    result = outcome.result
    if outcome.status != "ok":
        row["device_name"] = envinfo.cpu_name() if run.device_kind == "cpu" else None
        return row
    for name in ("first_step_s", "step_time_ms_median", "step_time_ms_p10", "step_time_ms_p90",
                 "images_per_sec", "images_per_sec_per_device", "peak_memory_mb", "params",
                 "train_loss_final", "test_loss", "test_accuracy", "time_to_accuracy_s",
                 "train_wall_s", "device_name", "python", "profile_path", "data_wait_ms_median",
                 "data_wait_share", *NVML_COLUMNS):
        row[name] = result.get(name)
    if result.get("window_step_ms"):  # with --profile, the traced window is not among them
        row["windows"] = len(result["window_step_ms"])
    row["step_time_spread"] = step_time_spread(row["step_time_ms_p10"], row["step_time_ms_p90"])
    peak = peak_tflops or flops.peak_tflops(row["device_name"] or "", run.precision)
    row["mfu"] = flops.mfu(row["gflops_per_image"], row["images_per_sec"], run.devices, peak)
    return row


def skipped_row(run: Run, reason: str) -> dict[str, Any]:
    row = base_row(run)
    row["status"], row["error"] = STATUS_SKIPPED, reason
    return row
