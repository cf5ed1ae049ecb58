"""Charts and tables of `cnnbench infer` rows (mode infer and serve); called by report.build_report.

- ``infer_throughput`` / ``infer_latency``: the batch-size sweep (images/s; latency p50 with the
  p90-p99 range), one line per backend, precision and input (the sweep rows' variant);
- ``ablation``: milliseconds per batch gained (+) or lost (-) by each toggle against the baseline,
  one group of bars per backend, and ``ablation.md`` with the same numbers;
- ``serve_latency`` / ``serve_throughput``: latency p50 and p99, and achieved vs offered load, for
  dynamic batching and batch = 1.
Trials of one configuration are aggregated by their median.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

LABEL = ["backend", "precision"]


def _sweep_variants() -> tuple[str, ...]:
    """Sweep rows are named after their input; "sweep" is their name in files written before."""
    from cnnbench.spec import INFER_INPUTS

    return (*INFER_INPUTS, "sweep")


def _label(frame: pd.DataFrame) -> pd.Series:
    source = np.where(frame["variant"].isin(_sweep_variants()[:-1]), " " + frame["variant"].astype(str), "")
    return frame["backend"] + " " + frame["precision"] + np.where(frame["compile"], " +compile", "") + source


def sweep_rows(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[(frame["mode"] == "infer") & frame["variant"].isin(_sweep_variants())]


def ablation_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per backend and toggle: batch ms, and ms gained against the baseline (positive = faster)."""
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
                        "batch_ms": r.batch_ms, "gain_ms": base_ms - r.batch_ms,
                        "speedup": base_ms / r.batch_ms})
    from cnnbench.spec import INFER_TOGGLES

    order = {name: i for i, name in enumerate(("baseline", *INFER_TOGGLES, "all"))}
    table = pd.DataFrame(out)
    if table.empty:
        return table
    table["order"] = table["variant"].map(lambda v: order.get(v, 99))
    return table.sort_values(["model", "backend", "batch", "order"]).drop(columns="order").reset_index(drop=True)


def ablation_markdown(table: pd.DataFrame) -> str:
    lines = ["| model | backend | batch | variant | ms per batch | gained ms | speed-up |",
             "|---|---|---:|---|---:|---:|---:|"]
    for r in table.itertuples():
        lines.append(f"| {r.model} | {r.backend} | {r.batch} | {r.variant} | {r.batch_ms:.3f} | "
                     f"{r.gain_ms:+.3f} | {r.speedup:.2f}x |")
    return "\n".join(lines) + "\n"


def draw(frame: pd.DataFrame, report, finish) -> None:
    """Add the inference charts to ``report``; ``finish(report, fig, name, title, ylabel, frame)``."""
    import matplotlib.pyplot as plt

    frame = frame.copy()
    frame["infer_label"] = _label(frame)
    sweep = sweep_rows(frame)
    if not sweep.empty:
        agg = sweep.groupby(["infer_label", "model", "global_batch"]).agg(
            ips=("images_per_sec", "median"), p50=("latency_ms_p50", "median"),
            p90=("latency_ms_p90", "median"), p99=("latency_ms_p99", "median")).reset_index()
        report.tables["infer_sweep"] = agg
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for (label, model), part in agg.groupby(["infer_label", "model"]):
            ax.plot(part["global_batch"], part["ips"], marker="o", label=f"{label} {model}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
        finish(report, fig, "infer_throughput", "Inference throughput vs batch size, by where each batch starts",
               "images / s", sweep)
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for (label, model), part in agg.groupby(["infer_label", "model"]):
            ax.errorbar(part["global_batch"], part["p50"], yerr=[part["p50"] * 0, part["p99"] - part["p50"]],
                        marker="o", capsize=3, label=f"{label} {model}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        finish(report, fig, "infer_latency", "Batch latency, host to host (p50, bar to p99)", "latency, ms", sweep)

    table = ablation_table(frame)
    if not table.empty:
        report.tables["ablation"] = table
        from cnnbench.spec import INFER_TOGGLES

        order = {name: i for i, name in enumerate((*INFER_TOGGLES, "all"))}
        toggles = sorted((v for v in table["variant"].unique() if v != "baseline"), key=lambda v: order.get(v, 99))
        backends = list(table["backend"].unique())
        fig, ax = plt.subplots(figsize=(7, 4.5))
        width = 0.8 / max(len(backends), 1)
        for i, backend in enumerate(backends):
            part = table[table["backend"] == backend].set_index("variant")
            gains = [part["gain_ms"].get(t, np.nan) for t in toggles]
            ax.bar(np.arange(len(toggles)) + i * width, gains, width, label=backend)
        ax.set_xticks(np.arange(len(toggles)) + width * (len(backends) - 1) / 2, toggles)
        ax.axhline(0, color="grey", lw=1)
        finish(report, fig, "ablation", "Each toggle against the baseline (+: ms per batch saved)",
               "ms per batch gained vs baseline", frame[frame["mode"] == "infer"])
        (report.out_dir / "ablation.md").write_text(ablation_markdown(table))
        report.files["ablation_table"] = [report.out_dir / "ablation.md"]

    serve = frame[frame["mode"] == "serve"]
    if not serve.empty:
        agg = serve.groupby(["backend", "variant", "arrival_rate_rps"]).agg(
            achieved=("images_per_sec", "median"), p50=("latency_ms_p50", "median"),
            p99=("latency_ms_p99", "median"), mean_batch=("mean_batch", "median")).reset_index()
        report.tables["serve"] = agg
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for (backend, variant), part in agg.groupby(["backend", "variant"]):
            line = ax.plot(part["arrival_rate_rps"], part["p50"], marker="o", label=f"{backend} {variant} p50")
            ax.plot(part["arrival_rate_rps"], part["p99"], marker="x", ls="--", color=line[0].get_color(),
                    label=f"{backend} {variant} p99")
        ax.set_yscale("log")
        ax.set_xlabel("offered load, requests / s (Poisson)")
        finish(report, fig, "serve_latency", "Request latency under load: dynamic batching vs batch = 1",
               "latency from arrival, ms", serve)
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for (backend, variant), part in agg.groupby(["backend", "variant"]):
            ax.plot(part["arrival_rate_rps"], part["achieved"], marker="o", label=f"{backend} {variant}")
        top = float(agg["arrival_rate_rps"].max())
        ax.plot([0, top], [0, top], ls=":", color="grey", lw=1)
        ax.set_xlabel("offered load, requests / s (Poisson)")
        finish(report, fig, "serve_throughput", "Achieved vs offered load (dotted: all served)",
               "completed requests / s", serve)
