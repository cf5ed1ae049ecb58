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
from cnnbench.report.figure import EMULATED_NOTE  # noqa: F401 - re-exported for callers
from cnnbench.table import store
from cnnbench.table.spread import DEFAULT_SPREAD_LIMIT, noisy_markdown, noisy_rows

INFER_MODES = ("infer", "serve", "serve-http")
GROUP = ["spec_name", "spec_hash", "model", "dataset", "backend", "strategy", "microbatches", "scaling",
         "precision", "compile", "device_family"]
CHARTS = ("throughput", "efficiency", "first_step", "step_time", "accuracy_time", "memory", "energy")


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
    frame = fill_missing_keys(frame)
    frame["device_family"] = frame["device_type"].replace({"cpu-emulated": "cpu"})
    frame["label"] = frame["backend"] + "/" + frame["strategy"] + np.where(frame["compile"], " +compile", "")
    return frame


# Rows that measure no model (the HTTP stack alone: `benchmarks/serve_pipeline.py`) or come from older
# files leave some key columns empty; every chart groups and labels by them, and pandas drops a group
# whose key is missing (or refuses `NA` as a truth value), so empty keys get a name that says so.
MISSING_KEY_NAMES = {"model": "no model", "strategy": "-", "precision": "-", "spec_name": "-", "scaling": "-",
                     "dataset": "-", "device_type": "unknown", "variant": "-"}


def fill_missing_keys(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with empty ``compile`` read as off and empty key columns named (see MISSING_KEY_NAMES)."""
    frame = frame.copy()
    frame["compile"] = frame["compile"].fillna(False).astype(bool)
    for column, name in MISSING_KEY_NAMES.items():
        frame[column] = frame[column].fillna(name)
    return frame


def aggregate(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration and device count: medians over trials, with min and max."""
    keys = [*GROUP, "label", "devices", "per_device_batch", "global_batch", "device_type"]
    # pipeline runs that differ only in their micro-batches are different configurations
    micro = frame["microbatches"].astype("Int64").astype(str)
    frame = frame.assign(label=frame["label"].where(frame["microbatches"].isna(), frame["label"] + " x" + micro + "mb"))
    agg = frame.groupby(keys, dropna=False).agg(
        ips=("images_per_sec", "median"), ips_min=("images_per_sec", "min"), ips_max=("images_per_sec", "max"),
        step_ms=("step_time_ms_median", "median"), p10=("step_time_ms_p10", "median"),
        p90=("step_time_ms_p90", "median"), first_step_s=("first_step_s", "median"),
        first_min=("first_step_s", "min"), first_max=("first_step_s", "max"),
        memory_mb=("peak_memory_mb", "median"), accuracy=("test_accuracy", "median"),
        tta_s=("time_to_accuracy_s", "median"), trials=("run_id", "count"),
    ).reset_index()
    # throughput at the windows' p90 and p10 step times: the spread drawn as error bars
    agg["ips_p10"] = agg["global_batch"] * 1000.0 / agg["p90"]
    agg["ips_p90"] = agg["global_batch"] * 1000.0 / agg["p10"]
    return agg.sort_values([*GROUP, "devices"]).reset_index(drop=True)


def efficiency(agg: pd.DataFrame) -> pd.DataFrame:
    """Scaling efficiency of every multi-device point against its 1-device baseline."""
    out = []
    base_keys = [*GROUP, "per_device_batch"]
    for _, row in agg.iterrows():
        same = agg
        for key in GROUP:  # NA-safe: a missing value (no micro-batches) matches a missing value
            same = same[same[key].isna()] if pd.isna(row[key]) else same[same[key] == row[key]]
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
    """What was drawn: chart name -> file paths, and the tables behind them (for tests and the page)."""

    out_dir: Path
    files: dict[str, list[Path]] = field(default_factory=dict)
    tables: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)  # closed matplotlib figures, data still readable
    notes: dict[str, list[str]] = field(default_factory=dict)  # chart -> what it leaves out, and why
    not_drawn: dict[str, str] = field(default_factory=dict)  # chart -> why there is none this time


