"""Serving charts of `cnnbench infer` ([serve]) and `cnnbench load` rows: latency and answered load
against offered load, the first saturated load of each series marked.

One line per model, mode (in-process batcher or HTTP), backend, batching variant, precision and what
each request carried (raw tensors and JPEGs are different workloads). A load counts as saturated when
the server fell behind what was actually sent, judged from the row itself, never from the nominal
rate (a Poisson draw offers some percent more or fewer requests than rate x duration):

- errors: fewer than SERVED_SHARE of the requests offered were answered 200;
- a growing queue: the median request waited QUEUE_SHARE or more of the time the load took to be
  answered (a server that keeps up answers in milliseconds whatever the duration; one that does not
  holds each request longer the longer the load runs);
- latency growth: the median latency is LATENCY_GROWTH times the series' at its lowest load.
"""

from __future__ import annotations

import pandas as pd

from cnnbench.report import figure
from cnnbench.report.style import (
    IDEAL_STYLE,
    INPUT_MARKERS,
    MODE_LINESTYLE,
    MODE_NAMES,
    framework_rank,
    series_style,
)

SERVE_MODES = ("serve", "serve-http")
SERVE_SERIES = ["model", "mode", "backend", "variant", "precision", "request_input"]  # one line each
SERVED_SHARE = 0.9
QUEUE_SHARE = 0.1
LATENCY_GROWTH = 10.0
SATURATION_RULE = (f"Saturated (circled: the first such load of a series): under {SERVED_SHARE:.0%} of the requests "
                   f"offered answered, or the median request waited {QUEUE_SHARE:.0%} or more of the time the "
                   f"load took, or p50 latency {LATENCY_GROWTH:g}x the series' at its lowest load.")


def serve_table(serve: pd.DataFrame) -> pd.DataFrame:
    """Medians over trials per series and offered load, with why each load saturated ('' if it did not)."""
    # in-process rows pass arrays, no request encoding: "" (pandas drops groups with a missing key)
    serve = serve.assign(request_input=serve["request_input"].fillna(""),
                         requests_offered=serve["requests_offered"].fillna(serve["requests"]))
    agg = serve.groupby([*SERVE_SERIES, "arrival_rate_rps"]).agg(
        achieved=("images_per_sec", "median"), p50=("latency_ms_p50", "median"),
        p99=("latency_ms_p99", "median"), mean_batch=("mean_batch", "median"),
        answered=("requests", "median"), offered=("requests_offered", "median")).reset_index()
    agg["saturated"] = ""
    for _, part in agg.groupby(SERVE_SERIES):
        part = part.sort_values("arrival_rate_rps")
        lowest_p50 = float(part["p50"].iloc[0])
        for index, row in part.iterrows():
            agg.loc[index, "saturated"] = saturation_reason(row, lowest_p50 if index != part.index[0] else None)
    return agg


def saturation_reason(row: pd.Series, lowest_p50: float | None) -> str:
    """Why the server did not keep up with this load ('' when it did); see the module's rules. A rule
    whose columns the row leaves empty (older files) is not applied."""
    offered, answered, achieved, p50 = (_number(row[c]) for c in ("offered", "answered", "achieved", "p50"))
    if offered and answered is not None and answered < SERVED_SHARE * offered:
        return f"{answered:,.0f} of {offered:,.0f} requests answered"
    if answered and achieved and p50 is not None:
        took_ms = answered / achieved * 1000.0
        if p50 >= QUEUE_SHARE * took_ms:
            return f"median wait {p50 / 1000:,.1f} s of the {took_ms / 1000:,.1f} s the load took"
    if lowest_p50 and p50 is not None and p50 >= LATENCY_GROWTH * lowest_p50:
        return f"p50 {p50:,.0f} ms, {p50 / lowest_p50:,.0f}x the lowest load's"
    return ""


def _number(value) -> float | None:
    return None if pd.isna(value) else float(value)


def saturation_rate(part: pd.DataFrame) -> float | None:
    """The lowest offered load of one series that saturated; None if none did."""
    over = part[part["saturated"] != ""]
    return float(over["arrival_rate_rps"].min()) if not over.empty else None


