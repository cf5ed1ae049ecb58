"""Reading profiler traces: PyTorch's Chrome trace and JAX's TensorBoard ``.trace.json.gz``.

Both are Chrome trace-event JSON (timestamps and durations in microseconds), read here with plain
``json``/``gzip`` (no TensorBoard). What differs is where the work is:

- PyTorch (``trace.json``): GPU kernels have ``cat == "kernel"``, copies ``gpu_memcpy`` (with a
  ``bytes`` arg), host calls into CUDA ``cuda_runtime``/``cuda_driver``; host ops ``cpu_op``;
  ``record_function`` scopes ``user_annotation``; the profiling session is the ``Trace`` span.
- JAX (``plugins/profile/<run>/<host>.trace.json.gz``): processes are named ``/device:GPU:N`` and
  ``/host:CPU``; on GPUs kernels run on one ``Stream #N(Compute,...)`` thread per CUDA stream
  (copies on ``Stream #N(MemcpyH2D)``), on CPUs XLA's thunks run on ``tf_XLA...`` threads; op
  events carry ``hlo_op`` (and on GPUs the framework scope in ``tf_op``). The host blocking on the
  device (``block_until_ready``, ``np.asarray``, ``float(x)``) appears only in JAX's Python tracer
  (``$api.py:N block_until_ready``): XLA waits on a host-side event, with no CUDA sync call to see.

The shares are taken over the :data:`WINDOW_SCOPE` host scope (the timed window), over every
stream's kernels together (kernels overlapping on several streams count once).

:class:`Trace` turns either into interval sets; :func:`union_us` merges overlapping intervals, the
arithmetic every share in the health table rests on.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cnnbench.errors import UserError

Interval = tuple[float, float]  # [start, end) in microseconds

# The host scope backends/profilers.py opens around the traced steps: the timed window itself.
WINDOW_SCOPE = "cnnbench.window"

# Host calls that block the launching thread until the device catches up. The protocol's own sync
# at the end of the window is one too: measure_trace leaves out any wait that ends after the device's
# last piece of work.
SYNC_CALLS = ("cudaStreamSynchronize", "cudaEventSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
              "cudaStreamWaitEvent", "cuStreamWaitEvent", "cudaDeviceSynchronize", "cuCtxSynchronize")
# JAX's Python tracer: the calls that wait for device values ("$api.py:2757 block_until_ready").
_JAX_BLOCKING_RE = re.compile(r"^\$\S+ (block_until_ready|__array__|device_get|_value|item|tolist|"
                              r"__float__|__int__|__bool__|__index__)$")
# PyTorch's device lanes hold these categories.
_TORCH_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
_BYTES_RE = re.compile(r"(?:bytes|size)[\"':= ]+(\d+)", re.IGNORECASE)
_TRANSFORM_RE = re.compile(r"^(jit|jvp|transpose|vmap|pjit|remat|checkpoint|cond|while|body|branch)\b.*")


def union_us(intervals: Iterable[Interval], window: Interval | None = None) -> float:
    """Total length of the union of ``intervals`` (clipped to ``window`` when given), in µs."""
    spans = sorted(intervals)
    if window is not None:
        lo, hi = window
        spans = [(max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi]
    total, end = 0.0, float("-inf")
    for start, stop in spans:
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


@dataclass(frozen=True)
class Event:
    name: str
    start: float
    dur: float
    pid: object
    tid: object
    cat: str = ""
    args: dict = field(default_factory=dict)

    @property
    def end(self) -> float:
        return self.start + self.dur


@dataclass
class Trace:
    """One trace's complete events ("X") with their process and thread names."""

    path: Path
    kind: str  # torch | jax
    events: list[Event]
    process_names: dict[object, str]
    thread_names: dict[tuple[object, object], str]
    session: Interval | None = None  # the profiler's own span, where the trace has one

    # -- which events are what -----------------------------------------------------------------
    def _thread(self, e: Event) -> str:
        return self.thread_names.get((e.pid, e.tid), "")

    def _on_gpu_process(self, e: Event) -> bool:
        return "/device:GPU" in self.process_names.get(e.pid, "")

    @property
    def has_device(self) -> bool:
        """GPU work in the trace: kernels, copies or memsets (a loop of copies alone is a GPU trace too)."""
        if self.kind == "torch":
            return any(e.cat in _TORCH_DEVICE_CATS for e in self.events)
        return any(self._on_gpu_process(e) for e in self.events)

    def kernels(self) -> list[Event]:
        """Device kernels (PyTorch ``kernel``; JAX: ops on a GPU's stream threads), memsets left out."""
        if self.kind == "torch":
            return [e for e in self.events if e.cat == "kernel"]
        on_gpu = [e for e in self.events if self._on_gpu_process(e) and not _is_copy(e.name)
                  and not e.name.lower().startswith("memset")]
        # XLA's GPU lines: one per CUDA stream ("Stream #N(...)") with the kernels, plus summary lines
        # ("XLA Ops", "XLA Modules") that repeat them; prefer the streams, else the op line.
        for marker in ("Stream", "XLA Ops"):
            found = [e for e in on_gpu if marker in self._thread(e)]
            if found:
                return found
        return on_gpu

    def copies(self) -> list[Event]:
        """Device memory copies (H2D, D2H, D2D)."""
        if self.kind == "torch":
            return [e for e in self.events if e.cat == "gpu_memcpy"]
        return [e for e in self.events if self._on_gpu_process(e) and _is_copy(e.name)]

    def h2d_bytes(self) -> int | None:
        """Bytes copied host-to-device, from the copies' byte args; None when no copy says."""
        total, seen = 0, False
        for e in self.copies():
            if not _is_h2d(e.name, e.args):
                continue
            found = _bytes_of(e.args)
            if found is not None:
                total, seen = total + found, True
        return total if seen else (0 if not self.copies() else None)

    def host_ops(self) -> list[Event]:
        """Work on the compute threads of a CPU run: PyTorch ``cpu_op``s; XLA's CPU ops (``hlo_op``)."""
        if self.kind == "torch":
            return [e for e in self.events if e.cat == "cpu_op"]
        return [e for e in self.events if "hlo_op" in e.args and not self._on_gpu_process(e)
                and not e.name.startswith("end: ")]

    def aten_copies(self) -> list[Event]:
        return [e for e in self.events if e.cat == "cpu_op" and e.name == "aten::copy_"]

    def syncs(self) -> list[Event]:
        """Host calls blocked on the device: CUDA sync calls; for JAX, its Python tracer's waits."""
        if self.kind == "jax":
            return [e for e in self.events if _JAX_BLOCKING_RE.match(e.name) and not self._on_gpu_process(e)]
        return [e for e in self.events if e.name in SYNC_CALLS]

    def scopes(self) -> list[Event]:
        """``record_function`` scopes named ``layer:<module path>`` (see backends/profilers.py)."""
        return [e for e in self.events if e.cat == "user_annotation" and e.name.startswith("layer:")]

    def window(self) -> Interval:
        """The traced window: the span of the :data:`WINDOW_SCOPE` host scope (the timed window, device
        synchronized at both ends), else the profiler session's span, else first to last event.

        The session is longer than the window: it also holds the tracer's start and stop (JAX's
        trace spans about twice a short window of steps), so shares over it come out too low."""
        scopes = [e for e in self.events if e.name == WINDOW_SCOPE and e.cat != "gpu_user_annotation"
                  and not self._on_gpu_process(e)]
        if scopes:
            longest = max(scopes, key=lambda e: e.dur)
            return longest.start, longest.end
        if self.session:
            return self.session
        if not self.events:
            raise UserError(f"{self.path}: the trace has no events")
        return min(e.start for e in self.events), max(e.end for e in self.events)


