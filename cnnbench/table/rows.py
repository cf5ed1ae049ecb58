"""Turns a run and what came back from its process tree into one CSV row."""

from __future__ import annotations

import datetime as dt
from typing import Any

from cnnbench import envinfo
from cnnbench.data.catalog import INPUT_SOURCES
from cnnbench.model import flops
from cnnbench.model.facts import hw_text
from cnnbench.run.launch import Outcome
from cnnbench.runs import Run
from cnnbench.table.schema import SCHEMA_VERSION, STATUS_SKIPPED
from cnnbench.table.spread import step_time_spread

# Filled by the worker's NVML sampler (cnnbench/run/gpu_monitor.py) where NVML is available.
NVML_COLUMNS = ("nvml_gpu_util_pct", "nvml_memory_used_mb", "nvml_power_w", "loader_gpu_mb")


def _options_text(options: dict[str, Any]) -> str:
    return ";".join(f"{k}={v}" for k, v in sorted(options.items()))


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
        "stack_versions": envinfo.stack_versions(run.backend, run.strategy, gpu=run.device_kind == "gpu"),
        "strategy": run.strategy,
        "mesh_shape": mesh_text(run),
        "microbatches": run.microbatches if run.strategy == "pipeline" else None,
        "sync_bn": run.sync_bn,
        "scaling": run.scaling,
        "model": run.model,
        "dataset": run.dataset,
        "image_size": hw_text(run.image_size),
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
        "input_source": INPUT_SOURCES.get(run.dataset),
        "loader_workers": run.data.get("workers", 0) if INPUT_SOURCES.get(run.dataset) != "synthetic" else None,
        "seed": run.seed,
        "git_sha": envinfo.git_sha(),
        "python": envinfo.python_version(),
        "host": envinfo.host_name(),
    }


FIRST_SKIPPED = "_first_skipped_input"  # not a column: "file: why" of the first skip, for the summary line


def with_skips(row: dict[str, Any], run: Run, outcome: Outcome) -> dict[str, Any]:
    """``skipped_inputs`` (distinct files, with [data] corrupt = "skip"; empty otherwise) and the first
    skipped file, which the run's summary line names."""
    if run.data.get("corrupt") == "skip":
        row["skipped_inputs"] = len(outcome.skipped_inputs)
    if outcome.skipped_inputs:
        row[FIRST_SKIPPED] = outcome.skipped_inputs[0][1]  # the reason names the file
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


# -- inference -----------------------------------------------------------------------------------

INFER_RESULT_COLUMNS = (
    "first_step_s", "step_time_ms_median", "step_time_ms_p10", "step_time_ms_p90", "images_per_sec",
    "latency_ms_p50", "latency_ms_p90", "latency_ms_p99", "arrival_rate_rps", "requests", "max_batch",
    "batch_timeout_ms", "mean_batch", "profile_path", "device_name",
)


def infer_base_row(run: Run, job: dict[str, Any]) -> dict[str, Any]:
    """The configuration of one inference job (a variant at a batch size, or a load level)."""
    from cnnbench.infer.plan import Variant

    variant = Variant(**job["variant"])
    row = base_row(run)
    row.update({
        "mode": "serve" if job["kind"] == "serve" else "infer", "variant": variant.name,
        "precision": variant.precision, "compile": variant.compile,
        "backend_options": variant.options_text(), "per_device_batch": job["batch"],
        "global_batch": job["batch"], "lr": None, "steps": None, "epochs": None,
    })
    if job["kind"] == "serve":
        row.update({"arrival_rate_rps": job["rate"], "max_batch": job["batch"],
                    "batch_timeout_ms": job["timeout_ms"], "windows": None, "window_steps": None,
                    "warmup_steps": None})
    return row


def infer_rows(run: Run, outcome: Outcome, peak_tflops: float | None = None) -> list[dict[str, Any]]:
    """One row per job; a worker that died takes every job down with its error."""
    jobs, found = run.infer["jobs"], outcome.result.get("jobs", [])
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
        if job["kind"] != "serve":  # forward only: one forward's FLOPs per image
            row["mfu"] = flops.mfu(row["gflops_per_image"], row["images_per_sec"], 1, peak, passes=1)
        rows.append(row)
    return rows


def skipped_variant_row(run: Run, variant: Any, reason: str, batch: int) -> dict[str, Any]:
    import dataclasses

    fields = variant if isinstance(variant, dict) else dataclasses.asdict(variant)
    row = infer_base_row(run, {"kind": "ablation", "variant": fields, "batch": batch})
    row["status"], row["error"] = STATUS_SKIPPED, reason
    return row


def serve_http_row(run: Run, variant: Any, config: dict[str, Any]) -> dict[str, Any]:
    """The configuration half of a `serve-http` row; `cnnbench load` adds what it measured."""
    row = base_row(run)
    row.update({
        "mode": "serve-http", "variant": variant.name, "precision": variant.precision, "compile": variant.compile,
        "backend_options": variant.options_text(), "per_device_batch": config["max_batch"],
        "global_batch": config["max_batch"], "max_batch": config["max_batch"],
        "batch_timeout_ms": config["deadline_ms"], "max_queue": config["max_queue"],
        "decode_workers": config["decode_workers"], "lr": None, "steps": None, "epochs": None,
        "windows": None, "window_steps": None, "warmup_steps": None,
    })
    return row