def build_report(paths: list[Path], out_dir: Path, model: str | None = None, dataset: str | None = None,
                 device_type: str | None = None, spread_limit: float = DEFAULT_SPREAD_LIMIT) -> Report:
    """Every chart the rows allow, summary.md (with the noisy measurements), and index.html."""
    import matplotlib

    matplotlib.use("Agg")
    from cnnbench.report import energy, page, scaling, style

    style.apply_defaults()
    everything = load(paths, model, dataset, device_type)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = Report(out_dir)
    inference = everything[everything["mode"].isin(INFER_MODES)]
    summary = ""
    if not inference.empty:
        from cnnbench.report import infer as report_infer

        report_infer.draw(inference, report, not_ok_rows(paths, model, dataset, device_type))
        summary = report_infer.summary_markdown(inference)
    noisy = noisy_markdown(noisy_rows(everything, spread_limit), spread_limit)
    energy.draw(report, everything)
    noisy = energy.summary_markdown(everything) + noisy  # both follow the summary table
    report.tables["noisy"] = noisy
    frame = everything[~everything["mode"].isin(INFER_MODES)]
    if not frame.empty:
        agg = aggregate(frame)
        eff = efficiency(agg)
        report.tables.update(aggregate=agg, efficiency=eff)
        for metric in scaling.METRICS:
            scaling.draw_metric(report, agg, frame, metric)
        scaling.draw_efficiency(report, eff, agg, frame)
        _accuracy_chart(report, paths, frame)
        training = summary_table(agg, eff)
        report.tables["summary"] = training
        summary = training + ("\n" + summary if summary else "")
    if summary or noisy:
        _write_summary(report, (summary + noisy).lstrip())
    _remove_stale_charts(report)
    page.write_index(report, everything, paths)
    return report


def _write_summary(report: Report, text: str) -> None:
    (report.out_dir / "summary.md").write_text(text)
    report.files["summary"] = [report.out_dir / "summary.md"]


def not_ok_rows(paths: list[Path], model: str | None, dataset: str | None,
                device_type: str | None) -> pd.DataFrame:
    """Skipped and failed rows (after the same filters): the charts say what they leave out."""
    frame = store.read_results(paths)
    wanted = {c: v for c, v in (("model", model), ("dataset", dataset), ("device_type", device_type)) if v}
    keep = (frame[list(wanted)] == pd.Series(wanted)).all(axis=1) if wanted else True
    return frame[(frame["status"] != "ok") & keep]


def _remove_stale_charts(report: Report) -> None:
    """A chart this report did not draw must not linger from an earlier one in the same folder."""
    from cnnbench.report.infer import CHARTS as INFER_CHARTS

    for name in (*CHARTS, *INFER_CHARTS):
        if name in report.files:
            continue
        for ext in ("png", "svg"):
            (report.out_dir / f"{name}.{ext}").unlink(missing_ok=True)


def _accuracy_chart(report: Report, paths: list[Path], frame: pd.DataFrame) -> None:
    """Test accuracy against training wall time, one panel per model (and scaling mode), from the history files."""
    from cnnbench.report import figure
    from cnnbench.report.style import DEVICE_MARKERS, series_rank, series_style

    curves = {}
    for path in paths:
        history = store.read_history(Path(path))
        if history.empty:
            continue
        merged = history.merge(frame[["run_id", "label", "devices", "model", "scaling", "backend", "strategy",
                                      "compile"]], on="run_id")
        for (label, devices, model_name, scaling), part in merged.groupby(["label", "devices", "model", "scaling"]):
            # trials: the median accuracy at each epoch, plotted against the median wall time
            curve = part.groupby("epoch").agg(wall_s=("wall_s", "median"), acc=("test_accuracy", "median"))
            curves[(model_name, scaling, f"{label} x{devices}")] = (curve, part.iloc[0], devices)
    report.tables["accuracy_time"] = {key[2] if len({k[1] for k in curves}) == 1 else f"{key[2]} {key[1]}": curve
                                      for key, (curve, _, _) in curves.items()}
    if not curves:
        report.not_drawn["accuracy_time"] = "no per-epoch history file next to these CSVs"
        return
    several = len({k[1] for k in curves}) > 1
    panels = sorted({k[:2] for k in curves})
    counts = sorted({n for _, _, n in curves.values()})
    fig, axes = figure.panels([f"{m} · {s} scaling" if several else m for m, s in panels], size=(6.0, 4.2))
    order = sorted(curves.items(), key=lambda kv: (series_rank(kv[1][1]["backend"], kv[1][1]["strategy"]), kv[0]))
    for ax, panel in zip(axes, panels):
        for key, (curve, row, devices) in order:
            if key[:2] != panel:
                continue
            # colour: framework and strategy; line style: compiled or not; marker: the device count
            style = series_style(row["backend"], row["strategy"], bool(row["compile"]))
            marker = DEVICE_MARKERS[counts.index(devices) % len(DEVICE_MARKERS)]
            ax.plot(curve["wall_s"], curve["acc"], label=key[2], **{**style.line_kwargs(), "marker": marker})
        ax.set_xlabel("training wall time, s")
        ax.set_ylabel("test accuracy")
    figure.finish(report, fig, "accuracy_time", "Test accuracy vs training time (median over trials)", frame)


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
