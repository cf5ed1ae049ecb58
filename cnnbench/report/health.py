"""Is my parallelism healthy? One table from a profiled run's trace and its CSV row.

Each check has a healthy range, a danger range, the measured value, a verdict (healthy, watch,
danger, or n/a where the trace or the row cannot say) and the fix to try first. The shares come from
:mod:`cnnbench.report.traces` over the traced window (one window of ``window_steps`` steps, process 0
only); the first step, data wait and NVML samples from the row.

- device busy: union of kernel intervals / window wall time (on CPU traces: union of the compute
  threads' op intervals), >= 85% healthy, < 60% danger;
- memcpy and ``aten::copy_`` share: union of copy intervals / window, < 5% healthy, > 15% danger;
- host-to-device bytes per image: the copies' byte args / images in the window, against one image's
  uint8 and float32 size;
- sync share: host calls that block on the device inside the steps (``cudaStreamSynchronize``,
  ``cudaEventSynchronize``, event waits; the protocol's own end-of-window sync is not counted);
- data wait (``data_wait_share`` column where the run has one), first step (< 10 s with a warm
  compile cache), loader workers' GPU memory (exactly 0), NVML utilisation.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cnnbench.errors import UserError
from cnnbench.report import traces

TOP_N = 10
HEALTH_FILE = "health.md"


@dataclass(frozen=True)
class TraceFacts:
    """What one traced window says."""

    kind: str  # torch | jax
    on_device: bool  # GPU kernels in the trace (else: a CPU run)
    window_ms: float
    busy_share: float
    memcpy_share: float | None  # device copies; None on CPU traces
    aten_copy_share: float | None  # PyTorch host copy ops; None for JAX
    sync_share: float | None
    h2d_bytes: int | None
    top_kernels: list[tuple[str, float]] = field(default_factory=list)  # (name, µs self time)
    top_layers: list[tuple[str, float]] = field(default_factory=list)

    @property
    def copy_share(self) -> float | None:
        return self.memcpy_share if self.on_device else self.aten_copy_share


def measure_trace(trace: traces.Trace) -> TraceFacts:
    window = trace.window()
    span = max(window[1] - window[0], 1e-9)
    kernels = trace.kernels()
    on_device = trace.has_device  # kernels, or copies alone (a loop of host-to-device copies)
    busy = traces.union_us(((e.start, e.end) for e in (kernels if on_device else trace.host_ops())), window) / span
    copies = trace.copies() if on_device else []
    memcpy = traces.union_us(((e.start, e.end) for e in copies), window) / span if on_device else None
    aten = (traces.union_us(((e.start, e.end) for e in trace.aten_copies()), window) / span
            if trace.kind == "torch" else None)
    sync = None
    if on_device:
        # A wait that ends after the device's last work is the end-of-window drain (the protocol's
        # own sync), not a stall inside a step.
        device_work = [e.end for e in (*kernels, *copies) if e.start < window[1]]
        last = max(device_work, default=window[0])
        inside = [(e.start, e.end) for e in trace.syncs() if e.end < last]
        sync = traces.union_us(inside, window) / span
    by_name = traces.total_times(kernels) if on_device else traces.self_times(trace.host_ops())
    layers = {k: v for k, v in traces.device_time_by_layer(trace).items() if k != "(no layer scope)"}
    return TraceFacts(
        kind=trace.kind, on_device=on_device, window_ms=span / 1000.0, busy_share=busy, memcpy_share=memcpy,
        aten_copy_share=aten, sync_share=sync, h2d_bytes=trace.h2d_bytes() if on_device else None,
        top_kernels=traces.top(by_name, TOP_N), top_layers=traces.top(layers, TOP_N),
    )


@dataclass(frozen=True)
class Check:
    metric: str
    healthy: str
    danger: str
    value: float | None
    shown: str
    verdict: str  # healthy | watch | danger | n/a
    fix: str


def _verdict(value: float | None, healthy, danger) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if healthy(value):
        return "healthy"
    return "danger" if danger(value) else "watch"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def _bytes(value: float) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} B"


def _num(row: dict | None, name: str) -> float | None:
    value = (row or {}).get(name)
    if value in (None, ""):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def images_per_trace(row: dict | None) -> int | None:
    """Images one process handled in the traced window: its batch x the window's steps (batches)."""
    batch, steps = _num(row, "per_device_batch"), _num(row, "window_steps")
    return int(batch * steps) if batch and steps else None


