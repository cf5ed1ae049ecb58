"""Result rows for the report tests, written as a real results CSV (the numbers are chosen, not run)."""

from __future__ import annotations

from pathlib import Path

from cnnbench.table import store

REPO = Path(__file__).resolve().parent.parent


def train_row(run_id: str, backend: str, strategy: str, model: str, devices: int, ips: float, **extra) -> dict:
    batch = extra.pop("per_device_batch", 32)
    global_batch = batch * devices if extra.get("scaling", "weak") == "weak" else batch
    step_ms = global_batch / ips * 1000
    return {"schema_version": 1, "run_id": run_id, "spec_name": "fx", "spec_hash": "h", "trial": 0, "mode": "train",
            "backend": backend, "strategy": strategy, "compile": False, "scaling": "weak", "model": model,
            "dataset": "synthetic", "precision": "bf16", "device_type": "gpu", "device_name": "GPU-X",
            "devices": devices, "hosts": 1, "per_device_batch": batch, "global_batch": global_batch,
            "images_per_sec": ips, "step_time_ms_median": step_ms, "step_time_ms_p10": step_ms * 0.9,
            "step_time_ms_p90": step_ms * 1.2, "first_step_s": 10.0, "peak_memory_mb": 1000.0,
            "status": "ok", "git_sha": "abc123", "python": "3.12", "host": "h", "backend_version": "1.0",
            "stack_versions": f"{backend}=1.0", "timestamp_utc": "2026-12-02T10:00:00+00:00", **extra}


def single_device_models(path: Path) -> None:
    """Two models of very different speed on one device: torch eager and compiled, jax sharded."""
    rows = []
    for model, scale in (("resnet18_cifar", 10.0), ("resnet50", 1.0)):
        rows.append(train_row(f"{model}-t", "torch", "ddp", model, 1, 4600 * scale))
        rows.append(train_row(f"{model}-tc", "torch", "ddp", model, 1, 6500 * scale, compile=True))
        rows.append(train_row(f"{model}-j", "jax", "sharded", model, 1, 7100 * scale))
    store.append_rows(path, rows)


def scaling_sweep(path: Path) -> None:
    """Weak and strong scaling on 1, 2, 4 emulated devices for torch and jax."""
    rows = []
    for scaling in ("weak", "strong"):
        for backend, strategy, base in (("torch", "ddp", 1000.0), ("jax", "sharded", 900.0)):
            for n in (1, 2, 4):
                ips = base * n * 0.8 ** (n - 1)  # efficiency 0.8 per doubling
                rows.append(train_row(f"{scaling}{backend}{n}", backend, strategy, "smallcnn", n, ips,
                                      scaling=scaling, device_type="cpu" if n == 1 else "cpu-emulated"))
    store.append_rows(path, rows)


def infer_row(run_id: str, backend: str, variant: str, batch: int, ms: float, **extra) -> dict:
    return {**train_row(run_id, backend, "infer", "resnet50", 1, batch / ms * 1000, per_device_batch=batch),
            "mode": "infer", "variant": variant, "latency_ms_p50": ms, "latency_ms_p90": ms * 1.1,
            "latency_ms_p99": ms * 1.3, "compile": backend == "jax", **extra}


def inference(path: Path, batches: tuple[int, ...] = (1, 8, 64)) -> None:
    """A sweep, an ablation (torch: bf16 faster, pad slower; jax: compile skipped) and serving rows."""
    rows = []
    for backend, per_image in (("torch", 0.5), ("jax", 0.3)):
        for b in batches:
            rows.append(infer_row(f"{backend}s{b}", backend, "sweep", b, 2.0 + per_image * b))
        rows.append(infer_row(f"{backend}base", backend, "baseline", 50, 10.0, precision="fp32"))
        rows.append(infer_row(f"{backend}bf16", backend, "bf16", 50, 8.0))
        rows.append(infer_row(f"{backend}pad", backend, "pad", 50, 12.0, precision="fp32"))
    rows.append(infer_row("torchcompile", "torch", "compile", 50, 6.0, precision="fp32", compile=True))
    rows.append({**infer_row("jaxcompile", "jax", "compile", 50, 1.0), "status": "skipped",
                 "error": "jax always jits", "images_per_sec": None, "step_time_ms_median": None})
    for mode, request_input, variant, capacity in SERVING:
        for rate in (100.0, 1000.0, 3000.0):
            rows.append(serve_row(mode, request_input, variant, capacity, rate))
    store.append_rows(path, rows)


# (mode, what HTTP requests carried, batching variant, the requests/s it can answer)
SERVING = (("serve", None, "dynamic", 1500.0), ("serve", None, "batch1", 150.0),
           ("serve-http", "raw", "dynamic", 1500.0), ("serve-http", "raw", "batch1", 150.0),
           ("serve-http", "jpeg", "dynamic", 500.0))
LOAD_S = 3.0  # arrivals end after this long


def serve_row(mode: str, request_input: str | None, variant: str, capacity: float, rate: float) -> dict:
    """One load of an open-loop run as a server of ``capacity`` req/s answers it. At 100 req/s the
    Poisson draw offers 12% fewer requests than rate x duration (264 of 300), all answered: answered/s
    is under 90% of the nominal rate although nothing went wrong. Above capacity the queue grows (the
    median request waits half the time the load takes) and HTTP batch1 sheds a third as 503s."""
    offered = int(rate * LOAD_S * (0.88 if rate == 100.0 else 1.0))
    if rate <= capacity:
        answered, took_s, p50 = offered, LOAD_S, 5.0
    else:
        answered = offered * 2 // 3 if (mode, variant) == ("serve-http", "batch1") else offered
        took_s = answered / capacity
        p50 = took_s / 2 * 1000.0
    row = {**infer_row(f"{mode}{request_input}{variant}{rate}", "torch", variant, 1, p50), "mode": mode,
           "arrival_rate_rps": rate, "images_per_sec": answered / took_s, "requests": answered,
           "mean_batch": 4.0 if variant == "dynamic" else 1.0}
    if mode == "serve-http":
        row.update(request_input=request_input, requests_offered=offered,
                   errors_by_status=f"503={offered - answered}" if answered < offered else None)
    return row
