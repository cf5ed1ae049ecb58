"""Health tables: profiled training, compile caches across restarts, and the probes of
benchmarks/health_pitfalls.py (layers at 1080p, cudnn.benchmark x deterministic, loader workers, pinning)."""

from __future__ import annotations

from results_tables.rows import Results, Row, card, missing, newest, number, ok, provenance, share, table

ABSENT = missing("health")
PROBES = "h200_health_probes.jsonl"
# The health-known section (benchmarks/gpu_health.sh) writes its rows into a folder of its own: profiled
# training as the health section does, energy per image, the known-answer checks, the pinned-memory probe.
KNOWN_DIR = "h200_health"
KNOWN_ABSENT = missing("health-known")


def _unit(value: float | None, unit: str) -> str:
    return "—" if value is None else number(value) + unit


def training(results: Results) -> list[str]:
    """Profiled training as `cnnbench health` reads it: the newest row per card and backend of either
    section (a section may run on an H100 as well as on the H200; their rows are not mixed)."""
    files = ("h200_health.csv", f"{KNOWN_DIR}/health_rows.csv")
    rows = [r for name in files for r in results.csv(name) if r["spec_name"] == "health_profile"]
    latest = newest(rows, lambda r: (card(r), r["backend"]))
    lines = []
    for name in sorted({c for c, _ in latest}, key=lambda c: c != "H200") or ["—"]:
        for backend, strategy in (("torch", "ddp"), ("jax", "sharded")):
            row = latest.get((name, backend))
            if not ok(row):
                lines.append([name, f"{backend} / {strategy}", ABSENT if row is None else str(row["status"]),
                              *[""] * 6])
                continue
            lines.append([name, f"{backend} / {strategy}", number(row["images_per_sec"]),
                          share(row.get("device_busy_share")), share(row.get("copy_share")),
                          share(row.get("sync_share")), number(row.get("h2d_bytes_per_image")),
                          _unit(row.get("nvml_gpu_util_pct"), "%"), _unit(row.get("nvml_power_w"), " W")])
    header = ["card", "backend", "img/s", "GPU busy", "memcpy", "sync", "H2D bytes/image", "NVML util", "power"]
    shown = {name: [r for r in latest.values() if r in results.csv(name)] for name in files}
    return table(header, lines, "ll" + "r" * 7) + ["", provenance(shown)]


def energy(results: Results) -> list[str]:
    """Energy per image from NVML's energy counter over the timed windows, beside img/s."""
    files = (f"{KNOWN_DIR}/health_rows.csv", f"{KNOWN_DIR}/infer_rows.csv")
    rows = [r for name in files for r in results.csv(name) if ok(r) and r.get("energy_j_per_image")]
    latest = newest(rows, lambda r: (r["mode"], r["backend"], r["strategy"], bool(r["compile"]),
                                     r["global_batch"]))
    lines = []
    for (mode, backend, strategy, compiled, batch), row in sorted(latest.items(), key=lambda kv: str(kv[0])):
        joules = row["energy_j_per_image"]
        lines.append([mode, f"{backend}/{strategy}" + (" +compile" if compiled else ""), number(batch),
                      number(row["images_per_sec"]), f"{joules:.4f}", number(1 / joules, 1),
                      number(row.get("mean_power_w"))])
    header = ["mode", "run", "batch", "img/s", "J/image", "images/J", "W per GPU"]
    return (table(header, lines or [[KNOWN_ABSENT, *[""] * 6]], "ll" + "r" * 5)
            + ["", provenance({name: [r for r in latest.values() if r in results.csv(name)] for name in files})])


def known(results: Results) -> list[str]:
    """The known-answer checks of benchmarks/health_known.py: each metric against the answer its loop has."""
    checks = [r for r in results.jsonl(f"{KNOWN_DIR}/known.jsonl") if r.get("probe") == "known" and "metric" in r]
    latest = newest(checks, lambda r: (r["framework"], r["case"], r["metric"]))
    lines = [[framework, case, metric, card(row), f"{row['value']:.4g}", str(row["expected"]).replace("|", "/"),
              "yes" if row["ok"] else "NO"] for (framework, case, metric), row in latest.items()]
    header = ["framework", "case", "metric", "card", "value", "expected", "ok"]
    return (table(header, lines or [[KNOWN_ABSENT, *[""] * 6]], "llllrll")
            + ["", provenance({f"{KNOWN_DIR}/known.jsonl": list(latest.values())})])


