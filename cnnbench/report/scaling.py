"""Training charts: one panel per model, precision and scaling mode; bars or lines by what was run.

A panel whose rows have one device count draws grouped bars (one per backend/strategy/compile, the
frameworks side by side, the p10-p90 spread as error bars, the value printed); a panel with several
device counts draws lines against devices on a log2 axis, with the ideal-linear reference where the
metric has one. Weak and strong scaling never share a panel: their x-axes mean different things.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cnnbench.report import figure
from cnnbench.report.bars import Bar, draw_bars
from cnnbench.report.style import IDEAL_STYLE, REPEAT_ALPHAS, series_rank, series_style

PANEL_KEYS = ["model", "precision", "scaling"]


@dataclass(frozen=True)
class Metric:
    name: str
    title: str
    ylabel: str
    column: str
    lo: str | None  # columns holding the error bar's ends
    hi: str | None
    fmt: Callable[[float], str]
    spread: str = ""  # what the error bars are, for the title
    ideal: Callable[[float, np.ndarray, str], np.ndarray] | None = None  # (1-device value, N, scaling)


def _linear(base: float, n: np.ndarray, scaling: str) -> np.ndarray:
    return base * n


METRICS = (
    Metric("throughput", "Training throughput", "images / s (all devices)", "ips", "ips_p10", "ips_p90",
           lambda v: f"{v:,.0f}", "error bars: p10-p90 of the timing windows", _linear),
    Metric("step_time", "Step time", "step time, ms (median)", "step_ms", "p10", "p90",
           lambda v: f"{v:.1f}" if v >= 10 else f"{v:.2f}", "error bars: p10-p90 of the timing windows"),
    Metric("first_step", "First-step time (compile + first run)", "first step, s", "first_step_s", "first_min",
           "first_max", lambda v: f"{v:.1f}", "error bars: min-max over trials"),
    Metric("memory", "Peak memory of device 0 (CPU: process RSS)", "peak memory, MiB", "memory_mb",
           None, None, lambda v: f"{v:,.0f}"),
)


def panel_title(key: tuple, several: dict[str, bool]) -> str:
    model, precision, scaling = key
    parts = [str(model)]
    if several["precision"]:
        parts.append(str(precision))
    if several["scaling"]:
        parts.append(f"{scaling} scaling")
    return " · ".join(parts)


def split_panels(agg: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(title, rows) per model x precision x scaling; precision/scaling named only where they vary."""
    out = []
    # scaling is named wherever any panel plots against devices (weak and strong then mean different x)
    multi = agg.groupby(PANEL_KEYS, dropna=False)["devices"].nunique().max() > 1
    several = {"precision": agg["precision"].nunique() > 1, "scaling": bool(multi and agg["scaling"].nunique() > 1)}
    keys = PANEL_KEYS if several["scaling"] or multi else ["model", "precision"]
    for key, part in agg.groupby(keys, dropna=False, sort=True):
        key = (*key, part["scaling"].iloc[0]) if len(keys) == 2 else key
        out.append((panel_title(key, several), part))
    return out