def _serve_series(agg: pd.DataFrame):
    several = {c: agg[c].nunique() > 1 for c in ("mode", "precision", "request_input")}
    keys = sorted(agg.groupby(SERVE_SERIES).groups, key=lambda k: (k[0], framework_rank(k[2]), *k[1:]))
    for key in keys:
        model, mode, backend, variant, precision, request_input = key
        part = agg[(agg[SERVE_SERIES] == pd.Series(key, index=SERVE_SERIES)).all(axis=1)]
        part = part.sort_values("arrival_rate_rps")
        label = f"{backend} {variant}" + (f" {precision}" if several["precision"] else "")
        label += f" {request_input}" if several["request_input"] and request_input else ""
        label += f" ({MODE_NAMES.get(mode, mode)})" if several["mode"] else ""
        style = series_style(backend, variant)
        kwargs = {**style.line_kwargs(), "ls": MODE_LINESTYLE.get(mode, "-."),
                  "marker": INPUT_MARKERS.get(request_input, style.marker)}
        yield model, label, part, kwargs


def _mark_saturation(ax, part: pd.DataFrame, column: str, color: str, first: bool) -> bool:
    rate = saturation_rate(part)
    if rate is None:
        return first
    y = float(part.loc[part["arrival_rate_rps"] == rate, column].iloc[0])
    figure.reference(ax.scatter([rate], [y], s=160, facecolors="none", edgecolors=color, linewidths=2, zorder=5,
                                label="first saturated load (rule under the chart)" if first else "_saturated"))
    return False


def _saturation_notes(agg: pd.DataFrame) -> list[str]:
    notes = []
    for model, label, part, _ in _serve_series(agg):
        rate = saturation_rate(part)
        if rate is not None:
            reason = part.loc[part["arrival_rate_rps"] == rate, "saturated"].iloc[0]
            notes.append(f"{model} {label}: saturated at {rate:,.0f} req/s offered ({reason})")
    return [SATURATION_RULE, *notes] if notes else []


def _load_axis(ax, agg: pd.DataFrame) -> None:
    rates = agg["arrival_rate_rps"]
    if rates.max() >= 10 * rates.min() > 0:
        ax.set_xscale("log")
    ax.set_xlabel("offered load, requests / s (Poisson)")


def draw_serve(report, serve: pd.DataFrame) -> None:
    agg = serve_table(serve)
    report.tables["serve"] = agg
    notes = _saturation_notes(agg)
    models = sorted(agg["model"].unique())
    fig, axes = figure.panels([f"{m} · {p}" for m in models for p in ("p50", "p99")])
    first = True
    for i, model in enumerate(models):
        for ax, column in zip(axes[2 * i:2 * i + 2], ("p50", "p99")):
            for m, label, part, kwargs in _serve_series(agg):
                if m != model:
                    continue
                ax.plot(part["arrival_rate_rps"], part[column], label=label, **kwargs)
                first = _mark_saturation(ax, part, column, kwargs["color"], first)
            ax.set_yscale("log")
            _load_axis(ax, agg)
            ax.set_ylabel(f"latency from arrival, ms ({column})")
    figure.finish(report, fig, "serve_latency", "Request latency against offered load", serve, notes)

    fig, axes = figure.panels(models)
    first = True
    for ax, model in zip(axes, models):
        for m, label, part, kwargs in _serve_series(agg):
            if m == model:
                ax.plot(part["arrival_rate_rps"], part["achieved"], label=label, **kwargs)
                first = _mark_saturation(ax, part, "achieved", kwargs["color"], first)
        top = float(agg["arrival_rate_rps"].max())
        low = float(agg["arrival_rate_rps"].min())
        figure.reference(ax.plot([low, top], [low, top], label="answered = nominal offered rate", **IDEAL_STYLE))
        _load_axis(ax, agg)
        if ax.get_xscale() == "log":
            ax.set_yscale("log")
        ax.set_ylabel("answered requests / s")
    figure.finish(report, fig, "serve_throughput", "Answered against offered load", serve, notes)