def image_bytes(row: dict | None) -> tuple[int, int] | None:
    """(uint8, float32) bytes of one input image of the row's model."""
    from cnnbench.model.facts import MODELS

    size = (row or {}).get("image_size")
    model = MODELS.get(str((row or {}).get("model")))
    if not size or model is None:
        return None
    height, _, width = str(size).partition("x")  # "224" or "1080x1920"
    pixels = int(float(height)) * int(float(width or height)) * model.default_channels
    return pixels, 4 * pixels


def traced_step_ms(facts: TraceFacts | None, row: dict | None) -> float | None:
    """Wall time per step inside the traced window (the tracer's own cost included)."""
    steps = _num(row, "window_steps")
    return facts.window_ms / steps if facts and steps else None


def timed_busy(facts: TraceFacts | None, row: dict | None) -> float | None:
    """Busy share of the *timed* steps: kernel time per traced step / the row's median step time.

    The tracer slows the host (PyTorch records every op, JAX every Python call), so the traced window's
    steps are longer than the timed ones and its busy share is too low for a host-bound step; kernels
    run on the device at their own speed, so their time per step carries over. At most 1."""
    traced, timed = traced_step_ms(facts, row), _num(row, "step_time_ms_median")
    if facts is None or not facts.on_device or not traced or not timed:
        return None
    return min(facts.busy_share * traced / timed, 1.0)


BUSY_FIX = ("the device waits on the host: raise the batch, compile (CUDA graphs), move input work to loader "
            "workers, remove host syncs in the step")


