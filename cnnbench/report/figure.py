"""Figures made of panels: one panel per model (and precision, scaling mode...), one legend outside.

Every chart of a report goes through ``panels`` and ``finish``: the title says what is drawn (and,
for emulated CPU devices, that the numbers prove the code path only), the legend sits to the right of
the plotted area and lists each series once, and notes (what was left out, and why) go under the
panels. Saved as PNG and SVG.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import Any

import pandas as pd

EMULATED_NOTE = "emulated CPU devices: the parallel code path, not hardware scaling"


def panels(titles: Sequence[str], ncols: int = 2, size: tuple[float, float] = (5.0, 3.6)):
    """A figure with one axes per title (row-major); returns the figure and the list of axes."""
    import matplotlib.pyplot as plt

    n = max(len(titles), 1)
    cols = min(ncols, n)
    rows = math.ceil(n / cols)
    fig, grid = plt.subplots(rows, cols, figsize=(size[0] * cols, size[1] * rows), squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[n:]:
        ax.remove()
    for ax, title in zip(axes, titles):
        ax.set_title(title)
    return fig, axes[:n]


def reference(artists):
    """Mark what ``ax.plot``/``scatter`` returned as a reference (ideal line, mark): last in the legend."""
    for artist in artists if isinstance(artists, list) else [artists]:
        artist.cnnbench_reference = True
    return artists


def title_for(base: str, frame: pd.DataFrame) -> str:
    if "device_type" in frame and (frame["device_type"] == "cpu-emulated").any():
        return f"{base}\n({EMULATED_NOTE})"
    return base


def _legend_entries(fig) -> tuple[list, list[str]]:
    handles, labels, seen = [], [], set()
    for ax in fig.axes:  # series first, then the references (ideal lines, saturation marks)
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label.startswith("_") or label in seen:
                continue
            seen.add(label)
            handles.append(handle)
            labels.append(label)
    order = sorted(range(len(labels)), key=lambda i: getattr(handles[i], "cnnbench_reference", False))
    return [handles[i] for i in order], [labels[i] for i in order]


def finish(report: Any, fig, name: str, title: str, frame: pd.DataFrame, notes: Sequence[str] = ()) -> None:
    """Title, the shared legend outside the panels, notes under them; save PNG + SVG; close."""
    import matplotlib.pyplot as plt

    from cnnbench.report.style import thousands

    for ax in fig.axes:
        thousands(ax)
    fig.suptitle(title_for(title, frame), fontsize=11)
    fig.tight_layout()
    handles, labels = _legend_entries(fig)
    if handles:
        fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    if notes:
        text = "\n".join(textwrap.fill(n, 140, subsequent_indent="    ") for n in notes)
        fig.text(0.01, 0.0, text, ha="left", va="top", fontsize=8, color="#444444")
    report.figures[name] = fig
    report.notes[name] = list(notes)
    paths = []
    for ext in ("png", "svg"):
        path = report.out_dir / f"{name}.{ext}"
        fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Date": None} if ext == "svg" else None)
        paths.append(path)
    report.files[name] = paths
    plt.close(fig)


def log2_axis(ax, values, label: str) -> None:
    """log2 x-axis labelled with the values themselves (1, 2, 4 ... not 2^k)."""
    ticks = sorted({int(v) for v in values})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel(label)
