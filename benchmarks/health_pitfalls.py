"""The classic pitfalls of issue 22, each measured on its own: one JSON line per measurement on stdout.

    python3 benchmarks/health_pitfalls.py layers  --height 1080 --width 1920 --batches 8,16 --trace-dir DIR
    python3 benchmarks/health_pitfalls.py cudnn   --batch 32 --size 224 --threads 4
    python3 benchmarks/health_pitfalls.py loader  --workers 4
    python3 benchmarks/health_pitfalls.py pinned  --cap-gib 32
    python3 benchmarks/health_pitfalls.py pinned-past
    python3 benchmarks/health_pitfalls.py claims
    python3 benchmarks/health_pitfalls.py threads TRACE_DIR

Run from the repository root (it imports cnnbench and backends). Everything falls back to the CPU
where no GPU is found, so that ``benchmarks/gpu.py --smoke health`` can check the script itself.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def emit(kind: str, **fields) -> None:
    print(json.dumps({"probe": kind, **fields}), flush=True)


def _torch():
    import torch

    return torch, torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _sync(torch, device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _resnet50(torch, device, channels_last: bool = True):
    from backends.torch.models import build_model

    model = build_model("resnet50", 224, 3, 1000).to(device).eval()
    return model.to(memory_format=torch.channels_last) if channels_last else model


def _time_calls(torch, device, call, iters: int) -> list[float]:
    out = []
    for _ in range(iters):
        begun = time.perf_counter()
        call()
        _sync(torch, device)
        out.append((time.perf_counter() - begun) * 1000)
    return out


# -- batch 8 vs 16 at 1080x1920: utilisation and the per-layer table --------------------------------

def layers(args) -> None:
    torch, device = _torch()
    from backends import profilers
    from cnnbench.report import health, traces

    torch.backends.cudnn.benchmark = True
    model = _resnet50(torch, device)
    dtype = torch.bfloat16
    per_batch: dict[int, dict[str, float]] = {}
    for batch in args.batches:
        x = torch.randn(batch, 3, args.height, args.width, device=device).to(memory_format=torch.channels_last)

        @torch.inference_mode()
        def forward(x=x):
            with torch.autocast(device.type, dtype=dtype):
                return model(x)

        for _ in range(args.warmup):
            forward()
        _sync(torch, device)
        ms = _time_calls(torch, device, forward, args.iters)
        folder = Path(args.trace_dir) / f"b{batch}"
        with profilers.torch_trace(folder, device.type == "cuda", module=model):
            for _ in range(args.traced):
                forward()
            _sync(torch, device)
        facts = health.measure_trace(traces.load_trace(folder))
        by_layer = traces.device_time_by_layer(traces.load_trace(folder))
        images = batch * args.traced
        per_batch[batch] = {k: v / images for k, v in by_layer.items()}  # µs per image
        median = statistics.median(ms)
        emit("layers", batch=batch, height=args.height, width=args.width, ms_per_batch=median,
             images_per_sec=batch / (median / 1000), busy_share=facts.busy_share,
             window_ms=facts.window_ms,
             top_kernels=[[n[:80], us / args.traced / 1000] for n, us in facts.top_kernels[:5]])
        del x
    if len(args.batches) == 2:
        small, large = args.batches
        names = sorted(per_batch[small], key=lambda n: -per_batch[small][n])[: args.top]
        emit("layers_compare", batches=[small, large], unit="device us per image",
             rows=[[n, per_batch[small][n], per_batch[large].get(n)] for n in names],
             total=[sum(per_batch[small].values()), sum(per_batch[large].values())])


# -- cudnn.benchmark and deterministic, with one caller and with concurrent callers -----------------

def cudnn(args) -> None:
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA starts: deterministic cuBLAS
    torch, device = _torch()
    model = _resnet50(torch, device)

    @torch.inference_mode()
    def forward(inp):
        with torch.autocast(device.type, dtype=torch.bfloat16):
            return model(inp)

    def batch_of(n: int):
        return torch.randn(n, 3, args.size, args.size, device=device).to(memory_format=torch.channels_last)

    configs = [(False, False), (True, False), (False, True), (True, True)]
    for index, (bench, determ) in enumerate(configs):
        try:
            _cudnn_config(torch, device, forward, batch_of, args, index, bench, determ, len(configs))
        except RuntimeError as exc:  # e.g. an op without a deterministic implementation
            emit("cudnn", cudnn_benchmark=bench, deterministic=determ, error=str(exc).splitlines()[0][:300])


def _cudnn_config(torch, device, forward, batch_of, args, index: int, bench: bool, determ: bool,
                  configs: int) -> None:
    """One cuDNN configuration: first call (autotuning), one caller, then concurrent callers."""
    torch.backends.cudnn.benchmark = bench
    torch.backends.cudnn.deterministic = determ
    torch.use_deterministic_algorithms(determ)
    # A shape of its own per configuration: cuDNN's autotuning cache is per shape, so every
    # configuration starts cold (the cost of benchmark=True is in first_call_s).
    batch = args.batch + index
    concurrent_batch = batch + 2 * configs
    x = batch_of(batch)
    first = _time_calls(torch, device, lambda x=x: forward(x), 1)[0] / 1000
    for _ in range(3):
        forward(x)
    single = statistics.median(_time_calls(torch, device, lambda x=x: forward(x), args.iters))
    a, b = forward(x).float(), forward(x).float()
    _sync(torch, device)
    inputs = [batch_of(concurrent_batch) for _ in range(args.threads)]
    lat, wall = _concurrent_calls(torch, device, forward, inputs, args.iters + 1)
    firsts = [calls[0] for calls in lat]
    steady = sorted(v for calls in lat for v in calls[1:])
    after = statistics.median(_time_calls(torch, device, lambda i=inputs[0]: forward(i), args.iters))
    emit("cudnn", cudnn_benchmark=bench, deterministic=determ, batch=batch, first_call_s=first,
         single_ms=single, single_ms_per_image=single / batch, repeat_max_abs_diff=float((a - b).abs().max()),
         threads=args.threads, concurrent_batch=concurrent_batch, concurrent_first_call_ms_max=max(firsts),
         concurrent_ms_p50=steady[len(steady) // 2], concurrent_ms_p99=steady[int(0.99 * (len(steady) - 1))],
         concurrent_images_per_sec=len(inputs) * (args.iters + 1) * concurrent_batch / wall,
         after_concurrent_single_ms_per_image=after / concurrent_batch)


def _concurrent_calls(torch, device, forward, inputs, calls: int) -> tuple[list[list[float]], float]:
    """One thread per input, each on its own CUDA stream, all meeting the new shape at the same moment
    (as a server's request threads would); (per-thread call latencies in ms, wall time in s)."""
    lat: list[list[float]] = [[] for _ in inputs]
    gate = threading.Barrier(len(inputs))

    def caller(i: int) -> None:
        stream = torch.cuda.Stream() if device.type == "cuda" else None
        gate.wait()
        for _ in range(calls):
            begun = time.perf_counter()
            if stream is not None:
                with torch.cuda.stream(stream):
                    forward(inputs[i])
                stream.synchronize()
            else:
                forward(inputs[i])
            lat[i].append((time.perf_counter() - begun) * 1000)

    begun = time.perf_counter()
    threads = [threading.Thread(target=caller, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return lat, time.perf_counter() - begun


# -- loader workers that touch CUDA vs workers with CUDA hidden -------------------------------------

class FrameSet:
    """Decode-like CPU work per item (cv2 resize of a 1080p frame when cv2 is there), optionally touching CUDA."""

    def __init__(self, touch_cuda: bool, size: int) -> None:
        self.touch_cuda, self.size = touch_cuda, size

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, index: int):
        import numpy as np
        import torch

        if self.touch_cuda and torch.cuda.is_available():
            torch.zeros(1, device="cuda")  # e.g. a transform that builds a CUDA tensor: a context per worker
        frame = np.full((1080, 1920, 3), index % 251, dtype=np.uint8)
        try:
            import cv2

            small = cv2.resize(frame, (self.size, self.size), interpolation=cv2.INTER_AREA)
        except ImportError:
            small = frame[:: 1080 // self.size, :: 1920 // self.size][: self.size, : self.size]
        return torch.from_numpy(np.ascontiguousarray(small)).permute(2, 0, 1)


class WorkerInit:
    """worker_init_fn as the real-input DataLoader sets it up: CUDA hidden before any use, cv2's threads."""

    def __init__(self, hide_cuda: bool, cv2_threads: int | None) -> None:
        self.hide_cuda, self.cv2_threads = hide_cuda, cv2_threads

    def __call__(self, worker_id: int) -> None:
        if self.hide_cuda:
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
        if self.cv2_threads is not None:
            try:
                import cv2

                cv2.setNumThreads(self.cv2_threads)
            except ImportError:
                pass


def _gpu_processes() -> tuple[int | None, float | None]:
    """(processes holding a context on GPU 0, MiB used on it) from NVML; (None, None) without NVML."""
    try:
        import pynvml as nvml

        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        used = nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20
        return len(procs), used
    except Exception:  # noqa: BLE001 - no NVML: the counts are unknown, the timing still stands
        return None, None


def loader(args) -> None:
    import torch
    from torch.utils.data import DataLoader

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.zeros(1, device=device)  # the training process holds its context first, as a trainer would
    base_procs, base_mb = _gpu_processes()
    # (name, dataset touches CUDA, CUDA hidden in workers, cv2 threads, start method)
    variants = [("touch_cuda", True, False, None, "spawn"), ("cuda_hidden", True, True, None, "spawn"),
                ("touch_cuda_fork", True, False, None, "fork"), ("clean_cv2_default", False, True, None, "spawn"),
                ("clean_cv2_threads0", False, True, 0, "spawn")]
    for name, touch, hide, cv2_threads, method in variants:
        begun = time.perf_counter()
        data = DataLoader(FrameSet(touch, args.size), batch_size=args.batch, num_workers=args.workers,
                          multiprocessing_context=method, persistent_workers=True,
                          worker_init_fn=WorkerInit(hide, cv2_threads))
        try:
            batches = iter(data)
            next(batches)
        except RuntimeError as exc:  # a forked worker cannot start CUDA once the parent has
            emit("loader", variant=name, workers=args.workers, start_method=method,
                 error=str(exc).strip().splitlines()[-1][:300])
            del data
            continue
        started_s = time.perf_counter() - begun
        procs, used = _gpu_processes()
        begun = time.perf_counter()
        for _ in range(args.steps):
            next(batches).to(device, non_blocking=False)
        rate = args.steps * args.batch / (time.perf_counter() - begun)
        emit("loader", variant=name, workers=args.workers, start_method=method, start_s=started_s,
             images_per_sec=rate, gpu_processes=procs, gpu_processes_before=base_procs,
             worker_gpu_mb=None if used is None or base_mb is None else used - base_mb)
        del batches, data
        time.sleep(1.0)  # let the workers exit before the next variant counts processes


# -- pinned host memory: how much, past it, which limit applies -------------------------------------

def _status_kib(field: str) -> int | None:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def _maps() -> int:
    return len(Path("/proc/self/maps").read_text().splitlines())


def pinned(args) -> None:
    from cnnbench.run import host_memory

    limits = host_memory.limits()
    max_map = Path("/proc/sys/vm/max_map_count").read_text().strip()
    ulimit = subprocess.run(["bash", "-c", "ulimit -l"], capture_output=True, text=True).stdout.strip()
    emit("pinned_limits", ulimit_l=ulimit, vm_max_map_count=int(max_map), **limits)
    if args.child:
        return _pinned_child(args)
    torch, device = _torch()
    if device.type != "cuda":
        emit("pinned_skipped", reason="no CUDA: pinning needs a GPU driver")
        return
    from backends.torch.common import pinned as pin

    cap = min(args.cap_gib, int((limits["mem_available"] or 0) * 0.5 / 2**30))
    held, maps0, lck0, pin0 = [], _maps(), _status_kib("VmLck"), _status_kib("VmPin")
    times: list[float] = []
    # Pin 1 GiB at a time and stop when the next GiB would not fit in the time budget (a fresh VM's
    # memory grows as it is touched, a few seconds per 8 GiB): the probe reports what it reached
    # instead of being killed with nothing said.
    deadline = time.perf_counter() + args.budget_s
    stopped_by = "cap"
    for _ in range(cap):
        if times and time.perf_counter() + 1.5 * max(times[-3:]) > deadline:
            stopped_by = "time budget"
            break
        begun = time.perf_counter()
        held.append(pin(torch.empty(2**30, dtype=torch.uint8)))
        times.append(time.perf_counter() - begun)
    emit("pinned_amount", pinned_gib=len(held), cap_gib=cap, stopped_by=stopped_by, budget_s=args.budget_s,
         seconds_per_gib=statistics.median(times) if times else None,
         maps_before=maps0, maps_after=_maps(), vm_lck_kib_before=lck0, vm_lck_kib_after=_status_kib("VmLck"),
         vm_pin_kib_before=pin0, vm_pin_kib_after=_status_kib("VmPin"),
         mem_available_after=host_memory.meminfo_bytes("MemAvailable"))
    del held
    torch.cuda.empty_cache()
    # RLIMIT_MEMLOCK lowered to 64 KiB in a fresh process: does cudaHostAlloc (pin_memory) or
    # cudaHostRegister still pin 1 GiB?
    for how in ("alloc", "register"):
        try:
            done = subprocess.run([sys.executable, __file__, "pinned", "--child", how], capture_output=True,
                                  text=True, timeout=args.child_timeout_s)
        except subprocess.TimeoutExpired:
            emit("pinned_memlock", how=how, ok=False, error=f"no answer in {args.child_timeout_s} s")
            continue
        for line in done.stdout.splitlines():
            if line.startswith("{") and '"pinned_limits"' not in line:
                print(line, flush=True)
        if done.returncode:
            emit("pinned_memlock", how=how, ok=False, error=(done.stderr.strip().splitlines() or ["?"])[-1][:300])


def pinned_past(args) -> None:
    """One pin request of twice the host's RAM, through cnnbench's wrapper: what does the user see?"""
    torch, device = _torch()
    if device.type != "cuda":
        emit("pinned_skipped", reason="no CUDA: pinning needs a GPU driver")
        return
    from backends.torch.common import PinnedMemoryError
    from backends.torch.common import pinned as pin
    from cnnbench.run import host_memory

    want = 2 * (host_memory.meminfo_bytes("MemTotal") or 2**40)
    begun = time.perf_counter()
    try:  # straight from the pinned allocator (cudaHostAlloc), as a pinned staging buffer is made
        torch.empty(want, dtype=torch.uint8, pin_memory=True)
        emit("pinned_past", requested_gib=want / 2**30, ok=True)
    except RuntimeError as exc:
        emit("pinned_past", requested_gib=want / 2**30, ok=False, seconds=time.perf_counter() - begun,
             torch_says=str(exc).splitlines()[0][:200], cnnbench_says=host_memory.pinning_error(want, exc))
    small = torch.empty(2**20, dtype=torch.uint8)
    try:  # and through the wrapper the inference path uses, on a size that fits
        emit("pinned_wrapper", ok=bool(pin(small).is_pinned()))
    except PinnedMemoryError as exc:
        emit("pinned_wrapper", ok=False, error=str(exc))


def _pinned_child(args) -> None:
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (64 * 1024, resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]))
    import numpy as np
    import torch

    torch.zeros(1, device="cuda")
    if args.child == "alloc":
        try:
            held = torch.empty(2**30, dtype=torch.uint8).pin_memory()
            emit("pinned_memlock", how="cudaHostAlloc (pin_memory)", memlock_kib=64, ok=bool(held.is_pinned()))
        except RuntimeError as exc:
            emit("pinned_memlock", how="cudaHostAlloc (pin_memory)", memlock_kib=64, ok=False, error=str(exc)[:300])
        return
    buffer = np.ones(2**30, dtype=np.uint8)
    code = torch.cuda.cudart().cudaHostRegister(buffer.ctypes.data, buffer.nbytes, 0)
    emit("pinned_memlock", how="cudaHostRegister", memlock_kib=64, ok=int(code) == 0, cuda_error=int(code),
         vm_lck_kib=_status_kib("VmLck"), vm_pin_kib=_status_kib("VmPin"))


# -- the arithmetic behind the README's corrections ------------------------------------------------

def claims(args) -> None:
    from cnnbench.model import flops

    # FLOPs of a fully convolutional ResNet-50 scale with the pixel count (up to the 'same' padding of
    # each stride-2 stage: counted exactly by flops.py per side, so take the mean of both square sizes).
    per_224 = flops.gflops_per_image("resnet50", 224, 3, 1000)
    at_1080 = flops.gflops_per_image("resnet50", 1080, 3, 1000)
    at_1920 = flops.gflops_per_image("resnet50", 1920, 3, 1000)
    rectangular = (at_1080 * at_1920) ** 0.5  # conv FLOPs ~ H x W: the geometric mean of the squares
    batch_tflop = 16 * rectangular / 1000
    emit("claims", resnet50_gflop_224=per_224, resnet50_gflop_1080x1920=rectangular,
         tflop_per_16_frames=batch_tflop, tflops_needed_in_47ms=batch_tflop / 0.047,
         rtx3060_peak_tflops={"fp32": 12.7, "fp16_tensor_dense": 51.2},
         cudnn_has_convolution_algo=_cudnn_has("convolution_algo"))


def _cudnn_has(name: str) -> bool:
    import torch.backends.cudnn as cudnn

    return name in dir(cudnn) or name in type(cudnn).__dict__


def threads(args) -> None:
    """What a trace holds, per process and thread: event counts, sample names and arg keys (to check
    the health table's reading of a trace format against the real thing)."""
    from collections import Counter

    from cnnbench.report import traces

    trace = traces.load_trace(Path(args.trace))
    lines = Counter((trace.process_names.get(e.pid, str(e.pid)), trace.thread_names.get((e.pid, e.tid), str(e.tid)))
                    for e in trace.events)
    samples: dict[tuple, list] = {}
    for e in trace.events:
        key = (trace.process_names.get(e.pid, str(e.pid)), trace.thread_names.get((e.pid, e.tid), str(e.tid)))
        if len(samples.setdefault(key, [])) < 2:
            samples[key].append([e.name[:60], e.cat, sorted(e.args)[:8]])
    emit("trace_lines", file=str(trace.path.name), trace_kind=trace.kind,
         lines=[[p, t, n, samples[(p, t)]] for (p, t), n in lines.most_common(12)])


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("layers")
    p.add_argument("--height", type=int, default=1080)
    p.add_argument("--width", type=int, default=1920)
    p.add_argument("--batches", type=lambda s: [int(v) for v in s.split(",")], default=[8, 16])
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--traced", type=int, default=3)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--trace-dir", default="/tmp/health_layers")
    p = sub.add_parser("cudnn")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--iters", type=int, default=20)
    p = sub.add_parser("loader")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--steps", type=int, default=20)
    p = sub.add_parser("pinned")
    p.add_argument("--cap-gib", type=int, default=32)
    p.add_argument("--budget-s", type=float, default=20.0, help="stop pinning more when this is spent")
    p.add_argument("--child-timeout-s", type=float, default=15.0)
    p.add_argument("--child", default="")
    sub.add_parser("pinned-past")
    p = sub.add_parser("threads")
    p.add_argument("trace")
    sub.add_parser("claims")
    args = parser.parse_args()
    commands = {"layers": layers, "cudnn": cudnn, "loader": loader, "pinned": pinned, "pinned-past": pinned_past,
                "threads": threads, "claims": claims}
    commands[args.what](args)


if __name__ == "__main__":
    main()
