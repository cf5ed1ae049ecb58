"""Tables of the CPU measurements that the topic pages cite (each from its own script's rows under
results/): the mixed-orientation canvas (docs/real-input.md), the batcher against the GIL and the load
client against httpx (docs/serving.md)."""

from __future__ import annotations

from results_tables.rows import Results, number, provenance, table


def _absent(script: str, columns: int) -> list[list[str]]:
    return [[f"no rows yet: `python benchmarks/{script}`", *[""] * (columns - 1)]]


def mixed_orientation(results: Results) -> list[str]:
    """Padding a portrait/landscape mix into one canvas, before and after shrinking on the host."""
    rows = results.jsonl("cpu_mixed_orientation.jsonl")
    lines = [[str(r["mode"]).split(":")[0], str(r["canvas"]), f"{r['uint8_mb_per_batch']:.2f} MiB",
              number(r["host_read_ms"], 1), number(r["prepare_ms"], 1)] for r in rows]
    header = ["", "canvas", "uint8 per batch", "host read (decode, shrink, pad), ms", "`prepare` (PyTorch, CPU), ms"]
    return table(header, lines or _absent("mixed_orientation.py", 5), "ll" + "r" * 3)


LAUNCH_KINDS = {"busy": "Python loop (holds the GIL)", "torch": "PyTorch operator calls (each lets go of the GIL)"}


def batcher_gil(results: Results) -> list[str]:
    """The pipelined batcher against engines that differ only in their launch (how long, and whether it holds
    the GIL throughout or lets go of it in each operator call), at each GIL switch interval of the newest
    invocation (rows from before ``--switch-ms`` ran at Python's own 5 ms, with busy launches)."""
    every = results.jsonl("cpu_batcher_gil.jsonl")
    newest = max((r["timestamp_utc"] for r in every), default="")
    rows = [r for r in every if r["timestamp_utc"] == newest]
    switches = sorted({r.get("switch_interval_ms", 5.0) for r in rows}, reverse=True)
    found: dict[tuple[str, float], dict[float, dict]] = {}
    for r in rows:
        found.setdefault((r.get("launch_kind", "busy"), r["launch_ms"]), {})[r.get("switch_interval_ms", 5.0)] = r
    lines = []
    for (kind, launch_ms), by_switch in sorted(found.items()):
        first = by_switch[switches[0]] if switches[0] in by_switch else next(iter(by_switch.values()))
        note = " (launch = device time: host-bound)" if launch_ms >= first["device_ms"] else ""
        shares = [f"{by_switch[s]['batcher_share']:.3f}" if s in by_switch else "" for s in switches]
        lines.append([LAUNCH_KINDS.get(kind, kind), f"{launch_ms:g} ms{note}", number(first["engine_img_s"]), *shares])
    header = ["launch", "host time per launch", f"engine alone img/s (switch {switches[0]:g} ms)" if switches else
              "engine alone img/s", *[f"batcher / engine, switch {s:g} ms" + (" (Python's own)" if s == 5 else "")
                                      for s in switches]]
    columns = len(header)
    return table(header, lines or _absent("batcher_gil.py", columns), "ll" + "r" * (columns - 2)) + (
        ["", provenance({"cpu_batcher_gil.jsonl": rows})] if rows else [])


def load_client(results: Results) -> list[str]:
    """cnnbench's load client and plain httpx on the same Poisson arrivals, one process each."""
    rows = results.jsonl("cpu_load_client.jsonl")

    def cell(row: dict | None) -> str:
        if row is None:
            return "—"
        p50 = row["p50_ms"]
        latency = f"{p50 / 1000:.1f} s" if p50 >= 1000 else f"{p50:.1f} ms"
        lag = row["client_lag_p99_ms"]
        lag_text = f"{lag / 1000:.1f} s" if lag >= 1000 else f"{lag:.1f} ms"
        return f"{number(row['answered_rps'])}, {latency}, {lag_text}"

    offered = sorted({r["offered_rps"] for r in rows})
    by = {(r["client"], r["offered_rps"]): r for r in rows}
    lines = [[number(rate), cell(by.get(("cnnbench", rate))), cell(by.get(("httpx", rate)))] for rate in offered]
    header = ["offered req/s", "cnnbench client: answered/s, p50, client lag p99",
              "plain httpx: answered/s, p50, client lag p99"]
    return table(header, lines or _absent("load_client.py", 3), "rll")