def _is_copy(name: str) -> bool:
    return "memcpy" in name.lower()


def _is_h2d(name: str, args: dict) -> bool:
    text = (name + " " + " ".join(str(v) for v in args.values())).lower()
    return "htod" in text or "h2d" in text or "host_to_device" in text or "host to device" in text


def _bytes_of(args: dict) -> int | None:
    for key in ("bytes", "Bytes", "num_bytes", "size_bytes", "bytes_transferred"):
        if key in args:
            try:
                return int(float(args[key]))
            except (TypeError, ValueError):
                pass
    for value in args.values():
        if isinstance(value, str):
            match = _BYTES_RE.search(value)
            if match:
                return int(match.group(1))
    return None


# -- finding and loading ---------------------------------------------------------------------------

def find_trace(path: Path) -> Path:
    """The trace file in a ``--profile`` folder (or the file itself)."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.exists():
        raise UserError(f"{path}: no such trace file or folder")
    torch_trace = path / "trace.json"
    if torch_trace.is_file():
        return torch_trace
    found = sorted(path.rglob("*.trace.json.gz")) or sorted(path.rglob("*.trace.json"))
    if not found:
        raise UserError(f"{path}: no trace.json (PyTorch) or plugins/profile/*/*.trace.json.gz (JAX) in it; "
                        f"TensorFlow writes only .xplane.pb, which needs TensorBoard to read")
    return found[-1]  # the newest session


def load_trace(path: Path) -> Trace:
    """Read a PyTorch or JAX trace (a file, or a ``--profile`` folder holding one)."""
    file = find_trace(path)
    opener = gzip.open if file.suffix == ".gz" else open
    try:
        with opener(file, "rt", encoding="utf-8") as handle:
            payload = json.load(handle)
    except (OSError, json.JSONDecodeError, EOFError, UnicodeDecodeError) as exc:
        raise UserError(f"{file}: not a readable Chrome trace ({type(exc).__name__}: {exc})") from None
    raw = payload.get("traceEvents") if isinstance(payload, dict) else payload
    if not isinstance(raw, list) or not raw:
        raise UserError(f"{file}: no trace events in it (not a Chrome trace of PyTorch or JAX)")
    return parse_events(raw, file)


def parse_events(raw: Sequence[dict], path: Path = Path("<trace>")) -> Trace:
    """A :class:`Trace` from a list of Chrome trace events."""
    processes: dict[object, str] = {}
    threads: dict[tuple[object, object], str] = {}
    events: list[Event] = []
    session = None
    torch_like = False
    for item in raw:
        if not isinstance(item, dict):
            continue
        ph, args = item.get("ph"), item.get("args") or {}
        if ph == "M":
            if item.get("name") == "process_name":
                processes[item.get("pid")] = str(args.get("name", ""))
            elif item.get("name") == "thread_name":
                threads[(item.get("pid"), item.get("tid"))] = str(args.get("name", ""))
            continue
        if ph != "X" or "ts" not in item:
            continue
        cat = str(item.get("cat", ""))
        if cat == "Trace" and str(item.get("name", "")).startswith("PyTorch Profiler"):
            session = (float(item["ts"]), float(item["ts"]) + float(item.get("dur", 0.0)))
            torch_like = True
            continue
        torch_like = torch_like or cat in ("cpu_op", "kernel", "cuda_runtime")
        events.append(Event(str(item.get("name", "")), float(item["ts"]), float(item.get("dur", 0.0)),
                            item.get("pid"), item.get("tid"), cat, args))
    return Trace(path, "torch" if torch_like else "jax", events, processes, threads, session)


# -- tables ----------------------------------------------------------------------------------------

def self_times(events: Sequence[Event]) -> dict[str, float]:
    """Per name, the time its events ran with no nested event (on the same thread) inside, µs."""
    totals: dict[str, float] = defaultdict(float)
    for e, own in self_times_events(events):
        totals[e.name] += own
    return dict(totals)


def total_times(events: Sequence[Event]) -> dict[str, float]:
    """Per name, the summed duration, µs (device kernels do not nest: their time is all their own)."""
    totals: dict[str, float] = defaultdict(float)
    for e in events:
        totals[e.name] += e.dur
    return dict(totals)


def top(totals: dict[str, float], n: int) -> list[tuple[str, float]]:
    return sorted(totals.items(), key=lambda kv: -kv[1])[:n]


def device_time_by_layer(trace: Trace) -> dict[str, float]:
    """Device (or, on CPU, host-op) time per layer, µs.

    PyTorch: each kernel is charged to the innermost ``layer:`` scope around the host call that
    launched it (matched by the ``correlation`` id); on CPU, each op to the scope it ran in. Work
    outside any scope (the backward pass, the optimizer) is ``(no layer scope)``. JAX on GPUs: the
    Flax module path in each kernel's ``tf_op`` scope.
    """
    if trace.kind == "jax":
        totals: dict[str, float] = defaultdict(float)
        for e in trace.kernels() if trace.has_device else trace.host_ops():
            totals[_flax_scope(str(e.args.get("tf_op") or e.args.get("name") or ""))] += e.dur
        return dict(totals)
    scopes = trace.scopes()
    by_thread: dict[tuple, list[Event]] = defaultdict(list)
    for s in scopes:
        by_thread[(s.pid, s.tid)].append(s)
    for items in by_thread.values():
        items.sort(key=lambda s: s.start)

    def scope_at(pid, tid, ts: float) -> str:
        inner = None
        for s in by_thread.get((pid, tid), ()):
            if s.start > ts:
                break
            if s.end >= ts and (inner is None or s.dur <= inner.dur):
                inner = s
        return inner.name[len("layer:"):] if inner else "(no layer scope)"

    totals = defaultdict(float)
    if trace.has_device:
        launches = {e.args.get("correlation"): e for e in trace.events
                    if e.cat in ("cuda_runtime", "cuda_driver") and "correlation" in e.args}
        for k in trace.kernels():
            launch = launches.get(k.args.get("correlation"))
            name = scope_at(launch.pid, launch.tid, launch.start) if launch else "(no layer scope)"
            totals[name] += k.dur
        return dict(totals)
    ops = self_times_events(trace.host_ops())
    for e, own in ops:
        totals[scope_at(e.pid, e.tid, e.start)] += own
    return dict(totals)


def self_times_events(events: Sequence[Event]) -> list[tuple[Event, float]]:
    """Each event with its self time (nested events on its thread subtracted), µs."""
    by_thread: dict[tuple, list[Event]] = defaultdict(list)
    for e in events:
        by_thread[(e.pid, e.tid)].append(e)
    out: list[tuple[Event, float]] = []
    for items in by_thread.values():
        items.sort(key=lambda e: (e.start, -e.dur))
        stack: list[list] = []
        for e in items:
            while stack and stack[-1][0].end <= e.start:
                done, child = stack.pop()
                out.append((done, max(done.dur - child, 0.0)))
            if stack:
                stack[-1][1] += min(e.end, stack[-1][0].end) - e.start
            stack.append([e, 0.0])
        out.extend((done, max(done.dur - child, 0.0)) for done, child in stack)
    return out


def _flax_scope(tf_op: str) -> str:
    """``jit(step)/jvp(ResNet)/layer1_0/Conv_0/conv_general_dilated`` -> ``ResNet/layer1_0/Conv_0``."""
    parts = [p for p in tf_op.split("/") if p]
    if len(parts) < 2:
        return "(no layer scope)"
    kept = []
    for part in parts[:-1]:  # the last part is the primitive
        if _TRANSFORM_RE.match(part):
            # jvp(ResNet) / transpose(jvp(ResNet)): the module is inside the transform's parentheses
            inner = re.sub(r"^(\w+\()+", "", part).rstrip(")")
            if not part.startswith(("jit", "pjit")) and inner and inner != part and "(" not in inner:
                kept.append(inner)
            continue
        kept.append(part)
    return "/".join(kept) or "(no layer scope)"