def checks(facts: TraceFacts | None, row: dict | None) -> list[Check]:
    """The health table's rows."""
    out: list[Check] = []
    device = "GPU" if facts is None or facts.on_device else "CPU compute threads"
    busy = facts.busy_share if facts else None
    out.append(Check(f"{device} busy (union of {'kernels' if device == 'GPU' else 'ops'} / traced window)",
                     ">= 85%", "< 60%", busy, _pct(busy), _verdict(busy, lambda v: v >= 0.85, lambda v: v < 0.60),
                     BUSY_FIX))
    if device == "GPU":
        timed = timed_busy(facts, row)
        out.append(Check("GPU busy, timed steps (kernel time per step / median step)", ">= 85%", "< 60%", timed,
                         _pct(timed), _verdict(timed, lambda v: v >= 0.85, lambda v: v < 0.60), BUSY_FIX))
    memcpy = facts.memcpy_share if facts else None
    out.append(Check("memcpy share (device copies / window)", "< 5%", "> 15%", memcpy, _pct(memcpy),
                     _verdict(memcpy, lambda v: v < 0.05, lambda v: v > 0.15),
                     "pin host batches (pin_memory) and copy with non_blocking; send uint8 and convert on the "
                     "device; keep data resident"))
    aten = facts.aten_copy_share if facts else None
    out.append(Check("aten::copy_ share (host copy ops / window)", "< 5%", "> 15%", aten, _pct(aten),
                     _verdict(aten, lambda v: v < 0.05, lambda v: v > 0.15),
                     "dtype/layout conversions in the step: convert once on the device, channels_last at "
                     "build time, no .cpu()/.numpy() per step"))
    out.append(_h2d_check(facts, row))
    sync = facts.sync_share if facts else None
    out.append(Check("sync/wait share (host blocked inside steps)", "< 5%", "> 15%", sync, _pct(sync),
                     _verdict(sync, lambda v: v < 0.05, lambda v: v > 0.15),
                     "a .item()/.cpu()/print of a device value or a blocking copy inside the step: keep "
                     "losses on the device, read them every N steps"))
    wait = _num(row, "data_wait_share")
    if wait is None and _num(row, "data_wait_ms_median") is not None and _num(row, "step_time_ms_median"):
        wait = _num(row, "data_wait_ms_median") / _num(row, "step_time_ms_median")
    out.append(Check("data wait (step waits for its batch)", "< 5%", "> 20%", wait, _pct(wait),
                     _verdict(wait, lambda v: v < 0.05, lambda v: v > 0.20),
                     "more loader workers, persistent workers, prefetch, decode on the GPU"))
    first = _num(row, "first_step_s")
    out.append(Check("first step (compile + first run)", "< 10 s", "> 60 s", first,
                     "—" if first is None else f"{first:.1f} s",
                     _verdict(first, lambda v: v < 10, lambda v: v > 60),
                     "set compile_cache_dir so a restart reuses compiled graphs (inductor FX cache, JAX "
                     "persistent cache)"))
    loader = _num(row, "loader_gpu_mb")
    out.append(Check("loader workers' GPU memory (NVML)", "0 MiB", "> 0 MiB", loader,
                     "—" if loader is None else f"{loader:.0f} MiB",
                     _verdict(loader, lambda v: v == 0, lambda v: v > 0),
                     "a worker touched CUDA (a CUDA context costs ~500 MiB each): hide the GPU in workers "
                     "([data] hide_cuda_in_workers), no CUDA tensors in the dataset"))
    util = _num(row, "nvml_gpu_util_pct")
    unsampled = "— (windows shorter than NVML's sampling period)" if _num(row, "nvml_memory_used_mb") else "—"
    out.append(Check("NVML GPU utilisation (timed windows)", ">= 85%", "< 60%", util,
                     unsampled if util is None else f"{util:.0f}%",
                     _verdict(util, lambda v: v >= 85, lambda v: v < 60),
                     "NVML counts a kernel running on any SM: low here means idle gaps (see GPU busy)"))
    return out


def _h2d_check(facts: TraceFacts | None, row: dict | None) -> Check:
    images, sizes = images_per_trace(row), image_bytes(row)
    value = None
    if facts and facts.on_device and facts.h2d_bytes is not None and images:
        value = facts.h2d_bytes / images
    healthy_text, danger_text = "<= 1 uint8 image", "> 1 float32 image"
    if sizes:
        healthy_text = f"<= {_bytes(sizes[0])} (uint8)"
        danger_text = f"> {_bytes(sizes[1])} (fp32)"
    shown = "—" if value is None else _bytes(value)
    verdict = "n/a"
    if value is not None and sizes:
        verdict = _verdict(value, lambda v: v <= sizes[0] * 1.05, lambda v: v > sizes[1] * 1.05)
    return Check("host-to-device bytes per image", healthy_text, danger_text, value, shown, verdict,
                 "copy uint8 batches and normalise on the device; copy each batch once")


def health_columns(facts: TraceFacts | None, row: dict | None) -> dict[str, Any]:
    """The CSV columns a profiled run gets."""
    if facts is None:
        return {}
    images = images_per_trace(row)
    h2d = facts.h2d_bytes / images if facts.h2d_bytes is not None and images and facts.on_device else None
    timed = timed_busy(facts, row)  # what agrees with the measured rate; the traced window's where none
    return {"device_busy_share": facts.busy_share if timed is None else timed, "copy_share": facts.copy_share,
            "h2d_bytes_per_image": h2d, "sync_share": facts.sync_share}


# -- rendering -------------------------------------------------------------------------------------

def _markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _time_table(title: str, items: list[tuple[str, float]], window_ms: float) -> str:
    if not items:
        return f"{title}: none in this trace"
    rows = [[name[:90], f"{us / 1000:.3f}", _pct(us / 1000 / window_ms if window_ms else None)] for name, us in items]
    return f"{title}\n\n" + _markdown(["name", "self ms (window)", "of window"], rows)