def caches(results: Results) -> list[str]:
    rows = [r for r in results.csv("h200_health.csv") if r["spec_name"].startswith("health_cache_")]
    latest = newest(rows, lambda r: (r["backend"], r["spec_name"].removeprefix("health_cache_")))
    lines = []
    for backend, label in (("torch", "torch (torch.compile, default mode)"), ("jax", "jax (jit)")):
        cells = [label]
        for temperature in ("cold", "warm"):
            row = latest.get((backend, temperature))
            cells.append(number(row["first_step_s"], 1) if ok(row) else ABSENT if row is None else row["status"])
        lines.append(cells)
    return table(["backend", "cold cache first step s", "warm cache first step s"], lines) + [
        "", provenance({"h200_health.csv": list(latest.values())})]


def _probes(results: Results, kind: str) -> list[Row]:
    return [r for r in results.jsonl(PROBES) if r.get("probe") == kind]


def layers(results: Results) -> list[str]:
    latest = newest(_probes(results, "layers"), lambda r: r["batch"])
    lines = [[str(batch), number(row["ms_per_batch"], 1) if row else ABSENT, number(row["images_per_sec"], 1) if row
              else "", share(row.get("busy_share")) if row else ""]
             for batch, row in ((b, latest.get(b)) for b in (8, 16))]
    compare = newest(_probes(results, "layers_compare"), lambda r: 0).get(0)
    per_layer = ([[name, number(a, 1), number(b, 1)] for name, a, b in compare["rows"]] if compare
                 else [[ABSENT, "", ""]])
    small, large = compare["batches"] if compare else (8, 16)
    return (table(["batch at 1080x1920", "ms per batch", "img/s", "GPU busy"], lines) + [""]
            + table([f"layer (top by device time at batch {small})", f"µs per image at {small}",
                     f"µs per image at {large}"], per_layer)
            + ["", provenance({PROBES: [*latest.values(), *([compare] if compare else [])]})])


def cudnn(results: Results) -> list[str]:
    latest = newest(_probes(results, "cudnn"), lambda r: (r["cudnn_benchmark"], r["deterministic"]))
    lines = []
    for bench in (False, True):
        for determ in (False, True):
            row = latest.get((bench, determ))
            label = ["on" if bench else "off", "on" if determ else "off"]
            if row is None or "error" in row:
                lines.append([*label, ABSENT if row is None else f"failed: {row['error'][:60]}", "", "", "", ""])
                continue
            lines.append([*label, number(row["first_call_s"], 2), f"{row['single_ms_per_image']:.3f}",
                          number(row["concurrent_first_call_ms_max"], 1), number(row["concurrent_ms_p99"], 1),
                          number(row["concurrent_images_per_sec"])])
    header = ["cudnn.benchmark", "deterministic", "first call s", "one caller ms/image",
              "4 callers: first call ms (max)", "4 callers p99 ms", "4 callers img/s"]
    return table(header, lines, "ll" + "r" * 5) + ["", provenance({PROBES: list(latest.values())})]


def loader(results: Results) -> list[str]:
    latest = newest(_probes(results, "loader"), lambda r: r["variant"])
    lines = []
    for variant, row in latest.items():
        name = f"{variant} ({row['start_method']})"
        if "error" in row:
            lines.append([name, f"failed to start: {row['error'][:80]}", "", "", ""])
        else:
            lines.append([name, number(row.get("gpu_processes")), number(row.get("worker_gpu_mb")),
                          number(row.get("images_per_sec")), number(row.get("start_s"), 1)])
    header = ["workers (start method)", "GPU processes (trainer included)", "GPU memory of the workers MiB",
              "loader img/s", "start s"]
    return table(header, lines or [[ABSENT, "", "", "", ""]]) + ["", provenance({PROBES: list(latest.values())})]


PINNED = {"pinned_limits": "limits there", "pinned_amount": "pinned in 1 GiB buffers",
          "pinned_memlock": "RLIMIT_MEMLOCK lowered to 64 KiB", "pinned_past": "one request of 2x the host's RAM",
          "pinned_wrapper": "cnnbench's pinning wrapper", "pinned_skipped": "skipped"}


def pinned(results: Results) -> list[str]:
    files = (PROBES, f"{KNOWN_DIR}/pitfalls.jsonl")  # the health section's probes, or health-known's
    records = [r for name in files for r in results.jsonl(name) if r.get("probe") in PINNED]
    latest = newest(records, lambda r: (r["probe"], r.get("how")))
    lines = []
    for (kind, how), row in latest.items():
        facts = {k: v for k, v in row.items() if k not in ("probe", "how", "git_sha", "timestamp_utc")}
        text = ", ".join(f"{k} {number(v, 2) if isinstance(v, float) else v}" for k, v in facts.items())
        lines.append([PINNED[kind] + (f": {how}" if how else ""), text.replace("|", "/")])
    return table(["question", "finding"], lines or [[ABSENT, ""]], "ll") + [
        "", provenance({name: [r for r in latest.values() if r in results.jsonl(name)] for name in files})]
