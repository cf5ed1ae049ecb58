"""The health table's metrics against loops whose answer is known, on one GPU, for PyTorch or JAX.

    python3 benchmarks/health_known.py torch [--traces DIR] [--lanes]
    python3 benchmarks/health_known.py jax   [--traces DIR] [--lanes]
    python3 benchmarks/health_known.py summary KNOWN.jsonl      (a table of the lines above)

One JSON line per check (``{"probe": "known", "framework", "case", "metric", "value", "expected",
"ok"}``), then a last line with every check's verdict. Each traced loop runs under the same
profiler context as ``cnnbench run --profile`` (backends/profilers.py) and is read by the same code
as ``cnnbench health`` (cnnbench/report/health.py):

- ``matmul``: chained 8192x8192 bf16 matrix products back to back: GPU busy >= 95%; untraced for
  about 3 s, NVML utilisation >= 90%, and NVML's energy counter over that window within 5% of the
  power readings x time;
- ``sleep``: 24 products (about 35 ms), a device sync and a host sleep as long in every step: busy
  within 3 points of 1 - (time slept, as the host measured it) / window (an upper bound: the host's
  own work between the sync and the next launch idles the GPU too, about 0.4 ms a step, which
  long steps keep under a point);
- ``h2d``: float32 batches in pageable host memory copied to the device: H2D bytes per image exactly
  3 x 224 x 224 x 4 and no kernels. A pageable copy holds its stream while the host stages the bytes
  into the driver's pinned buffers, and no DMA runs during the first chunk's staging: CUDA events
  around each copy time the stream (97% of the window on an H100), the trace's copy records the DMA
  (90%). So PyTorch's memcpy share must lie between 0.8 of the events' share and that share (+1
  point); JAX stages pageable arrays on its own host threads (``H2D Dispatch``) and copies from
  pinned bounce buffers, so there the share is only checked to be above zero;
- ``h2d_pinned`` (PyTorch): batches of 256 from pinned memory, ``non_blocking``: the events bracket the
  DMA and the copy's start after the first event, so the memcpy share is within 3 points of the events'
  device time / window (with batches of 64, 0.77 ms copies on the H200, that gap made 1.3 and 3.7 points
  in two runs; a copy four times as long makes it under one);
- ``sync``: products, a blocking wait for them (PyTorch ``cudaStreamSynchronize``; JAX
  ``block_until_ready``), one more product: sync share within 3 points of the time the host measured
  inside that wait / window.

``--lanes`` adds, per case, the trace's lanes (process / thread names) with their event counts and
busy time: what tells which lane holds the kernels in a new framework version.
Run from the repository root; needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cnnbench import envinfo, gpu_monitor  # noqa: E402
from cnnbench.report import health, traces  # noqa: E402

SIZE = 8192  # one product: 2 * 8192^3 = 1.1 TFLOP, ~1.5 ms on an H200
IMAGE = (3, 224, 224)
checks: list[dict] = []
stamp: dict = {}  # commit, time and card on every line: the tables say which run they show


def _stamp(device_name: str) -> None:
    stamp.update(git_sha=envinfo.git_sha(), timestamp_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 device_name=device_name)


def emit(**fields) -> None:
    print(json.dumps({"probe": "known", **fields, **stamp}), flush=True)


def check(framework: str, case: str, metric: str, value, expected: str, ok: bool, **extra) -> None:
    checks.append({"framework": framework, "case": case, "metric": metric, "ok": bool(ok)})
    emit(framework=framework, case=case, metric=metric, value=value, expected=expected, ok=bool(ok), **extra)


class TorchLoop:
    name = "torch"

    def __init__(self) -> None:
        import torch

        self.torch = torch
        gen = torch.Generator(device="cuda").manual_seed(0)
        self.a = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16, generator=gen)
        self.b = torch.randn(SIZE, SIZE, device="cuda", dtype=torch.bfloat16, generator=gen) / SIZE**0.5
        self.kept = None

    def matmuls(self, count: int) -> None:
        c = self.a
        for _ in range(count):
            c = c @ self.b  # chained: no product can be skipped or merged
        self.kept = c

    def sync(self) -> None:
        self.torch.cuda.synchronize()

    def device_name(self) -> str:
        return self.torch.cuda.get_device_name()

    def wait(self) -> None:
        self.torch.cuda.current_stream().synchronize()  # cudaStreamSynchronize

    def h2d(self, host) -> None:
        """HOST: a numpy array (pageable source) or a pinned tensor (copied without blocking the host)."""
        source = self.torch.from_numpy(host) if not isinstance(host, self.torch.Tensor) else host
        self.kept = source.to("cuda", non_blocking=source.is_pinned())

    def bracketed_h2d(self, host) -> tuple:
        """One copy between two CUDA events on its stream (read them after the window: no sync here)."""
        begin, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
        begin.record()
        self.h2d(host)
        end.record()
        return begin, end

    def profiler(self, directory: Path):
        from backends import profilers

        return profilers.torch_trace(directory, gpu=True)


class JaxLoop:
    name = "jax"

    def __init__(self) -> None:
        import jax
        import jax.numpy as jnp

        self.jax = jax
        ka, kb = jax.random.split(jax.random.PRNGKey(0))
        self.a = jax.random.normal(ka, (SIZE, SIZE), jnp.bfloat16)
        self.b = jax.random.normal(kb, (SIZE, SIZE), jnp.bfloat16) / SIZE**0.5
        self._chains = {}
        self.kept = self.a

    def matmuls(self, count: int) -> None:
        if count not in self._chains:
            def chain(a, b):
                for _ in range(count):
                    a = a @ b
                return a
            self._chains[count] = self.jax.jit(chain)
        self.kept = self._chains[count](self.a, self.b)

    def sync(self) -> None:
        self.jax.block_until_ready(self.kept)

    wait = sync  # JAX's one way to block on device work

    def device_name(self) -> str:
        return str(getattr(self.jax.devices()[0], "device_kind", self.jax.devices()[0]))

    def h2d(self, host) -> None:
        self.kept = self.jax.device_put(host)

    def profiler(self, directory: Path):
        from backends import profilers

        return profilers.jax_trace(directory)


def traced(loop, directory: Path, steps: int, step) -> tuple[health.TraceFacts, traces.Trace, float]:
    """Trace ``steps`` calls of ``step`` as the protocol traces a window: (facts, trace, window s)."""
    for _ in range(2):  # compile and warm up outside the trace
        step()
    loop.sync()
    with loop.profiler(directory):
        begun = time.perf_counter()
        for _ in range(steps):
            step()
        loop.sync()
        window_s = time.perf_counter() - begun
    trace = traces.load_trace(directory)
    return health.measure_trace(trace), trace, window_s


def lanes(trace: traces.Trace) -> list[dict]:
    """Each (process, thread) lane: events, union busy ms, the first names and categories."""
    by_lane: dict[tuple, list[traces.Event]] = defaultdict(list)
    for e in trace.events:
        lane = (trace.process_names.get(e.pid, str(e.pid)), trace.thread_names.get((e.pid, e.tid), str(e.tid)))
        by_lane[lane].append(e)
    window = trace.window()
    out = []
    for (process, thread), events in sorted(by_lane.items(), key=lambda kv: -len(kv[1]))[:40]:
        out.append({"process": process, "thread": thread, "events": len(events),
                    "busy_ms": traces.union_us(((e.start, e.end) for e in events), window) / 1000,
                    "cats": sorted({e.cat for e in events})[:5],
                    "names": sorted({e.name[:60] for e in events})[:8]})
    return out


def matmul_case(loop, folder: Path, show_lanes: bool) -> None:
    facts, trace, window_s = traced(loop, folder / "matmul", 30, lambda: loop.matmuls(4))
    check(loop.name, "matmul", "gpu_busy", facts.busy_share, ">= 0.95", facts.busy_share >= 0.95,
          trace_window_ms=facts.window_ms, host_window_ms=1000 * window_s,
          lanes=lanes(trace) if show_lanes else None)
    monitor = gpu_monitor.start(0, interval_s=0.05)
    if monitor is None:
        check(loop.name, "matmul", "nvml_util_pct", None, ">= 90", False, reason="no NVML")
        return
    meter = gpu_monitor.EnergyMeter(monitor)
    try:
        _run_for(loop, 1.5)  # power settles (NVML's power reading averages over about a second)
        begun = time.perf_counter()
        meter.window_start()
        _run_for(loop, 3.0)
        meter.window_end()
        span = (begun, time.perf_counter())
        changes = _energy_updates(monitor, loop)
    finally:
        monitor.stop()
    util = monitor.utilisation([span])
    check(loop.name, "matmul", "nvml_util_pct", util, ">= 90", util is not None and util >= 90,
          driver_samples=len(monitor.util_samples), readings=len(monitor.samples),
          driver_period_ms=_median([1000 * (s.end - s.start) for s in monitor.util_samples]))
    powers = [s.power_w for s in monitor.samples if span[0] <= s.t <= span[1] and s.power_w is not None]
    joules = meter.window_j[0]
    by_samples = sum(powers) / len(powers) * (span[1] - span[0]) if powers else None
    ok = joules is not None and by_samples is not None and abs(joules / by_samples - 1) <= 0.05
    check(loop.name, "matmul", "energy_j_vs_power_x_time", joules, f"within 5% of {by_samples}", ok,
          seconds=span[1] - span[0], mean_power_w=joules / (span[1] - span[0]) if joules else None,
          energy_counter_update_ms=changes)


def _run_for(loop, seconds: float) -> None:
    """Products back to back; a sync every 32 (about 45 ms) keeps the queue short without idling the GPU."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(8):
            loop.matmuls(4)
        loop.sync()


