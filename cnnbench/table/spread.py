"""Noisy measurements: the spread of a run's timed windows, and of the trials of one configuration.

A busy machine (other jobs, a throttled CPU, a shared GPU) shows up as windows of very different
length. ``step_time_spread = p90 / p10 - 1`` of the per-window step times goes into every row; above
the spec's ``timing.spread_limit`` the run's summary line and the report's summary.md say that the
number is not to be trusted. The report also compares the trials of one configuration (their
images/s, max / min - 1), which catches a whole run that landed on a slow spell.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_SPREAD_LIMIT = 0.2
ADVICE = "the machine was busy; rerun or add windows"


def step_time_spread(p10_ms: float | None, p90_ms: float | None) -> float | None:
    """p90 / p10 - 1 of the per-window step times; None without timed windows."""
    if p10_ms is None or p90_ms is None or p10_ms <= 0:
        return None
    return p90_ms / p10_ms - 1.0


def noisy_note(spread: float | None, limit: float = DEFAULT_SPREAD_LIMIT) -> str | None:
    """The warning for a run whose windows spread beyond the limit, e.g. 'spread 40%: the machine ...'."""
    if spread is None or spread <= limit:
        return None
    return f"spread {spread:.0%}: {ADVICE}"


TRIAL_KEY = ("spec_hash", "mode", "variant", "backend", "strategy", "scaling", "devices", "global_batch",
             "precision", "compile", "device_type", "hosts", "arrival_rate_rps", "request_input")


def noisy_rows(frame: pd.DataFrame, limit: float = DEFAULT_SPREAD_LIMIT) -> list[str]:
    """One line per noisy measurement among ok rows: runs whose windows spread beyond ``limit``, and
    configurations whose trials differ by more than it (images/s)."""
    import pandas as pd

    lines = []
    for row in frame.itertuples(index=False):
        spread = getattr(row, "step_time_spread", None)
        if spread is None or pd.isna(spread):  # rows written before the column: from the percentiles
            p10, p90 = row.step_time_ms_p10, row.step_time_ms_p90
            spread = None if pd.isna(p10) or pd.isna(p90) else step_time_spread(float(p10), float(p90))
        note = noisy_note(spread, limit)
        if note:
            lines.append(f"{_label(row)}, trial {row.trial}: {note}")
    keys = [k for k in TRIAL_KEY if k in frame.columns]
    for _, part in frame.groupby(keys, dropna=False):
        ips = part["images_per_sec"].dropna()
        if len(ips) >= 2 and ips.min() > 0 and ips.max() / ips.min() - 1 > limit:
            values = ", ".join(f"{v:,.0f}" for v in sorted(ips))
            lines.append(f"{_label(next(part.itertuples(index=False)))}: {len(ips)} trials gave {values} img/s "
                         f"(spread {ips.max() / ips.min() - 1:.0%}): {ADVICE}")
    return lines


def _label(row) -> str:
    what = f"{row.backend}/{row.strategy} {row.model} x{row.devices} b{row.global_batch} {row.precision}"
    mode = getattr(row, "mode", None)
    if mode in ("infer", "serve", "serve-http"):
        what += f" {mode} {row.variant}"
    if mode in ("serve", "serve-http"):
        request_input = getattr(row, "request_input", None)
        what += f" {request_input}" if isinstance(request_input, str) else ""
        what += f" at {row.arrival_rate_rps:g} req/s"
    return f"{row.spec_name}: {what}"


NOISY_HEADING = "\n## Noisy measurements\n"


def noisy_markdown(lines: list[str], limit: float = DEFAULT_SPREAD_LIMIT) -> str:
    """The summary.md section: nothing when no measurement is noisy."""
    if not lines:
        return ""
    head = (f"{NOISY_HEADING}\nWindows (p90/p10 of the step time) or trials (images/s) spread by more "
            f"than {limit:.0%}; these numbers are not to be trusted:\n\n")
    return head + "".join(f"- {line}\n" for line in lines)
