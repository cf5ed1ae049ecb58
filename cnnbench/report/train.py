"""Charts (matplotlib) and a summary table from any number of result CSVs.

Trials of one configuration are aggregated (median, with min-max bars), never drawn twice.
Scaling efficiency is computed here, not in the worker: against the 1-device run of the same spec,
backend, strategy, scaling mode, precision and device family (a 1-device CPU run is the baseline of
emulated CPU runs); weak scaling ``ips(N) / (N * ips(1))``, strong scaling ``t(1) / (N * t(N))``.
Charts built from emulated CPU devices say so in their title.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cnnbench.errors import ResultsFileError
from cnnbench.table import store
from cnnbench.table.spread import DEFAULT_SPREAD_LIMIT, noisy_markdown, noisy_rows

EMULATED_NOTE = "emulated CPU devices: the parallel code path, not hardware scaling"
GROUP = ["spec_name", "spec_hash", "model", "dataset", "backend", "strategy", "scaling", "precision",
         "compile", "device_family"]
CHARTS = ("throughput", "efficiency", "first_step", "step_time", "accuracy_time", "memory")


def load(paths: list[Path], model: str | None = None, dataset: str | None = None,
         device_type: str | None = None) -> pd.DataFrame:
    """Ok rows of the CSVs, filtered; one clear error when nothing is left."""
    frame = store.read_results(paths)
    frame = frame[frame["status"] == "ok"]
    for column, value in (("model", model), ("dataset", dataset), ("device_type", device_type)):
        if value is not None:
            frame = frame[frame[column] == value]
    if frame.empty:
        wanted = ", ".join(f"{k}={v}" for k, v in (("model", model), ("dataset", dataset),
                                                   ("device_type", device_type)) if v) or "status=ok"
        raise ResultsFileError(f"{', '.join(map(str, paths))}: no rows match ({wanted})")
    frame = frame.copy()
    frame["device_family"] = frame["device_type"].replace({"cpu-emulated": "cpu"})
    frame["label"] = frame["backend"] + "/" + frame["strategy"] + np.where(frame["compile"], " +compile", "")
    return frame


def aggregate(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration and device count: medians over trials, with min and max."""
    keys = [*GROUP, "label", "devices", "per_device_batch", "global_batch", "device_type"]
    agg = frame.groupby(keys, dropna=False).agg(
        ips=("images_per_sec", "median"), ips_min=("images_per_sec", "min"), ips_max=("images_per_sec", "max"),
        step_ms=("step_time_ms_median", "median"), p10=("step_time_ms_p10", "median"),
        p90=("step_time_ms_p90", "median"), first_step_s=("first_step_s", "median"),
        first_min=("first_step_s", "min"), first_max=("first_step_s", "max"),
        memory_mb=("peak_memory_mb", "median"), accuracy=("test_accuracy", "median"),
        tta_s=("time_to_accuracy_s", "median"), trials=("run_id", "count"),
    ).reset_index()
    return agg.sort_values([*GROUP, "devices"]).reset_index(drop=True)


def efficiency(agg: pd.DataFrame) -> pd.DataFrame:
    """Scaling efficiency of every multi-device point against its 1-device baseline."""
    out = []
    base_keys = [*GROUP, "per_device_batch"]
    for _, row in agg.iterrows():
        same = agg
        for key in GROUP:
            same = same[same[key] == row[key]]
        if row["scaling"] == "weak":
            same = same[same["per_device_batch"] == row["per_device_batch"]]
        else:
            same = same[same["global_batch"] == row["global_batch"]]
        base = same[same["devices"] == 1]
        if base.empty:
            continue
        base = base.iloc[0]
        n = row["devices"]
        if row["scaling"] == "weak":
            value = row["ips"] / (n * base["ips"])
        else:
            value = base["step_ms"] / (n * row["step_ms"])
        out.append({**{k: row[k] for k in base_keys}, "label": row["label"], "devices": n,
                    "global_batch": row["global_batch"], "efficiency": float(value)})
    return pd.DataFrame(out)


