"""Charts and tables of `cnnbench infer` rows (modes infer, serve, serve-http); called by build_report.

- ``infer_throughput`` / ``infer_latency``: the batch-size sweep, one panel per model; lines on log2
  axes when several batch sizes were run, bars otherwise (latency: p50, up to p99);
- ``ablation``: signed bars per toggle and framework, the change in milliseconds per batch against the
  baseline (negative = faster, the convention of the results page's table and of ``ablation.md``); toggles
  a framework skipped or failed keep their slot, marked, with the reason under the chart;
- ``serve_latency`` / ``serve_throughput``: drawn by ``report.serving``.
Trials of one configuration are aggregated by their median.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cnnbench.report import figure
from cnnbench.report.bars import Bar, draw_bars
from cnnbench.report.serving import SERVE_MODES, draw_serve
from cnnbench.report.style import framework_rank, series_style

CHARTS = ("infer_throughput", "infer_latency", "ablation", "serve_latency", "serve_throughput")
DELTA_LABEL = "change in ms per batch vs baseline (negative = faster)"


def _sweep_variants() -> tuple[str, ...]:
    """Sweep rows are named after their input; "sweep" is their name in files written before."""
    from cnnbench.options import INFER_INPUTS

    return (*INFER_INPUTS, "sweep")


def _label(frame: pd.DataFrame) -> pd.Series:
    source = np.where(frame["variant"].isin(_sweep_variants()[:-1]), " " + frame["variant"].astype(str), "")
    return frame["backend"] + " " + frame["precision"] + np.where(frame["compile"], " +compile", "") + source


def sweep_rows(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[(frame["mode"] == "infer") & frame["variant"].isin(_sweep_variants())]


def summary_markdown(frame: pd.DataFrame) -> str:
    """summary.md's inference table: per model, backend, precision and input, the sweep's best images/s
    and the batch latency there ('' without sweep rows)."""
    sweep = sweep_rows(frame)
    if sweep.empty:
        return ""
    lines = ["Inference: the batch sweep's best images/s per model, backend, precision and input, and the "
             "batch latency there.", "",
             "| model | backend | precision | input | best images/s | at batch | p50 / p99 ms |",
             "|---|---|---|---|---:|---:|---:|"]
    for (model, backend, precision, source), part in sweep.groupby(["model", "backend", "precision", "variant"]):
        best = part.loc[part["images_per_sec"].astype(float).idxmax()]
        lines.append(f"| {model} | {backend} | {precision} | {source} | {best['images_per_sec']:,.0f} "
                     f"| {best['global_batch']} | {best['latency_ms_p50']:.1f} / {best['latency_ms_p99']:.1f} |")
    return "\n".join(lines) + "\n"


def _toggle_order() -> dict[str, int]:
    from cnnbench.options import INFER_TOGGLES

    return {name: i for i, name in enumerate(("baseline", *INFER_TOGGLES, "all"))}


def ablation_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per backend and toggle: batch ms, its change against the baseline (negative = faster), speed-up."""
    rows = frame[(frame["mode"] == "infer") & ~frame["variant"].isin(_sweep_variants())]
    med = rows.groupby(["model", "backend", "variant", "global_batch"], dropna=False).agg(
        batch_ms=("step_time_ms_median", "median"), p99_ms=("latency_ms_p99", "median")).reset_index()
    out = []
    for (model, backend, batch), part in med.groupby(["model", "backend", "global_batch"]):
        base = part[part["variant"] == "baseline"]
        if base.empty:
            continue
        base_ms = float(base["batch_ms"].iloc[0])
        for r in part.itertuples():
            out.append({"model": model, "backend": backend, "batch": batch, "variant": r.variant,
                        "batch_ms": r.batch_ms, "delta_ms": r.batch_ms - base_ms,
                        "speedup": base_ms / r.batch_ms})
    order = _toggle_order()
    table = pd.DataFrame(out)
    if table.empty:
        return table
    table["order"] = table["variant"].map(lambda v: order.get(v, 99))
    return table.sort_values(["model", "backend", "batch", "order"]).drop(columns="order").reset_index(drop=True)


def ablation_gaps(not_ok: pd.DataFrame) -> pd.DataFrame:
    """Toggles a backend skipped or failed: model, backend, variant, status, reason (one row each)."""
    if not_ok.empty:
        return pd.DataFrame(columns=["model", "backend", "variant", "status", "error"])
    rows = not_ok[(not_ok["mode"] == "infer") & ~not_ok["variant"].isin([*_sweep_variants(), None])]
    return rows[["model", "backend", "variant", "status", "error"]].drop_duplicates(["model", "backend", "variant"])


