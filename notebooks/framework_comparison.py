# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Framework comparison
#
# Accuracy against training time, throughput per backend per model, and what the first step
# (tracing, compilation, autotuning) costs once spread over an epoch. Reads any cnnbench results
# CSV (set `CNNBENCH_CSV`); its per-epoch history file is read from next to it.

# %% tags=["parameters"]
import os
from pathlib import Path

CSV = Path(os.environ.get("CNNBENCH_CSV", "results/quickstart.csv"))
OUT_JSON = os.environ.get("CNNBENCH_NOTEBOOK_OUT", "")

# %%
import json

import matplotlib.pyplot as plt

from cnnbench.report.train import aggregate, load
from cnnbench.table import store

frame = load([CSV])
agg = aggregate(frame)
history = store.read_history(CSV)

# %% [markdown]
# ## Test accuracy against training wall time

# %%
fig, ax = plt.subplots(figsize=(7, 4))
if not history.empty:
    merged = history.merge(frame[["run_id", "label", "devices"]], on="run_id")
    for (label, devices), part in merged.groupby(["label", "devices"]):
        curve = part.groupby("epoch")[["wall_s", "test_accuracy"]].median()
        ax.plot(curve["wall_s"], curve["test_accuracy"], marker=".", label=f"{label} x{devices}")
    ax.legend(fontsize=7)
ax.set_xlabel("training wall time, s")
ax.set_ylabel("test accuracy")

# %% [markdown]
# ## Throughput per backend and model

# %%
throughput = agg.pivot_table(index=["model", "devices"], columns="label", values="ips")
throughput

# %% [markdown]
# ## Compile cost amortised over an epoch
#
# `first_step_s - step time` is what the first step costs beyond an ordinary step. Spread over
# one epoch of `steps / epochs` steps it is a share of the epoch's time; for synthetic data (no
# epochs) the share is over the whole run.

# %%
per_epoch = frame["steps"] / frame["epochs"].where(frame["epochs"] > 0)
rows = frame.assign(steps_per_epoch=per_epoch.fillna(frame["steps"]))
rows = rows.assign(compile_overhead_s=rows["first_step_s"] - rows["step_time_ms_median"] / 1000)
rows = rows.assign(epoch_s=rows["steps_per_epoch"] * rows["step_time_ms_median"] / 1000)
rows = rows.assign(overhead_share=rows["compile_overhead_s"] / (rows["epoch_s"] + rows["compile_overhead_s"]))
amortised = rows.groupby(["label", "model", "devices"])[["compile_overhead_s", "epoch_s", "overhead_share"]].median()
amortised

# %%
if OUT_JSON:
    Path(OUT_JSON).write_text(json.dumps({"labels": sorted(frame["label"].unique()),
                                          "overhead_share": amortised["overhead_share"].tolist()}))