@dataclass
class Report:
    """What was drawn: chart name -> file paths, and the tables behind them (for tests)."""

    out_dir: Path
    files: dict[str, list[Path]] = field(default_factory=dict)
    tables: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)  # closed matplotlib figures, data still readable


def _title(base: str, frame: pd.DataFrame) -> str:
    if (frame["device_type"] == "cpu-emulated").any():
        return f"{base}\n({EMULATED_NOTE})"
    return base


def _devices_axis(ax, devices) -> None:
    """log2 x-axis labelled with the device counts themselves (1, 2, 4 ... not 2^k)."""
    ticks = sorted({int(n) for n in devices})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(n) for n in ticks])
    ax.set_xlabel("devices")


def _finish_chart(report: Report, fig, name: str, title: str, ylabel: str, frame: pd.DataFrame,
                  devices: pd.Series | None = None) -> None:
    """Axis labels, title (with the emulation note), legend; save as PNG and SVG; close."""
    import matplotlib.pyplot as plt

    ax = fig.axes[0]
    if devices is not None:
        _devices_axis(ax, devices)
    ax.set_ylabel(ylabel)
    ax.set_title(_title(title, frame))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    _save(fig, report, name)
    plt.close(fig)


def _save(fig, report: Report, name: str) -> None:
    report.figures[name] = fig
    paths = []
    for ext in ("png", "svg"):
        path = report.out_dir / f"{name}.{ext}"
        fig.savefig(path, dpi=120, bbox_inches="tight")
        paths.append(path)
    report.files[name] = paths


def build_report(paths: list[Path], out_dir: Path, model: str | None = None, dataset: str | None = None,
                 device_type: str | None = None, spread_limit: float = DEFAULT_SPREAD_LIMIT) -> Report:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    everything = load(paths, model, dataset, device_type)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = Report(out_dir)
    inference = everything[everything["mode"].isin(["infer", "serve"])]
    if not inference.empty:
        from cnnbench.report import infer as report_infer

        report_infer.draw(inference, report, _finish_chart)
    noisy = noisy_markdown(noisy_rows(everything, spread_limit), spread_limit)
    report.tables["noisy"] = noisy
    frame = everything[~everything["mode"].isin(["infer", "serve"])]
    if frame.empty:
        if noisy:
            _write_summary(report, noisy.lstrip())
        return report
    agg = aggregate(frame)
    eff = efficiency(agg)
    report.tables.update(aggregate=agg, efficiency=eff)
    series = list(agg.groupby(["label", "scaling", "model", "precision"], dropna=False))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (label, scaling, model_name, precision), part in series:
        ax.errorbar(part["devices"], part["ips"], yerr=[part["ips"] - part["ips_min"], part["ips_max"] - part["ips"]],
                    marker="o", capsize=3, label=f"{label} {model_name} {precision} ({scaling})")
        base = part[part["devices"] == 1]
        if not base.empty and scaling == "weak":
            ns = np.array(sorted(part["devices"]))
            ax.plot(ns, base["ips"].iloc[0] * ns, ls=":", color="grey", lw=1)
    _finish_chart(report, fig, "throughput", "Throughput vs devices (dotted: ideal linear)",
                  "images / s (all devices)", frame, agg["devices"])

    fig, ax = plt.subplots(figsize=(7, 4.5))
    if not eff.empty:
        for (label, scaling), part in eff.groupby(["label", "scaling"]):
            ax.plot(part["devices"], part["efficiency"], marker="o", label=f"{label} ({scaling} scaling)")
        ax.axhline(1.0, color="grey", ls=":", lw=1)
    _finish_chart(report, fig, "efficiency", "Scaling efficiency (weak: ips(N)/(N ips(1)); strong: t(1)/(N t(N)))",
                  "scaling efficiency", frame, agg["devices"])

    first = agg.groupby(["label", "model"], dropna=False).agg(
        first_step_s=("first_step_s", "median")).reset_index()
    report.tables["first_step"] = first
    fig, ax = plt.subplots(figsize=(7, 4.5))
    names = [f"{r.label}\n{r.model}" for r in first.itertuples()]
    ax.bar(names, first["first_step_s"])
    ax.tick_params(axis="x", labelsize=7, labelrotation=30)
    _finish_chart(report, fig, "first_step", "First-step time", "first step (compile + run), s", frame)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (label, scaling, model_name, precision), part in series:
        spread = [part["step_ms"] - part["p10"], part["p90"] - part["step_ms"]]
        ax.errorbar(part["devices"], part["step_ms"], yerr=spread, marker="o", capsize=3,
                    label=f"{label} {model_name} {precision} ({scaling})")
    _finish_chart(report, fig, "step_time", "Step time", "step time, ms (median, p10-p90)", frame, agg["devices"])

    fig, ax = plt.subplots(figsize=(7, 4.5))
    curves = {}
    for path in paths:
        history = store.read_history(Path(path))
        if history.empty:
            continue
        merged = history.merge(frame[["run_id", "label", "devices", "model"]], on="run_id")
        for (label, devices, model_name), part in merged.groupby(["label", "devices", "model"]):
            # trials: the median accuracy at each epoch, plotted against the median wall time
            curve = part.groupby("epoch").agg(wall_s=("wall_s", "median"), acc=("test_accuracy", "median"))
            key = f"{label} {model_name} x{devices}"
            curves[key] = curve
            ax.plot(curve["wall_s"], curve["acc"], marker=".", label=key)
    report.tables["accuracy_time"] = curves
    ax.set_xlabel("training wall time, s")
    _finish_chart(report, fig, "accuracy_time", "Test accuracy vs training time", "test accuracy", frame)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (label, scaling, model_name, precision), part in series:
        ax.plot(part["devices"], part["memory_mb"], marker="o", label=f"{label} {model_name} {precision} ({scaling})")
    _finish_chart(report, fig, "memory", "Peak memory per device", "peak memory of device 0, MiB (CPU: process RSS)",
                  frame, agg["devices"])

    summary = summary_table(agg, eff)
    report.tables["summary"] = summary
    _write_summary(report, summary + noisy)
    return report