def ablation_markdown(table: pd.DataFrame, gaps: pd.DataFrame | None = None) -> str:
    lines = ["Change against the baseline in ms per batch: negative = faster (speed-up = baseline ms / ms).", "",
             "| model | backend | batch | variant | ms per batch | change ms | speed-up |",
             "|---|---|---:|---|---:|---:|---:|"]
    for r in table.itertuples():
        lines.append(f"| {r.model} | {r.backend} | {r.batch} | {r.variant} | {r.batch_ms:.3f} | "
                     f"{r.delta_ms:+.3f} | {r.speedup:.2f}x |")
    if gaps is not None and not gaps.empty:
        lines += ["", "Not measured:", ""]
        lines += [f"- {g.backend} {g.variant} ({g.model}): {g.status}: {g.error}" for g in gaps.itertuples()]
    return "\n".join(lines) + "\n"


def draw(frame: pd.DataFrame, report, not_ok: pd.DataFrame | None = None) -> None:
    """Add the inference charts (and ablation.md) to ``report``; ``not_ok``: skipped/failed rows."""
    frame = frame.copy()
    frame["infer_label"] = _label(frame)
    sweep = sweep_rows(frame)
    if not sweep.empty:
        _draw_sweep(report, sweep)
    table = ablation_table(frame)
    if not table.empty:
        gaps = ablation_gaps(not_ok if not_ok is not None else frame.iloc[0:0])
        report.tables["ablation"] = table
        _draw_ablation(report, table, gaps, frame[frame["mode"] == "infer"])
        (report.out_dir / "ablation.md").write_text(ablation_markdown(table, gaps))
        report.files["ablation_table"] = [report.out_dir / "ablation.md"]
    serve = frame[frame["mode"].isin(SERVE_MODES)]
    if not serve.empty:
        draw_serve(report, serve)


# where each sweep batch starts, as the chart titles say it; "sweep" rows (older files) started as a
# normalised float32 batch in host memory
INPUT_PHRASES = {"resident": "input resident on the device",
                 "uint8_pinned": "uint8 input copied from pinned host memory",
                 "float32_pinned": "float32 input copied from pinned host memory",
                 "float32_pageable": "float32 input copied from pageable host memory",
                 "sweep": "float32 input copied from host memory"}


def _sweep_series(agg: pd.DataFrame, by_input: bool):
    """(label, rows, style) per series; with several inputs in the sweep the input picks shade and marker."""
    keys = sorted(agg.groupby(["infer_label", "backend", "precision", "compile", "variant"]).groups,
                  key=lambda k: (framework_rank(k[1]), k[0]))
    for label, backend, precision, compiled, variant in keys:
        part = agg[agg["infer_label"] == label].sort_values("global_batch")
        yield label, part, series_style(backend, variant if by_input else precision, bool(compiled))


def sweep_title(name: str, inputs: set[str], several_batches: bool) -> str:
    """A title true for every series drawn: where the batches started, what the bars/lines show."""
    if inputs == {"resident"}:
        where = INPUT_PHRASES["resident"]
    elif "resident" in inputs:
        where = "input resident on the device or copied from the host each batch, as each series names"
    elif len(inputs) == 1:
        where = INPUT_PHRASES.get(next(iter(inputs)), "host input copied each batch") + " each batch"
    else:
        where = "host input copied each batch, from the memory each series names"
    if name == "infer_latency":
        spread = "p50, shaded up to p99" if several_batches else "p50 bars, whiskers up to p99"
        return f"Batch latency to logits on the host, {where}: {spread}"
    spread = "" if several_batches else " (error bars: p10-p90 of the timing windows)"
    return f"Inference throughput, {where}{spread}"


def _draw_sweep(report, sweep: pd.DataFrame) -> None:
    agg = sweep.groupby(["infer_label", "backend", "precision", "compile", "variant", "model", "global_batch"]).agg(
        ips=("images_per_sec", "median"), step_p10=("step_time_ms_p10", "median"),
        step_p90=("step_time_ms_p90", "median"), p50=("latency_ms_p50", "median"),
        p90=("latency_ms_p90", "median"), p99=("latency_ms_p99", "median")).reset_index()
    agg["ips_lo"] = agg["global_batch"] * 1000.0 / agg["step_p90"]
    agg["ips_hi"] = agg["global_batch"] * 1000.0 / agg["step_p10"]
    report.tables["infer_sweep"] = agg
    models = sorted(agg["model"].unique())
    several = agg.groupby("model")["global_batch"].nunique().max() > 1
    inputs = set(agg["variant"])
    for name in ("infer_throughput", "infer_latency"):
        fig, axes = figure.panels(models)
        for ax, model in zip(axes, models):
            part = agg[agg["model"] == model]
            if part["global_batch"].nunique() > 1:
                _sweep_lines(ax, part, name, len(inputs) > 1)
            else:
                _sweep_bars(ax, part, name, len(inputs) > 1)
        figure.finish(report, fig, name, sweep_title(name, inputs, several), sweep)


