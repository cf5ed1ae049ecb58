"""The health section: profiled training read by `cnnbench health`, compile caches across restarts, and
the standalone probes of benchmarks/health_pitfalls.py (layers at 1080p, cudnn.benchmark and
deterministic, loader workers and CUDA, pinned host memory; the riskiest last)."""

from __future__ import annotations

import json
import shutil

from runbook import sidefile
from runbook.pairs import TRAIN_SPEC, read_rows
from runbook.steps import SMOKE_TRAIN, Context

ROWS = "h200_health.csv"
PROBES = "h200_health_probes.jsonl"
# 8 steps a window: JAX's 4 x 43 ms on an H100 stayed under NVML's ~200 ms utilisation period (no reading)
SHORT = {"per_device_batch": 256, "timing.warmup_steps": 2, "timing.windows": 2, "timing.window_steps": 8,
         "jax.strategies": ["sharded"], "timeout_s": 150}

# probe -> (arguments on the GPU host, in SMOKE, limit s)
PROBE_ARGS = {
    "layers": (["--height", "1080", "--width", "1920", "--batches", "8,16", "--warmup", "3", "--iters", "10",
                "--traced", "3", "--top", "15"],
               ["--height", "64", "--width", "96", "--batches", "1,2", "--warmup", "1", "--iters", "2", "--traced",
                "1", "--top", "8"], 90),
    "cudnn": (["--batch", "32", "--size", "224", "--threads", "4", "--iters", "20"],
              ["--batch", "1", "--size", "32", "--threads", "2", "--iters", "2"], 70),
    "claims": ([], [], 30),
    "loader": (["--workers", "4", "--batch", "32", "--size", "224", "--steps", "20"],
               ["--workers", "2", "--batch", "4", "--size", "32", "--steps", "3"], 70),
    "pinned": (["--cap-gib", "32"], ["--cap-gib", "1"], 70),
    "pinned-past": ([], [], 45),  # one cudaHostAlloc of twice the host's RAM: last
}


def probe(ctx: Context, name: str, *args: str, limit_s: float = 60) -> None:
    """One health_pitfalls.py measurement; its JSON lines kept, stamped, in the probes file."""
    step = ctx.run(f"probe {name}", [ctx.python, "benchmarks/health_pitfalls.py", name, *args], limit_s)
    found = [json.loads(line) for line in (step.output if step else "").splitlines() if line.startswith('{"probe"')]
    if step and step.rc and not found:
        found = [{"probe": "failed", "step": name, "rc": step.rc}]
    sidefile.append(ctx.out / PROBES, found)


def health(ctx: Context) -> None:
    traces = ctx.logs / "traces"
    profile = ctx.spec(TRAIN_SPEC, "health_profile", SHORT, SMOKE_TRAIN)
    for backend in ("torch", "jax"):
        before = len(read_rows(ctx.out / ROWS))
        ctx.cnnbench(f"profiled {backend} training", "run", profile, ROWS, 170, "-b", backend, "--profile", traces)
        new = [r for r in read_rows(ctx.out / ROWS)[before:] if r["status"] == "ok" and r.get("profile_path")]
        if not new:
            continue
        run_id = new[-1]["run_id"]
        ctx.run(f"health {backend}", [ctx.python, "-m", "cnnbench.cli", "health", ctx.out / ROWS, run_id, "--out",
                                      ctx.logs / f"health_{backend}.md"], 60)
        if backend == "jax":
            probe(ctx, "threads", str(traces / run_id), limit_s=30)
    # The same run twice in fresh processes sharing one folder that starts empty (not the call's cache).
    cold_cache = ctx.work / "cold_cache"
    shutil.rmtree(cold_cache, ignore_errors=True)
    cache_changes = {**SHORT, "compile": True, "compile_cache_dir": str(cold_cache), "timing.warmup_steps": 1,
                     "timing.windows": 1, "timing.window_steps": 2}
    smoke = {**SMOKE_TRAIN, "compile": False}
    for backend in ("jax", "torch"):
        for temperature in ("cold", "warm"):
            spec = ctx.spec(TRAIN_SPEC, f"health_cache_{temperature}", cache_changes, smoke)
            ctx.cnnbench(f"{backend} {temperature} cache", "run", spec, ROWS, 120, "-b", backend)
    for name, (gpu_args, smoke_args, limit) in PROBE_ARGS.items():
        extra = ["--trace-dir", str(ctx.logs / "layers")] if name == "layers" else []
        probe(ctx, name, *(smoke_args if ctx.smoke else gpu_args), *extra, limit_s=limit)