def _write_summary(report: Report, text: str) -> None:
    (report.out_dir / "summary.md").write_text(text)
    report.files["summary"] = [report.out_dir / "summary.md"]


def summary_table(agg: pd.DataFrame, eff: pd.DataFrame) -> str:
    """Per spec: the best backend/strategy, its img/s, efficiency at the largest count, accuracy."""
    lines = ["| spec | model | scaling | best backend/strategy | devices | images/s | efficiency at max devices "
             "| test accuracy | time to accuracy s |", "|---|---|---|---|---:|---:|---:|---:|---:|"]
    for (spec, model, scaling), part in agg.groupby(["spec_name", "model", "scaling"]):
        top = part[part["devices"] == part["devices"].max()]
        best = top.loc[top["ips"].idxmax()]
        effs = eff[(eff["label"] == best["label"]) & (eff["devices"] == best["devices"])
                   & (eff["scaling"] == scaling)] if not eff.empty else eff
        eff_text = f"{effs['efficiency'].iloc[0]:.2f}" if len(effs) else "-"
        acc = f"{best['accuracy']:.3f}" if pd.notna(best["accuracy"]) else "-"
        tta = f"{best['tta_s']:.1f}" if pd.notna(best["tta_s"]) else "-"
        lines.append(f"| {spec} | {model} | {scaling} | {best['label']} | {best['devices']} | {best['ips']:,.0f} "
                     f"| {eff_text} | {acc} | {tta} |")
    return "\n".join(lines) + "\n"


def report_dir_for(results_csv: Path) -> Path:
    """Where `cnnbench run` puts the charts of a CSV: results/x.csv -> results/x/."""
    return results_csv.with_name(results_csv.stem)
