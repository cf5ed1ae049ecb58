"""Images per joule beside images per second, from the rows' ``energy_j_per_image`` (NVML's energy counter).

One chart per results set whose GPU rows have energy (training, inference and serving rows alike,
one bar per configuration), and a summary section naming the most energy-efficient configuration
of each model. Rows without energy are counted and the reason given: CPU rows (NVML measures GPUs
only), GPU rows whose GPU has no energy counter (before Volta), whose timed windows lasted under 2 s
in all (the counter moves in ~0.1 s steps), or that were written before the column existed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

ENERGY_CHART = "energy"
KEYS = ["model", "mode", "label", "precision", "per_device_batch", "devices", "arrival_rate_rps"]


def configurations(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration with energy: median img/s, img/J and mean power per GPU."""
    if "energy_j_per_image" not in frame.columns:
        return pd.DataFrame()
    ok = frame[(frame["status"] == "ok") & frame["energy_j_per_image"].notna()].copy()
    if ok.empty:
        return pd.DataFrame()
    compiled = ok["compile"].astype("boolean").fillna(False).astype(bool)
    ok["label"] = ok["backend"] + "/" + ok["strategy"] + np.where(compiled, " +compile", "")
    if "variant" in ok.columns:
        named = ok["variant"].notna() & (ok["variant"].astype(str) != "")
        ok.loc[named, "label"] = ok.loc[named, "label"] + " " + ok.loc[named, "variant"].astype(str)
    ok["images_per_joule"] = 1.0 / ok["energy_j_per_image"]
    keys = [k for k in KEYS if k in ok.columns]
    return ok.groupby(keys, dropna=False).agg(
        ips=("images_per_sec", "median"), images_per_joule=("images_per_joule", "median"),
        power_w=("mean_power_w", "median"), rows=("run_id", "count"),
    ).reset_index()


def missing_reasons(frame: pd.DataFrame) -> list[str]:
    """Why rows have no energy columns, one sentence per kind of row."""
    ok = frame[frame["status"] == "ok"]
    energy = ok["energy_j_per_image"] if "energy_j_per_image" in ok.columns else pd.Series(np.nan, index=ok.index)
    out = []
    cpu = int((ok["device_type"] == "cpu").sum())
    if cpu:
        out.append(f"{cpu} CPU row(s): no energy (NVML's counter measures NVIDIA GPUs only).")
    gpu_without = int(((ok["device_type"] != "cpu") & energy.isna()).sum())
    if gpu_without:
        out.append(f"{gpu_without} GPU row(s) without energy: no NVML or no energy counter on that GPU "
                   f"(before Volta), timed windows under 2 s in all (the counter moves in ~0.1 s steps), or "
                   f"rows written before the energy columns existed.")
    return out


def summary_markdown(frame: pd.DataFrame) -> str:
    """The most energy-efficient configuration per model, and why other rows have no energy."""
    table = configurations(frame)
    reasons = missing_reasons(frame)
    if table.empty and not reasons:
        return ""
    lines = ["", "## Energy (NVML energy counter over the timed windows)", ""]
    if not table.empty:
        lines += ["| model | most images per joule | mode | batch | images/J | images/s | W per GPU |",
                  "|---|---|---|---:|---:|---:|---:|"]
        for model, part in table.groupby("model"):
            best = part.loc[part["images_per_joule"].idxmax()]
            power = f"{best['power_w']:.0f}" if pd.notna(best["power_w"]) else "-"
            lines.append(f"| {model} | {best['label']} | {best['mode']} | {best['per_device_batch']} | "
                         f"{best['images_per_joule']:.2f} | {best['ips']:,.0f} | {power} |")
    lines += ["", *reasons] if reasons else []
    return "\n".join(lines) + "\n"


def draw(report, frame: pd.DataFrame) -> None:
    """Images/s and images/J side by side, one bar per configuration; nothing where no row has energy."""
    from cnnbench.report import figure

    table = configurations(frame)
    if table.empty:
        report.not_drawn[ENERGY_CHART] = " ".join(missing_reasons(frame)) or "no GPU rows with energy"
        return
    table = table.sort_values(["model", "mode", "label", "per_device_batch"])
    names = [f"{r.model} {r.mode} {r.label} b{r.per_device_batch}" for r in table.itertuples()]
    fig, axes = figure.panels(["images per second", "images per joule"], ncols=2,
                              size=(5.5, max(2.5, 0.35 * len(names) + 1)))
    for ax, column, fmt in ((axes[0], "ips", "{:,.0f}"), (axes[1], "images_per_joule", "{:.2f}")):
        ys = np.arange(len(names))
        ax.barh(ys, table[column], color="#4c72b0")
        ax.set_yticks(ys, names if ax is axes[0] else [""] * len(names), fontsize=8)
        ax.invert_yaxis()
        for y, value in zip(ys, table[column]):
            ax.text(value, y, " " + fmt.format(value), va="center", fontsize=8)
    report.tables[ENERGY_CHART] = table
    figure.finish(report, fig, ENERGY_CHART, "Throughput and energy efficiency (GPU rows)", frame,
                  notes=missing_reasons(frame))