def _sweep_lines(ax, part: pd.DataFrame, name: str, by_input: bool) -> None:
    for label, series, style in _sweep_series(part, by_input):
        x = series["global_batch"].to_numpy(dtype=float)
        if name == "infer_throughput":
            ax.plot(x, series["ips"], label=label, **style.line_kwargs())
        else:
            ax.plot(x, series["p50"], label=f"{label} p50", **style.line_kwargs())
            ax.fill_between(x, series["p50"], series["p99"], color=style.color, alpha=0.15,
                            label=f"{label} p50-p99")
    ax.set_yscale("log")
    figure.log2_axis(ax, part["global_batch"], "batch size")
    ax.set_ylabel("images / s" if name == "infer_throughput" else "latency, ms")


def _sweep_bars(ax, part: pd.DataFrame, name: str, by_input: bool) -> None:
    bars = []
    for label, series, style in _sweep_series(part, by_input):
        row = series.iloc[0]
        if name == "infer_throughput":
            bars.append(Bar(row["backend"], label, float(row["ips"]), style, row["ips_lo"], row["ips_hi"], tick=label))
        else:
            bars.append(Bar(row["backend"], label, float(row["p50"]), style, row["p50"], row["p99"], tick=label,
                            text=f"{row['p50']:.1f} / {row['p99']:.1f}"))
    draw_bars(ax, bars, lambda v: f"{v:,.0f}")
    ax.set_xlabel(f"batch {int(part['global_batch'].iloc[0])}")
    ax.set_ylabel("images / s" if name == "infer_throughput" else "latency, ms (p50 / p99 printed)")


def _draw_ablation(report, table: pd.DataFrame, gaps: pd.DataFrame, frame: pd.DataFrame) -> None:
    order = _toggle_order()
    panels = list(table.groupby(["model", "batch"]).groups)
    fig, axes = figure.panels([f"{model} · batch {batch}" for model, batch in panels], ncols=1, size=(9.0, 4.2))
    notes = []
    for ax, (model, batch) in zip(axes, panels):
        part = table[(table["model"] == model) & (table["batch"] == batch)]
        missing = gaps[gaps["model"] == model]
        backends = sorted(part["backend"].unique(), key=framework_rank)
        toggles = sorted({*part["variant"], *missing["variant"]} - {"baseline"}, key=lambda v: order.get(v, 99))
        bars = []
        for toggle in toggles:
            for backend in backends:
                style = series_style(backend)
                got = part[(part["backend"] == backend) & (part["variant"] == toggle)]
                gap = missing[(missing["backend"] == backend) & (missing["variant"] == toggle)]
                if not got.empty:
                    r = got.iloc[0]
                    bars.append(Bar(toggle, backend, float(r["delta_ms"]), style,
                                    text=f"{r['delta_ms']:+.2f}\n{r['speedup']:.2f}x"))
                else:
                    mark = gap["status"].iloc[0] if not gap.empty else "not run"
                    bars.append(Bar(toggle, backend, float("nan"), style, mark=mark))
                    reason = f": {gap['error'].iloc[0]}" if not gap.empty and pd.notna(gap["error"].iloc[0]) else ""
                    note = f"{backend} {toggle}: {mark}{reason}"
                    if note not in notes:
                        notes.append(note)
        draw_bars(ax, bars, lambda v: f"{v:+.2f}", rotate=False)
        ax.axhline(0, color="#333333", lw=0.8)
        ax.set_ylabel("Δ ms per batch vs baseline\n(negative = faster)")
        baselines = part[part["variant"] == "baseline"].set_index("backend")["batch_ms"]
        base = ", ".join(f"{b} {baselines[b]:.2f} ms" for b in backends if b in baselines)
        ax.set_xlabel(f"toggle (baseline: {base}); printed: change in ms, speed-up")
    if notes:
        notes.insert(0, "Not measured (empty slots):")
    figure.finish(report, fig, "ablation", "Inference ablation: each toggle alone, and all together, against the "
                  "baseline", frame, notes)