def _energy_updates(monitor, loop) -> float | None:
    """How often NVML's energy counter changes under load (median ms between changes)."""
    loop.matmuls(64)  # about 0.4 s of queued work
    seen, times, end = monitor.energy_mj(), [], time.perf_counter() + 0.3
    while time.perf_counter() < end and seen is not None:
        now = monitor.energy_mj()
        if now != seen:
            times.append(time.perf_counter())
            seen = now
    loop.sync()
    return _median([1000 * (b - a) for a, b in zip(times, times[1:])])


def _median(values: list[float]) -> float | None:
    return sorted(values)[len(values) // 2] if values else None


def sleep_case(loop, folder: Path, steps: int = 10) -> None:
    loop.matmuls(24)
    loop.sync()
    begun = time.perf_counter()
    loop.matmuls(24)
    loop.sync()
    sleep_s = time.perf_counter() - begun  # about the step's GPU time: busy near 50%
    slept: list[float] = []

    def step() -> None:
        loop.matmuls(24)
        loop.sync()
        t = time.perf_counter()
        time.sleep(sleep_s)
        slept.append(time.perf_counter() - t)

    facts, _, window_s = traced(loop, folder / "sleep", steps, step)
    expected = 1 - sum(slept[-steps:]) / window_s
    check(loop.name, "sleep", "gpu_busy", facts.busy_share, f"{expected:.4f} +- 0.03",
          abs(facts.busy_share - expected) <= 0.03, sleep_ms=1000 * sleep_s, step_ms=1000 * window_s / steps)


def h2d_case(loop, folder: Path, pinned: bool = False, batch: int = 64, steps: int = 20) -> None:
    import numpy as np

    host = np.random.default_rng(0).random((batch, *IMAGE), dtype=np.float32)  # pageable
    case = "h2d_pinned" if pinned else "h2d"
    bracketed: list[tuple] = []
    torch_loop = isinstance(loop, TorchLoop)
    if pinned:
        host = loop.torch.from_numpy(host).pin_memory()
    step = (lambda: bracketed.append(loop.bracketed_h2d(host))) if torch_loop else (lambda: loop.h2d(host))
    facts, _, _ = traced(loop, folder / case, steps, step)
    per_image = facts.h2d_bytes / (batch * steps) if facts.h2d_bytes is not None else None
    exact = int(np.prod(IMAGE)) * 4
    check(loop.name, case, "h2d_bytes_per_image", per_image, f"== {exact}", per_image == exact)
    share = facts.memcpy_share or 0.0
    if torch_loop:  # the traced copies' stream time, from the CUDA events around each
        events = sum(b.elapsed_time(e) for b, e in bracketed[-steps:]) / facts.window_ms
        if pinned:  # the events bracket the DMA alone
            ok, wanted = abs(share - events) <= 0.03, f"{events:.4f} +- 0.03"
        else:  # the stream also waits while the host stages the first chunk: no DMA then
            ok, wanted = 0.8 * events <= share <= events + 0.01, f"{0.8 * events:.4f} to {events + 0.01:.4f}"
    else:
        events, ok, wanted = None, share > 0, "> 0"
    check(loop.name, case, "memcpy_share", share, wanted + " and no kernels", ok and facts.busy_share == 0,
          gpu_busy=facts.busy_share, events_share=events)


def sync_case(loop, folder: Path) -> None:
    blocked: list[float] = []

    def step() -> None:
        loop.matmuls(4)
        t = time.perf_counter()
        loop.wait()
        blocked.append(time.perf_counter() - t)
        loop.matmuls(1)  # the step goes on after the wait: it is not the end-of-window drain

    facts, _, window_s = traced(loop, folder / "sync", 20, step)
    expected = sum(blocked[-20:]) / window_s
    value = facts.sync_share
    check(loop.name, "sync", "sync_share", value, f"{expected:.4f} +- 0.03",
          value is not None and abs(value - expected) <= 0.03)


def summary(path: Path) -> None:
    """The known-case lines as a Markdown table."""
    print("| framework | case | metric | value | expected | ok |\n|---|---|---|---:|---|---|")
    for line in path.read_text().splitlines():
        item = json.loads(line)
        if item.get("probe") != "known" or item.get("case") == "all":
            continue
        value = item["value"]
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        print(f"| {item['framework']} | {item['case']} | {item['metric']} | {shown} | {item['expected']} | "
              f"{'yes' if item['ok'] else 'NO'} |")


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["summary"]:
        summary(Path(argv[1]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("framework", choices=["torch", "jax"])
    parser.add_argument("--traces", type=Path, help="keep the traces here (default: a temporary folder)")
    parser.add_argument("--lanes", action="store_true", help="list the matmul trace's lanes")
    parser.add_argument("--cases", help="default: matmul,sleep,h2d,sync, and h2d_pinned for torch")
    args = parser.parse_args(argv)
    loop = TorchLoop() if args.framework == "torch" else JaxLoop()
    _stamp(loop.device_name())
    folder = args.traces or Path(tempfile.mkdtemp(prefix="health_known_"))
    cases = {"matmul": lambda: matmul_case(loop, folder, args.lanes), "sleep": lambda: sleep_case(loop, folder),
             # pinned copies of 154 MB: the event pair's own gap (tens of µs a copy) stays under a point
             "h2d": lambda: h2d_case(loop, folder), "h2d_pinned": lambda: h2d_case(loop, folder, True, batch=256),
             "sync": lambda: sync_case(loop, folder)}
    pinned = ",h2d_pinned" if args.framework == "torch" else ""  # JAX's device_put stages every host array
    for name in (args.cases or f"matmul,sleep,h2d{pinned},sync").split(","):
        try:
            cases[name]()
        except Exception as exc:  # noqa: BLE001 - one broken case must not hide the others
            check(args.framework, name, "error", f"{type(exc).__name__}: {exc}"[:400], "no error", False)
    emit(framework=args.framework, case="all", passed=sum(c["ok"] for c in checks), of=len(checks),
         failed=[f"{c['case']}/{c['metric']}" for c in checks if not c["ok"]])
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
