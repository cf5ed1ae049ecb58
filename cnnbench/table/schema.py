"""The CSV row: every column's name, type, unit and meaning, in one place.

The results writer, the report and the notebooks take column names from here. Column names
carry their unit (`_s`, `_ms`, `_mb`). Bump SCHEMA_VERSION whenever a column is added, removed
or changes meaning: the writer refuses to append rows of one version to a file of another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SCHEMA_VERSION = 4  # 2: inference/serving and model-parallel columns; 3: see ADDED_IN_V3; 4: ADDED_IN_V4


@dataclass(frozen=True)
class Column:
    name: str
    kind: type  # str, int, float or bool; empty cells are allowed for every column
    doc: str


COLUMNS: tuple[Column, ...] = (
    Column("schema_version", int, "Version of this row format."),
    Column("run_id", str, "Unique id of the run; keys the per-epoch history file."),
    Column("timestamp_utc", str, "When the run finished, ISO 8601, UTC."),
    Column("spec_name", str, "`name` field of the experiment spec."),
    Column("spec_hash", str, "Hash of the spec's fixed fields (everything but the swept lists)."),
    Column("trial", int, "Repetition index, 0-based."),
    Column("mode", str, "train | infer (forward-only, batch sweep or ablation) | serve (dynamic batching, "
                        "in-process) | serve-http (`cnnbench serve` under `cnnbench load`)."),
    Column("variant", str, "infer: sweep, baseline, a toggle name or all; serve: dynamic or batch1; "
                          "serve-http: dynamic or none (one forward per request)."),
    Column("backend", str, "torch | tensorflow | jax."),
    Column("backend_version", str, "Version of the backend's framework."),
    Column("stack_versions", str, "All framework packages the worker imported, name=version;..."),
    Column("strategy", str, "Parallel strategy: ddp | mirrored | fit | sharded | pmap | keras-ENGINE | "
                            "pipeline | tensor | data+tensor | infer."),
    Column("mesh_shape", str, "Device mesh of model-parallel strategies, e.g. data=1xmodel=2."),
    Column("microbatches", int, "Micro-batches per step of the pipeline strategy."),
    Column("sync_bn", bool, "Batch-norm statistics synchronized across devices (else per device)."),
    Column("scaling", str, "weak (per-device batch fixed) | strong (global batch fixed)."),
    Column("model", str, "smallcnn | resnet18_cifar | resnet50."),
    Column("dataset", str, "digits | cifar10 | synthetic | image_folder | video."),
    Column("image_size", str, "Model input height x width, pixels, \"HxW\" (e.g. 224x224, 1080x1920); "
                              "schema 1-2 files held one integer (square), `cnnbench upgrade` converts it."),
    Column("num_classes", int, "Output classes."),
    Column("precision", str, "fp32 | bf16 | fp16 (compute dtype; parameters stay fp32)."),
    Column("compile", bool, "torch.compile / XLA jit_compile on (JAX always jits)."),
    Column("backend_options", str, "Backend-specific options that ran, key=value;..."),
    Column("device_type", str, "cpu | cpu-emulated | gpu."),
    Column("device_name", str, "Accelerator or CPU model name."),
    Column("hosts", int, "Hosts (processes groups across machines) in the run."),
    Column("devices", int, "Devices in the run, all hosts together."),
    Column("per_device_batch", int, "Images per device per step."),
    Column("global_batch", int, "Images per step, all devices."),
    Column("lr", float, "Learning rate used: base LR x global_batch / 256."),
    Column("epochs", int, "Epochs trained (0 for synthetic data)."),
    Column("steps", int, "Training steps run, in total."),
    Column("first_step_s", float, "Wall time of the first step (infer: first batch) alone: tracing/"
                                  "compilation + run, s."),
    Column("warmup_steps", int, "Steps after the first one, run and discarded."),
    Column("windows", int, "Timed windows in the statistics (with --profile, the traced one is not)."),
    Column("window_steps", int, "Steps per timed window."),
    Column("step_time_ms_median", float, "Median over windows of (window time / steps), ms; infer: one "
                                         "batch's forward, pipelined; serve: the model's time per "
                                         "flushed batch."),
    Column("step_time_ms_p10", float, "10th percentile of the per-window step time, ms."),
    Column("step_time_ms_p90", float, "90th percentile of the per-window step time, ms."),
    Column("images_per_sec", float, "global_batch / median step time, all devices and hosts; serve: "
                                    "achieved throughput."),
    Column("images_per_sec_per_device", float, "images_per_sec / devices."),
    Column("gflops_per_image", float, "Analytical forward GFLOP per image (2 x multiply-adds)."),
    Column("mfu", float, "Model FLOP utilisation: 3 x forward FLOPs x img/s / device peak."),
    Column("latency_ms_p50", float, "infer: one batch, host input to host logits, median, ms; serve: one "
                                    "request, from its scheduled arrival to its result."),
    Column("latency_ms_p90", float, "90th percentile of the latency, ms."),
    Column("latency_ms_p99", float, "99th percentile of the latency, ms."),
    Column("arrival_rate_rps", float, "serve: offered load, Poisson arrivals, requests/s."),
    Column("requests", int, "serve: requests completed at this load."),
    Column("max_batch", int, "serve: the micro-batcher's batch limit (1 for batch1)."),
    Column("batch_timeout_ms", float, "serve: the micro-batcher's deadline from the oldest request's arrival."),
    Column("mean_batch", float, "serve: mean size of the batches the micro-batcher flushed."),
    Column("profile_path", str, "Trace of one window written by --profile (folder or file)."),
    Column("input_source", str, "synthetic (resident on the device) | arrays (in memory) | files (decoded "
                                "by loader workers) | video (frames decoded from a video file)."),
    Column("loader_workers", int, "Input loader worker processes/threads ([data] workers; 0: in the "
                                  "training process)."),
    Column("data_wait_ms_median", float, "Host time a timed step waited for its batch, median over the "
                                         "timed steps, ms (measured by the runner)."),
    Column("data_wait_share", float, "Waiting for input over the timed windows' wall time (0-1)."),
    Column("step_time_spread", float, "p90 / p10 - 1 of the per-window step times (0.4: the slow windows 40% "
                                      "slower than the fast ones); above timing.spread_limit the run is "
                                      "flagged as noisy."),
    Column("slurm_job_id", str, "Slurm job that ran it (`sweep --slurm`); empty otherwise."),
    Column("device_busy_share", float, "--profile: union of GPU kernel intervals over the traced window's wall "
                                       "time (CPU runs: union of the compute threads' ops), 0-1."),
    Column("copy_share", float, "--profile: device memcpy time (CPU runs: aten::copy_) over the traced window, 0-1."),
    Column("h2d_bytes_per_image", float, "--profile: host-to-device bytes copied per image in the traced window."),
    Column("sync_share", float, "--profile: host blocked in stream/event syncs inside the steps / the window, 0-1."),
    Column("nvml_gpu_util_pct", float, "NVML GPU utilisation, mean over samples in the timed windows, %."),
    Column("nvml_memory_used_mb", float, "NVML device memory used, max over the timed windows, MiB."),
    Column("nvml_power_w", float, "NVML board power, mean over the timed windows, W."),
    Column("loader_gpu_mb", float, "GPU memory held by the worker's child processes (loader workers), NVML, MiB."),
    Column("request_input", str, "serve-http: what each request carried: raw (a uint8 tensor), jpeg or png."),
    Column("requests_offered", int, "serve-http: requests the load generator sent at this load."),
    Column("errors_by_status", str, "serve-http: requests not answered 200, by HTTP status (or timeout/"
                                    "connection), e.g. 503=12;500=1."),
    Column("client_lag_ms_p99", float, "serve-http: 99th percentile of how late the load generator sent a "
                                       "request after its scheduled arrival; large: the client, not the server, "
                                       "was the bound."),
    Column("max_queue", int, "serve-http: the server's bound on requests waiting for the device."),
    Column("decode_workers", int, "serve-http: the server's image-decoding threads."),
    Column("peak_memory_mb", float, "Peak device memory of device 0, MiB (CPU: worker peak RSS)."),
    Column("params", int, "Trainable parameters."),
    Column("train_loss_final", float, "Mean training loss over the last epoch (or last steps)."),
    Column("test_loss", float, "Test loss after the last epoch (empty for synthetic data)."),
    Column("test_accuracy", float, "Test accuracy after the last epoch (empty for synthetic)."),
    Column("target_accuracy", float, "Accuracy target of the spec."),
    Column("time_to_accuracy_s", float, "Training wall time until test accuracy first >= target, s."),
    Column("train_wall_s", float, "Wall time of all training steps (evaluation excluded), s."),
    Column("seed", int, "Seed for initialisation, data order and synthetic data."),
    Column("status", str, "ok | failed | skipped."),
    Column("error", str, "Why a run failed or was skipped (one line)."),
    Column("git_sha", str, "Commit of cnnbench that ran (suffix -dirty if modified)."),
    Column("python", str, "Python version of the worker."),
    Column("host", str, "Host name of the launching process."),
    Column("energy_j_per_image", float, "GPU energy per image over the timed windows, J: NVML's total energy "
                                        "counter read where the windows synchronize, summed over the run's GPUs "
                                        "(host 0's, times the hosts); empty on CPUs, GPUs without the counter, "
                                        "or windows under 2 s in all (the counter moves in ~0.1 s steps)."),
    Column("mean_power_w", float, "Mean power per GPU over the timed windows from the same energy counter, W."),
    Column("skipped_inputs", int, "[data] corrupt = \"skip\": distinct input files the run's loaders could not "
                                  "decode and replaced by the next good one (all processes and loader workers); "
                                  "empty when corrupt = \"fail\"."),
)

COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)
_BY_NAME = {c.name: c for c in COLUMNS}

STATUS_OK, STATUS_FAILED, STATUS_SKIPPED = "ok", "failed", "skipped"

# The key that identifies "the same configuration" for resuming sweeps and aggregating trials.
CONFIG_KEY: tuple[str, ...] = (
    "spec_hash", "backend", "strategy", "scaling", "devices", "per_device_batch",
    "precision", "device_type", "hosts",
)


# Columns that schema version 2 added; a version-1 file gets them empty (`cnnbench upgrade`).
ADDED_IN_V2: tuple[str, ...] = (
    "variant", "mesh_shape", "microbatches", "latency_ms_p50", "latency_ms_p90", "latency_ms_p99",
    "arrival_rate_rps", "requests", "max_batch", "batch_timeout_ms", "mean_batch", "profile_path",
)


# Columns that schema version 3 added (real input, HTTP serving, health, measurement spread); older
# files get them empty (`cnnbench upgrade`).
ADDED_IN_V3: tuple[str, ...] = (
    "step_time_spread", "slurm_job_id",
    "device_busy_share", "copy_share", "h2d_bytes_per_image", "sync_share", "nvml_gpu_util_pct",
    "nvml_memory_used_mb", "nvml_power_w", "loader_gpu_mb",
    "input_source", "loader_workers", "data_wait_ms_median", "data_wait_share",
    "request_input", "requests_offered", "errors_by_status", "client_lag_ms_p99", "max_queue", "decode_workers",
)

# Columns that schema version 4 added (energy per image, inputs a run skipped); older files get them empty.
ADDED_IN_V4: tuple[str, ...] = ("energy_j_per_image", "mean_power_w", "skipped_inputs")

# Every version's additions, oldest first: what `cnnbench upgrade` adds to a file of that version.
ADDED_IN: dict[int, tuple[str, ...]] = {2: ADDED_IN_V2, 3: ADDED_IN_V3, 4: ADDED_IN_V4}

# Columns added since SCHEMA_VERSION was last bumped (the next bump makes them its ADDED_IN entry):
# a file of the current version written before them is read, and upgraded, with them empty.
ADDED_SINCE_LAST_VERSION: tuple[str, ...] = ()


def _square_image_size(row: dict[str, Any]) -> dict[str, Any]:
    """Schema 1-2: image_size was one integer (height = width) -> "HxW"."""
    size = row.get("image_size")
    if size not in (None, "") and "x" not in str(size):
        row["image_size"] = f"{int(float(size))}x{int(float(size))}"
    return row


# What changes the values of a file written by a version (besides new columns), applied by
# `cnnbench upgrade` to every row of a file older than the version named.
CONVERTERS: dict[int, Any] = {3: _square_image_size}


def columns_of_version(version: int) -> tuple[str, ...]:
    """The header a file written by schema version ``version`` has (columns keep their order); for the
    current version, without the columns added since (the current header is COLUMN_NAMES)."""
    later = {name for v, names in ADDED_IN.items() if v > version for name in names}
    later.update(ADDED_SINCE_LAST_VERSION)
    return tuple(name for name in COLUMN_NAMES if name not in later)


def column(name: str) -> Column:
    return _BY_NAME[name]


def format_cell(name: str, value: Any) -> str:
    """Render one value for the CSV: empty for None, fixed formats for numbers."""
    if value is None:
        return ""
    kind = _BY_NAME[name].kind
    if kind is bool:
        return "true" if value else "false"
    if kind is float:
        return f"{float(value):.6g}"
    if kind is int:
        return str(int(value))
    # One line only: newlines in error text would break naive readers.
    return " ".join(str(value).split())


def parse_cell(name: str, text: str) -> Any:
    """Inverse of format_cell; unknown columns stay strings."""
    if text == "":
        return None
    kind = _BY_NAME[name].kind if name in _BY_NAME else str
    if kind is bool:
        return text == "true"
    if kind is int:
        return int(float(text))
    if kind is float:
        return float(text)
    return text
