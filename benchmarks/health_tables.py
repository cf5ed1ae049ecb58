"""Markdown tables for docs/health.md from the rows `benchmarks/gpu_health.sh` writes.

    python3 benchmarks/health_tables.py --rows health_rows.csv --infer-rows infer_rows.csv [--known known.jsonl]

Prints: the health of the profiled training runs (img/s beside GPU busy over the timed steps and over
the traced window, copies, syncs, NVML), energy per image of every GPU row that has it (training and
inference), and the known-answer checks.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cnnbench.table import store  # noqa: E402


def _f(value, spec: str) -> str:
    return "-" if value is None else spec.format(value)


def _read(path: Path | None) -> list[dict]:
    return store.read_rows(path) if path and path.is_file() and path.stat().st_size else []


def _label(row: dict) -> str:
    return f"{row['backend']}/{row['strategy']}{' +compile' if row.get('compile') else ''}"


def health_table(rows: list[dict]) -> str:
    lines = ["| run | img/s | ms/step | GPU busy (timed steps) | memcpy | sync | H2D B/image | NVML util | "
             "NVML power |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("profile_path") and r["status"] == "ok" and r.get("mode", "train") == "train":
            lines.append(f"| {_label(r)} b{r['per_device_batch']} | {_f(r['images_per_sec'], '{:,.0f}')} | "
                         f"{_f(r['step_time_ms_median'], '{:.1f}')} | {_f(r['device_busy_share'], '{:.1%}')} | "
                         f"{_f(r['copy_share'], '{:.1%}')} | {_f(r['sync_share'], '{:.1%}')} | "
                         f"{_f(r['h2d_bytes_per_image'], '{:,.0f}')} | {_f(r['nvml_gpu_util_pct'], '{:.0f}%')} | "
                         f"{_f(r['nvml_power_w'], '{:.0f} W')} |")
    return "\n".join(lines)


def energy_table(rows: list[dict]) -> str:
    lines = ["| mode | run | batch | img/s | J/image | images/J | W per GPU |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r["status"] == "ok" and r.get("energy_j_per_image"):
            lines.append(f"| {r['mode']} | {_label(r)} | {r['per_device_batch']} | "
                         f"{_f(r['images_per_sec'], '{:,.0f}')} | {r['energy_j_per_image']:.4f} | "
                         f"{1 / r['energy_j_per_image']:.1f} | {_f(r['mean_power_w'], '{:.0f}')} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=Path, required=True)
    parser.add_argument("--infer-rows", type=Path)
    parser.add_argument("--known", type=Path)
    args = parser.parse_args()
    train, infer = _read(args.rows), _read(args.infer_rows)
    print("Profiled ResNet-50 training (bf16, synthetic data resident on the GPU):\n")
    print(health_table(train) + "\n")
    print("Energy per image (NVML energy counter over the timed windows):\n")
    print(energy_table(train + infer) + "\n")
    if args.known and args.known.is_file():
        from benchmarks.health_known import summary

        print("Known-answer checks:\n")
        summary(args.known)


if __name__ == "__main__":
    main()
