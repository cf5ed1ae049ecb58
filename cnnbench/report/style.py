"""The one place that says how a series looks: each framework one colour family, in every chart.

PyTorch is red, JAX blue, TensorFlow amber, Keras purple (anything else grey). Inside a family the
strategy (or, for inference, the precision or serving variant) picks the shade and the marker, so
``jax/sharded`` is the same dark blue circle in the throughput, step-time and memory charts of every
results set. Compiled variants are drawn hatched (bars) or dashed (lines) in their strategy's shade,
and nothing else is dashed: other distinctions (a second batch size or spec, the HTTP front-end, the
request's encoding) fade the line, change its marker or use dash-dots, each with its legend entry.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

# darkest first: the first strategy a framework lists gets the strongest shade
FAMILIES: dict[str, tuple[str, ...]] = {
    "torch": ("#b2182b", "#ef6548", "#7f0000", "#fc9272", "#d7301f"),
    "jax": ("#08519c", "#4292c6", "#08306b", "#6baed6", "#2171b5"),
    "tensorflow": ("#d95f02", "#fdae6b", "#a63603", "#f16913", "#fd8d3c"),
    "keras": ("#6a3d9a", "#9e9ac8", "#3f007d", "#807dba", "#54278f"),
}
OTHER = ("#525252", "#969696", "#252525", "#737373", "#bdbdbd")
FRAMEWORK_NAMES = {"torch": "PyTorch", "jax": "JAX", "tensorflow": "TensorFlow", "keras": "Keras"}
MARKERS = ("o", "s", "^", "D", "v", "P")

# the order in which shades are handed out; names not listed get a stable shade from their hash
SHADE_ORDER: dict[str, tuple[str, ...]] = {
    "torch": ("ddp", "pipeline", "fsdp", "infer"),
    "jax": ("sharded", "pmap", "tensor", "pipeline", "data+tensor", "infer"),
    "tensorflow": ("mirrored", "fit", "infer"),
    "keras": ("keras-jax", "keras-torch", "keras-tensorflow"),
}
# inference series are told apart by precision (or, in a sweep of several, by where their input
# starts), serving series by batching variant
SUB_ORDER = ("bf16", "fp32", "fp16", "dynamic", "batch1", "none")
INPUT_ORDER = ("uint8_pinned", "resident", "float32_pageable", "float32_pinned")

# one per device count where the x-axis is not devices (the accuracy curves); never a line style,
# which says "compiled"
DEVICE_MARKERS = (".", "x", "+", "1")
# the same configuration at another batch size or from another spec: the line fades (k = 1, 2, ...)
REPEAT_ALPHAS = (1.0, 0.55, 0.35, 0.2)
IDEAL_STYLE = {"color": "#777777", "ls": ":", "lw": 1.2}


@dataclass(frozen=True)
class SeriesStyle:
    color: str
    marker: str
    compiled: bool

    @property
    def linestyle(self) -> str:
        return "--" if self.compiled else "-"

    @property
    def hatch(self) -> str | None:
        return "///" if self.compiled else None

    def line_kwargs(self) -> dict:
        return {"color": self.color, "marker": self.marker, "ls": self.linestyle, "ms": 5,
                "mfc": "white" if self.compiled else self.color}

    def bar_kwargs(self) -> dict:
        return {"color": self.color, "hatch": self.hatch, "edgecolor": "white" if self.compiled else self.color}


def _order(backend: str, shade_key: str) -> tuple[str, ...]:
    for order in (SUB_ORDER, INPUT_ORDER):
        if shade_key in order:
            return order
    return SHADE_ORDER.get(backend, ())


def _index(name: str, order: tuple[str, ...]) -> int:
    if name in order:
        return order.index(name)
    return len(order) + zlib.crc32(name.encode()) % 5  # stable across processes, unlike hash()


def series_style(backend: str, shade_key: str = "", compiled: bool = False) -> SeriesStyle:
    """Colour from the framework, shade and marker from ``shade_key`` (strategy, precision, variant)."""
    family = FAMILIES.get(backend, OTHER)
    order = _order(backend, shade_key)
    i = _index(shade_key, order) if shade_key else 0
    return SeriesStyle(color=family[i % len(family)], marker=MARKERS[i % len(MARKERS)], compiled=bool(compiled))


def framework_rank(backend: str) -> int:
    """Frameworks in one fixed order on every axis: PyTorch, JAX, TensorFlow, Keras, others."""
    names = list(FAMILIES)
    return names.index(backend) if backend in names else len(names)


def series_rank(backend: str, shade_key: str = "", compiled: bool = False) -> tuple[int, int, bool]:
    """Sort key of a series: framework, then its strategies in SHADE_ORDER, eager before compiled."""
    order = _order(backend, shade_key)
    return framework_rank(backend), _index(shade_key, order) if shade_key else 0, bool(compiled)


def _number(v: float, _pos=None) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:g}"


def thousands(ax) -> None:
    """Tick labels as plain numbers (87,000; on log axes 1,000 2,000 5,000) instead of 87000 or 10^4."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

    for axis, scale, (low, high) in ((ax.yaxis, ax.get_yscale(), ax.get_ylim()),
                                     (ax.xaxis, ax.get_xscale(), ax.get_xlim())):
        if axis is ax.xaxis and (scale != "log" or isinstance(axis.get_major_locator(), FixedLocator)):
            continue  # categorical bars and log2 axes already carry their own tick labels
        if scale == "log":
            narrow = low > 0 and high / low < 100  # under two decades: more labelled ticks per decade
            axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0, 7.0) if narrow else (1.0, 2.0, 5.0)))
            axis.set_minor_formatter(NullFormatter())
        axis.set_major_formatter(FuncFormatter(_number))


def apply_defaults() -> None:
    """Fonts and grid shared by every chart (called once per report)."""
    import matplotlib

    matplotlib.rcParams.update({
        "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 8,
        "axes.grid": True, "grid.alpha": 0.3, "axes.axisbelow": True,
        "axes.spines.top": False, "axes.spines.right": False,
        "svg.hashsalt": "cnnbench",  # reproducible ids inside the SVGs: regenerated charts diff cleanly
        "svg.fonttype": "path",  # glyphs as paths: the SVG needs no font, the HTML page no asset
    })

# serving modes in one chart: in-process batcher solid, through the HTTP front-end dash-dotted (dashed
# is kept for "compiled")
MODE_LINESTYLE = {"serve": "-", "serve-http": "-."}
# what an HTTP request carried: raw tensors keep the series' marker, encoded images get their own
INPUT_MARKERS = {"jpeg": "X", "png": "*"}
MODE_NAMES = {"serve": "in-process", "serve-http": "HTTP"}
