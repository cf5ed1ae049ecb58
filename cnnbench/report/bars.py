"""Grouped bars with error bars and the value printed on every bar.

Used where a chart has one point per series (one device count, one batch size): a line through one
x value is a column of dots, a bar with its spread and its number answers "who wins, by how much".
Bars of one group stand together (one framework's strategies, or every framework at one toggle); a
bar with no value but a ``mark`` (``skipped``, ``failed``) keeps its slot and says why it is empty.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cnnbench.report.style import SeriesStyle

GROUP_GAP = 0.6  # in bar widths
TICK_WIDTH = 24  # characters per line of a bar's label


@dataclass(frozen=True)
class Bar:
    group: str
    label: str  # legend entry (one per distinct label)
    value: float
    style: SeriesStyle
    lo: float | None = None  # absolute ends of the error bar
    hi: float | None = None
    tick: str | None = None  # text under the bar; None: the group's name under the group
    mark: str | None = None  # drawn instead of a value: why the bar is missing
    text: str | None = None  # printed value; default fmt(value)


def _positions(bars: Sequence[Bar]) -> tuple[list[float], dict[str, list[float]]]:
    xs, groups, x, last = [], {}, 0.0, None
    for bar in bars:
        if last is not None and bar.group != last:
            x += GROUP_GAP
        xs.append(x)
        groups.setdefault(bar.group, []).append(x)
        last = bar.group
        x += 1.0
    return xs, groups


def draw_bars(ax, bars: Sequence[Bar], fmt: Callable[[float], str], rotate: bool | None = None) -> None:
    """Draw ``bars`` on ``ax``; values (or marks) printed past the end of each bar's error bar.

    ``rotate``: print the values vertically (default: when there are more than 6 bars).
    """
    xs, groups = _positions(bars)
    many = len(bars) > 6 if rotate is None else rotate
    seen: set[str] = set()
    span = max((abs(v) for b in bars for v in (b.value, b.lo, b.hi) if v is not None and not math.isnan(v)),
               default=1.0) or 1.0
    for x, bar in zip(xs, bars):
        label = bar.label if bar.label not in seen else f"_{bar.label}"
        seen.add(bar.label)
        if bar.mark is not None or bar.value is None or math.isnan(bar.value):
            ax.bar([x], [0.0], 0.8, label=label, **bar.style.bar_kwargs())
            ax.annotate(bar.mark or "no data", (x, 0), xytext=(0, 3), textcoords="offset points",
                        ha="center", va="bottom", rotation=90, fontsize=7, color="#555555", style="italic")
            continue
        yerr = None
        if bar.lo is not None and bar.hi is not None and not (math.isnan(bar.lo) or math.isnan(bar.hi)):
            yerr = [[max(bar.value - bar.lo, 0.0)], [max(bar.hi - bar.value, 0.0)]]
        ax.bar([x], [bar.value], 0.8, yerr=yerr, capsize=3, error_kw={"lw": 1, "ecolor": "#333333"},
               label=label, **bar.style.bar_kwargs())
        end = bar.value
        if yerr is not None:
            end = bar.hi if bar.value >= 0 else bar.lo
        below = bar.value < 0
        ax.annotate(bar.text or fmt(bar.value), (x, end), xytext=(0, -3 if below else 3),
                    textcoords="offset points", ha="center", va="top" if below else "bottom",
                    rotation=90 if many else 0, fontsize=7)
    if any(b.tick for b in bars):
        # long names on two lines rather than squashed axes
        ticks = [textwrap.fill(b.tick or "", TICK_WIDTH, break_long_words=False) for b in bars]
        ax.set_xticks(xs, ticks, rotation=30 if len(bars) > 3 else 0, ha="right" if len(bars) > 3 else "center",
                      rotation_mode="anchor")
    else:
        centres = [sum(v) / len(v) for v in groups.values()]
        ax.set_xticks(centres, list(groups), rotation=20 if len(groups) > 4 else 0,
                      ha="right" if len(groups) > 4 else "center")
    ax.grid(False, axis="x")
    # room for the printed values above (and below) the bars
    low, high = ax.get_ylim()
    lines = max(((b.text or "").count("\n") + 1 for b in bars), default=1)
    pad = 0.3 if many else 0.1 * lines + 0.05
    ax.set_ylim(low - pad * span if low < 0 else low, high + pad * span)
