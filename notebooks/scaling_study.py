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
# # Scaling study
#
# Weak scaling (per-device batch fixed) against strong scaling (global batch fixed), per-device
# throughput, and an Amdahl fit per backend. Reads any cnnbench results CSV through the project's
# own loader; set `CNNBENCH_CSV` (or edit the parameter cell) to study another file.
#
# Rows from emulated CPU devices show the parallel code path, not hardware scaling: their "serial
# fraction" mostly measures the two cores being shared.

# %% tags=["parameters"]
import os
from pathlib import Path

CSV = Path(os.environ.get("CNNBENCH_CSV", "results/digits_scaling.csv"))
OUT_JSON = os.environ.get("CNNBENCH_NOTEBOOK_OUT", "")

# %%
import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from cnnbench.report.train import aggregate, load

frame = load([CSV])
agg = aggregate(frame)
agg[["label", "scaling", "devices", "per_device_batch", "global_batch", "ips", "step_ms", "trials"]]

# %% [markdown]
# ## Efficiency, computed here from the aggregated rows
#
# Weak scaling: `ips(N) / (N * ips(1))` at the same per-device batch. Strong scaling:
# `t(1) / (N * t(N))` at the same global batch. The baseline is the 1-device run of the same
# backend, strategy, precision and spec.

# %%
def efficiency_table(agg: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (label, scaling, precision, _spec), part in agg.groupby(["label", "scaling", "precision", "spec_hash"]):
        batch_key = "per_device_batch" if scaling == "weak" else "global_batch"
        for batch, series in part.groupby(batch_key):
            base = series[series["devices"] == 1]
            if base.empty:
                continue
            for row in series.itertuples():
                if scaling == "weak":
                    value = row.ips / (row.devices * base["ips"].iloc[0])
                else:
                    value = base["step_ms"].iloc[0] / (row.devices * row.step_ms)
                rows.append({"label": label, "scaling": scaling, "precision": precision, "batch": batch,
                             "devices": row.devices, "efficiency": value,
                             "ips_per_device": row.ips / row.devices})
    return pd.DataFrame(rows)


eff = efficiency_table(agg)
eff

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for (label, scaling), part in eff.groupby(["label", "scaling"]):
    axes[0].plot(part["devices"], part["efficiency"], marker="o", label=f"{label} ({scaling})")
    axes[1].plot(part["devices"], part["ips_per_device"], marker="o", label=f"{label} ({scaling})")
axes[0].set_ylabel("scaling efficiency")
axes[1].set_ylabel("images / s per device")
for ax in axes:
    ax.set_xscale("log", base=2)
    ax.set_xlabel("devices")
axes[0].legend(fontsize=7)
plt.tight_layout()

# %% [markdown]
# ## Amdahl fit
#
# Speedup `S(N) = N * efficiency(N)`. Amdahl's law `S(N) = 1 / (s + (1 - s) / N)` gives
# `1/S - 1/N = s (1 - 1/N)`: the serial fraction `s` is a least-squares slope through the origin.
# Assumptions: the serial part does not grow with N (no all-reduce cost that grows with N), the
# per-device work is fixed as measured, and the devices are homogeneous. Projections beyond the
# measured device counts inherit all three.

# %%
def amdahl_fraction(devices: np.ndarray, efficiency: np.ndarray) -> float:
    speedup = devices * efficiency
    x = 1 - 1 / devices
    y = 1 / speedup - 1 / devices
    return float(np.clip((x * y).sum() / max((x * x).sum(), 1e-12), 0.0, 1.0))


fits = []
for (label, scaling), part in eff.groupby(["label", "scaling"]):
    if part["devices"].nunique() < 2:
        continue
    s = amdahl_fraction(part["devices"].to_numpy(float), part["efficiency"].to_numpy(float))
    fits.append({"label": label, "scaling": scaling, "serial_fraction": s,
                 **{f"efficiency_at_{n}": 1 / (n * s + (1 - s)) for n in (16, 32, 64)}})
fits = pd.DataFrame(fits)
fits

# %%
if OUT_JSON:
    Path(OUT_JSON).write_text(json.dumps({"efficiency": eff.to_dict("records"), "amdahl": fits.to_dict("records")}))
