"""The numbers of `gpu_perf.sh` as README tables: inference images/s by input and batch size for
each backend, the issue's ratios (resident against the plain compiled forward, uint8 pinned
against resident at batch 256), and the training rows (each spec, strategy and option) beside the
peers.

python benchmarks/perf_summary.py OUT_DIR [ROWS]   (ROWS default h200_perf.csv)
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

INPUTS = ("resident", "uint8_pinned", "float32_pinned", "float32_pageable")


def _rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as handle:
        return list(csv.DictReader(handle))


def _peers(path: Path) -> dict[str, dict]:
    if not path.exists():
        return {}
    found = {}
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            found[record.get("pair", record.get("peer", "?"))] = record
    return found


def _ips(row: dict | None) -> str:
    if row is None:
        return "—"
    if row["status"] != "ok":
        return row["status"]
    return f"{float(row['images_per_sec']):,.0f}"


def inference_table(rows: list[dict]) -> list[str]:
    infer = [r for r in rows if r["mode"] == "infer" and r["variant"] in INPUTS]
    if not infer:
        return []
    cells = {(r["backend"], r["variant"], r["global_batch"]): r for r in infer}
    skipped = {(r["backend"], r["variant"]): r for r in infer if r["status"] == "skipped"}
    batches = sorted({int(r["global_batch"]) for r in infer if r["status"] != "skipped"})
    backends = sorted({r["backend"] for r in infer})
    columns = [(b, i) for b in backends for i in INPUTS]
    lines = ["| batch | " + " | ".join(f"{b} {i}" for b, i in columns) + " |",
             "|---:|" + "---:|" * len(columns)]
    for batch in batches:
        line = [_ips(skipped.get((b, i)) or cells.get((b, i, str(batch)))) for b, i in columns]
        lines.append(f"| {batch} | " + " | ".join(line) + " |")
    return lines


def ratios(rows: list[dict], peers: dict[str, dict], batch: int = 256) -> list[str]:
    ok = {(r["backend"], r["variant"], int(r["global_batch"])): float(r["images_per_sec"])
          for r in rows if r["mode"] == "infer" and r["status"] == "ok"}
    lines = []
    for backend in ("torch", "jax"):
        resident, uint8 = ok.get((backend, "resident", batch)), ok.get((backend, "uint8_pinned", batch))
        peer = peers.get(f"infer-{backend}-b{batch}", {}).get("images_per_sec")
        if resident and peer:
            lines.append(f"- {backend} b{batch}: resident {resident:,.0f} vs plain compiled bf16 forward "
                         f"{peer:,.0f} img/s = {resident / peer:.3f} (target >= 0.95)")
        if resident and uint8:
            lines.append(f"- {backend} b{batch}: uint8_pinned {uint8:,.0f} vs resident = {uint8 / resident:.3f} "
                         f"(target >= 0.90)")
    return lines


def training_table(rows: list[dict]) -> list[str]:
    train = [r for r in rows if r["mode"] != "infer" and r["mode"] != "serve"]
    if not train:
        return []
    lines = ["| spec | backend / strategy | batch | options | images/s | step ms | first step s | status |",
             "|---|---|---:|---|---:|---:|---:|---|"]
    for r in train:
        options = dict(o.split("=", 1) for o in (r.get("backend_options") or "").split(";") if "=" in o)
        shown = ["compiled"] if r["compile"].lower() == "true" else ["jit"] if r["backend"] == "jax" else []
        if shown and r["backend"] == "torch":
            shown += [f"{k}={options[k]}" for k in ("compile_scope", "compile_mode") if k in options]
        if options.get("wrap_ddp_single") == "True":
            shown += [f"{k}={options[k]}" for k in ("wrap_ddp_single", "ddp_compile", "compiled_autograd")]
        step = f"{float(r['step_time_ms_median']):.1f}" if r["status"] == "ok" else ""
        first = f"{float(r['first_step_s']):.1f}" if r["status"] == "ok" else ""
        error = (r.get("error") or "")[:60]
        lines.append(f"| {r['spec_name']} | {r['backend']} / {r['strategy']} | {r['global_batch']} | "
                     f"{'; '.join(shown)} | {_ips(r)} | {step} | {first} | {r['status']} {error} |")
    return lines


def main() -> None:
    out = Path(sys.argv[1])
    rows = _rows(out / (sys.argv[2] if len(sys.argv) > 2 else "h200_perf.csv"))
    peers = _peers(out / "peers.jsonl")
    sections = [("Inference images/s by input", inference_table(rows)), ("Ratios", ratios(rows, peers)),
                ("Training rows", training_table(rows)),
                ("Peers", [f"- {k}: {v.get('images_per_sec', v.get('error', '')[:80])}" for k, v in peers.items()])]
    for title, lines in sections:
        if lines:
            print(f"\n### {title}\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