def render(facts: TraceFacts | None, row: dict | None, source: str) -> str:
    """The health report as Markdown: the checks, then the top kernels and layers."""
    title = f"# Health of {source}"
    if row:
        title += (f"\n\n{row.get('backend')}/{row.get('strategy')} {row.get('model')} batch "
                  f"{row.get('per_device_batch')} {row.get('precision')} on {row.get('device_name') or '?'}")
    parts = [title]
    if facts:
        line = (f"Traced window: {facts.window_ms:.1f} ms ({facts.kind} trace, "
                f"{'GPU kernels' if facts.on_device else 'CPU ops'})")
        traced, timed = traced_step_ms(facts, row), _num(row, "step_time_ms_median")
        if traced and timed:
            line += (f"; {traced:.2f} ms per traced step against {timed:.2f} ms per timed step "
                     f"(the difference is the tracer's own cost)")
        parts.append(line + ".")
    # The fix is shown where there is something to fix.
    table = [[c.metric, c.healthy, c.danger, c.shown, c.verdict, c.fix if c.verdict in ("watch", "danger") else "—"]
             for c in checks(facts, row)]
    parts.append(_markdown(["metric", "healthy", "danger", "value", "verdict", "fix to try"], table))
    if facts:
        what = "kernels" if facts.on_device else "ops"
        parts.append(_time_table(f"Top {what} by self time", facts.top_kernels, facts.window_ms))
        parts.append(_time_table("Top layers (record_function / module scopes)", facts.top_layers,
                                 facts.window_ms))
    return "\n\n".join(parts) + "\n"


# -- finding what to report on ---------------------------------------------------------------------

def resolve(target: str, run_id: str | None = None) -> tuple[dict | None, Path | None, str]:
    """(row, trace folder, label) for ``cnnbench health``: a CSV (+ run id), a run id in a CSV, or a folder."""
    from cnnbench.table import store

    path = Path(target)
    if path.is_dir() or (path.is_file() and path.name.endswith((".json", ".json.gz"))):
        return None, path, str(path)
    if path.suffix == ".csv":
        if not path.exists():
            raise UserError(f"{path}: no such results file")
        rows = store.read_rows(path)
        if run_id is None:
            profiled = [r for r in rows if r.get("profile_path")]
            if not profiled:
                raise UserError(f"{path}: no profiled row (run with --profile DIR); name a run id to see "
                                f"its row-only checks")
            row = profiled[-1]
        else:
            matches = [r for r in rows if r.get("run_id") == run_id]
            if not matches:
                raise UserError(f"{path}: no row with run_id {run_id!r}")
            row = matches[-1]
        trace = Path(row["profile_path"]) if row.get("profile_path") else None
        return row, trace, f"run {row['run_id']} in {path}"
    raise UserError(f"{target}: expected a results CSV, a trace folder or a trace file")


def report_for(row: dict | None, trace_dir: Path | None, label: str) -> tuple[TraceFacts | None, str]:
    facts = None
    if trace_dir is not None:
        if not trace_dir.exists():
            raise UserError(f"{trace_dir}: the row's trace is not there (moved or deleted?)")
        facts = measure_trace(traces.load_trace(trace_dir))
    return facts, render(facts, row, label)


def write_for_row(row: dict) -> dict[str, Any]:
    """After a ``--profile`` run: health.md next to the trace; the health columns for the row.

    A trace that cannot be read (TensorFlow writes only xplane.pb) gives no columns, never a failure."""
    folder = row.get("profile_path")
    if not folder or row.get("status") != "ok":
        return {}
    try:
        facts, text = report_for(row, Path(folder), f"run {row['run_id']}")
    except UserError:
        return {}
    except Exception as exc:  # noqa: BLE001 - the row is measured; a trace-reading bug must not lose it
        print(f"cnnbench: no health columns for {row['run_id']}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return {}
    (Path(folder) / HEALTH_FILE).write_text(text, encoding="utf-8")
    return health_columns(facts, row)
