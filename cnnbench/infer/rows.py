"""An inference run's jobs and what came back, as CSV rows: one per job (``infer``, ``serve``), and the
configuration half of a ``serve-http`` row."""

from __future__ import annotations

from typing import Any

from cnnbench.model import flops
from cnnbench.rows import config_row, with_skips
from cnnbench.runs import InferJob, InferRun, Outcome, Variant
from cnnbench.table.schema import STATUS_SKIPPED
from cnnbench.table.spread import step_time_spread

INFER_RESULT_COLUMNS = (
    "first_step_s", "step_time_ms_median", "step_time_ms_p10", "step_time_ms_p90", "images_per_sec",
    "latency_ms_p50", "latency_ms_p90", "latency_ms_p99", "arrival_rate_rps", "requests", "max_batch",
    "batch_timeout_ms", "mean_batch", "profile_path", "device_name", "energy_j_per_image", "mean_power_w",
)

def _infer_config_row(run: InferRun, variant: Variant, batch: int) -> dict[str, Any]:
    """The shared columns as an inference row states them: one device, a forward pass, no training."""
    row = config_row(run)
    row.update({"variant": variant.name, "precision": variant.precision, "compile": variant.compile,
                "backend_options": variant.options_text(), "per_device_batch": batch, "global_batch": batch,
                "sync_bn": False, "scaling": "weak"})
    return row


def infer_base_row(run: InferRun, job: InferJob) -> dict[str, Any]:
    """The configuration of one inference job (a variant at a batch size, or a load level)."""
    row = _infer_config_row(run, job.variant, job.batch)
    row["mode"] = "serve" if job.kind == "serve" else "infer"
    if job.kind == "serve":
        row.update({"arrival_rate_rps": job.rate, "max_batch": job.batch, "batch_timeout_ms": job.timeout_ms,
                    "windows": None, "window_steps": None, "warmup_steps": None})
    return row


def infer_rows(run: InferRun, outcome: Outcome, peak_tflops: float | None = None) -> list[dict[str, Any]]:
    """One row per job; a worker that died takes every job down with its error."""
    jobs, found = run.jobs, outcome.result.get("jobs", [])
    rows = []
    for index, job in enumerate(jobs):
        row = with_skips(infer_base_row(run, job), run, outcome)
        result = found[index] if outcome.status == "ok" and index < len(found) else {
            "error": outcome.error or "the worker returned no result for this job"}
        if "error" in result:
            row["status"], row["error"] = "failed", result["error"]
            row["device_name"] = result.get("device_name")
            rows.append(row)
            continue
        row["status"] = "ok"
        for name in INFER_RESULT_COLUMNS:
            if name in result:
                row[name] = result[name]
        row["images_per_sec_per_device"] = row["images_per_sec"]
        if result.get("window_step_ms"):  # the ablation's rounds add windows
            row["windows"] = len(result["window_step_ms"])
        row["step_time_spread"] = step_time_spread(row.get("step_time_ms_p10"), row.get("step_time_ms_p90"))
        if result.get("peak_memory_bytes") is not None:
            row["peak_memory_mb"] = result["peak_memory_bytes"] / 2**20
        row["python"] = outcome.result.get("python")
        peak = peak_tflops or flops.peak_tflops(row["device_name"] or "", row["precision"])
        if job.kind != "serve":  # forward only: one forward's FLOPs per image
            row["mfu"] = flops.mfu(row["gflops_per_image"], row["images_per_sec"], 1, peak, passes=1)
        rows.append(row)
    return rows


def skipped_variant_row(run: InferRun, variant: Variant, reason: str, batch: int) -> dict[str, Any]:
    row = infer_base_row(run, InferJob("ablation", variant, batch))
    row["status"], row["error"] = STATUS_SKIPPED, reason
    return row


def serve_http_row(run: InferRun, variant: Variant, config: dict[str, Any]) -> dict[str, Any]:
    """The configuration half of a `serve-http` row; `cnnbench load` adds what it measured."""
    row = _infer_config_row(run, variant, config["max_batch"])
    row.update({
        "mode": "serve-http", "max_batch": config["max_batch"], "batch_timeout_ms": config["deadline_ms"],
        "max_queue": config["max_queue"], "decode_workers": config["decode_workers"],
        "windows": None, "window_steps": None, "warmup_steps": None,
    })
    return row