def series_of(panel: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(legend label, rows) per series of one panel; batch and spec named only where they tell apart."""
    panel = panel.copy()
    batch = np.where(panel["scaling"] == "strong", panel["global_batch"], panel["per_device_batch"])
    panel["_batch"] = batch
    keys = ["label"]
    if panel.groupby("label")["_batch"].nunique().max() > 1:
        keys.append("_batch")
    if panel.duplicated([*keys, "devices"]).any():
        keys.append("spec_name")
    out = []
    order = sorted(panel.groupby(keys, dropna=False, sort=False),
                   key=lambda kv: (*_rank(kv[1]), str(kv[0])))
    for key, part in order:
        key = key if isinstance(key, tuple) else (key,)
        name = str(key[0])
        if "_batch" in keys:
            name += f" b{key[keys.index('_batch')]}"
        if "spec_name" in keys:
            name += f" [{key[keys.index('spec_name')]}]"
        out.append((name, part.sort_values("devices")))
    return out


def _rank(part: pd.DataFrame):
    row = part.iloc[0]
    return series_rank(row["backend"], row["strategy"], bool(row["compile"]))


def _style(part: pd.DataFrame):
    row = part.iloc[0]
    return series_style(row["backend"], row["strategy"], bool(row["compile"]))


def _bars(ax, panel: pd.DataFrame, metric: Metric) -> None:
    bars = []
    for name, part in series_of(panel):
        row = part.iloc[0]
        bars.append(Bar(group=row["backend"], label=name, tick=name, value=float(row[metric.column]),
                        lo=float(row[metric.lo]) if metric.lo else None,
                        hi=float(row[metric.hi]) if metric.hi else None, style=_style(part)))
    draw_bars(ax, bars, metric.fmt)


def _lines(ax, panel: pd.DataFrame, metric: Metric) -> bool:
    """Lines against devices; returns whether an ideal-linear reference was drawn."""
    drew_ideal = faded = False
    same_label: dict[str, int] = {}
    for name, part in series_of(panel):
        style = _style(part)
        kwargs = style.line_kwargs()
        # series of one configuration at other batch sizes (or specs): same colour and line, fainter;
        # never another line style, since dashed says "compiled"
        k = same_label[part["label"].iloc[0]] = same_label.get(part["label"].iloc[0], -1) + 1
        if k:
            kwargs["alpha"] = REPEAT_ALPHAS[min(k, len(REPEAT_ALPHAS) - 1)]
            faded = True
        x, y = part["devices"].to_numpy(dtype=float), part[metric.column].to_numpy(dtype=float)
        if metric.lo:
            err = [y - part[metric.lo].to_numpy(dtype=float), part[metric.hi].to_numpy(dtype=float) - y]
            ax.errorbar(x, y, yerr=np.clip(err, 0, None), capsize=3, label=name, **kwargs)
        else:
            ax.plot(x, y, label=name, **kwargs)
        base = part[part["devices"] == 1]
        if metric.ideal and not base.empty and len(x) > 1:
            # in the series' own colour: with several series one grey line per series says nothing
            ax.plot(x, metric.ideal(float(base[metric.column].iloc[0]), x, part["scaling"].iloc[0]),
                    color=style.color, ls=":", lw=1.1, alpha=0.8, label="_ideal")
            drew_ideal = True
    if drew_ideal:
        figure.reference(ax.plot([], [], label="dotted: ideal linear (1-device value x N)", **IDEAL_STYLE))
    if faded:
        figure.reference(ax.plot([], [], color="#333333", alpha=REPEAT_ALPHAS[1], marker="o", ms=5,
                                 label=f"fainter: {_repeat_name(panel)} of the same configuration"))
    ends = panel[[c for c in (metric.column, metric.lo, metric.hi) if c]].to_numpy(dtype=float)
    ends = ends[np.isfinite(ends) & (ends > 0)]
    if drew_ideal or (ends.size and ends.max() > 10 * ends.min()):
        # ideal scaling is then a straight line, and one noisy window does not flatten every other series
        ax.set_yscale("log")
    figure.log2_axis(ax, panel["devices"], "devices")
    return drew_ideal


def _repeat_name(panel: pd.DataFrame) -> str:
    """What a fainter line of one configuration differs in: its batch size or its spec."""
    names = [n for n, p in series_of(panel) if " [" in n]
    return "another spec" if names else "another batch size"


def _bar_axis_label(panel: pd.DataFrame) -> str:
    n = int(panel["devices"].iloc[0])
    text = f"{n} device" + ("s" if n > 1 else "")
    batches = sorted(panel["global_batch"].unique())
    if len(batches) == 1:
        text += f", batch {int(batches[0])}"
    return text


def draw_metric(report, agg: pd.DataFrame, frame: pd.DataFrame, metric: Metric) -> None:
    split = split_panels(agg)
    widest = max(len(series_of(panel)) for _, panel in split)
    fig, axes = figure.panels([title for title, _ in split], size=(max(5.0, 0.55 * widest + 1.5), 3.8))
    line_panels = 0
    for ax, (_, panel) in zip(axes, split):
        if panel["devices"].nunique() > 1:
            _lines(ax, panel, metric)
            line_panels += 1
        else:
            _bars(ax, panel, metric)
            ax.set_xlabel(_bar_axis_label(panel))
        ax.set_ylabel(metric.ylabel)
    title = metric.title + (" vs devices" if line_panels else "")
    if metric.spread:
        title += f" ({metric.spread})"
    figure.finish(report, fig, metric.name, title, frame)


def draw_efficiency(report, eff: pd.DataFrame, agg: pd.DataFrame, frame: pd.DataFrame) -> None:
    """Scaling efficiency, only where some configuration ran on several device counts."""
    if eff.empty or (eff["devices"] <= 1).all():
        report.not_drawn["efficiency"] = "every configuration ran on one device count: no scaling to measure"
        return
    merged = eff.rename(columns={"efficiency": "eff"})
    split = [(t, p) for t, p in split_panels(merged) if p["devices"].nunique() > 1]
    fig, axes = figure.panels([title for title, _ in split])
    for ax, (_, panel) in zip(axes, split):
        for name, part in series_of(panel):
            ax.plot(part["devices"], part["eff"], label=name, **_style(part).line_kwargs())
        figure.reference(ax.axhline(1.0, label="ideal (1.0)", **IDEAL_STYLE))
        figure.log2_axis(ax, panel["devices"], "devices")
        ax.set_ylabel("scaling efficiency")
    figure.finish(report, fig, "efficiency",
                  "Scaling efficiency (weak: ips(N) / (N ips(1)); strong: t(1) / (N t(N)))", frame)
