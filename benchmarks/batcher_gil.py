"""How much of the in-process batcher's loss against a host-bound engine the GIL explains, without a GPU.

The pipelined batcher (cnnbench.infer.batcher) runs three kinds of thread in one Python process: the
callers that copy requests into staging slots, a launcher and a completer. A device engine costs the
launcher host time per batch; what matters is how much of it holds the GIL. An eager PyTorch
ResNet-50 forward is ~160 module calls of Python (milliseconds per batch); a CUDA graph replay is one
call (microseconds). This script gives the batcher engines that cost the same device time per batch (a
sleep, GIL released, as a GPU computing) and differ only in their launch (its host time, and whether it
holds the GIL throughout or lets go of it in each operator call), and
prints for each: the engine alone (batches launched back to back, two in flight, launched by one thread
and collected by another) and the batcher fed by
one submitting thread, by benchmarks/serve_pipeline.py's own functions (as on the GPU).

Each pair is measured at every GIL switch interval of ``--switch-ms`` (sys.setswitchinterval; Python's
own is 5 ms): how long a thread that wants the GIL waits while another runs Python, which is what `[serve]
switch_interval_ms` sets in the server's engine process.

Two kinds of launch (``--launch-kind``): ``busy``, a loop of Python that holds the GIL throughout, and
``torch``, the same time spent in eager PyTorch operator calls on a tiny CPU tensor, each of which lets go
of the GIL inside the operator and takes it back after, as an eager forward's kernel launches do. The
number of calls is fixed per launch cost before any interval is measured, so every interval runs the
same work.

Usage: python benchmarks/batcher_gil.py [--device-ms 5] [--max-batch 32] [--launch-ms 0.05 5]
                                        [--switch-ms 5 1 0.25 0.1] [--launch-kind busy torch]
Prints one JSON line per launch kind, launch cost and switch interval.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time

import numpy as np
from serve_pipeline import batcher_rate, engine_rate  # measured exactly as on the GPU

from cnnbench.envinfo import git_sha

SHAPE = (224, 224, 3)


class HostBoundEngine:
    """``launch_ms`` of GIL-held Python per batch, then ``device_ms`` of device time (queued in order)."""

    image_shape = SHAPE
    pad_multiple = 8

    def __init__(self, launch_ms: float, device_ms: float) -> None:
        self.launch_s, self.device_s = launch_ms / 1000, device_ms / 1000
        self.free_at = 0.0

    def staging_buffers(self, count: int, max_batch: int) -> list[np.ndarray]:
        return [np.zeros((max_batch, *SHAPE), np.uint8) for _ in range(count)]

    def launch(self, index: int, valid: int):
        end = time.perf_counter() + self.launch_s
        while time.perf_counter() < end:  # Python work: holds the GIL, as eager kernel launches do
            pass
        self.free_at = max(self.free_at, time.perf_counter()) + self.device_s
        return self.free_at, valid

    def collect(self, handle):
        ready_at, valid = handle
        time.sleep(max(0.0, ready_at - time.perf_counter()))  # waiting for the device: GIL released
        return np.zeros((valid, 5), np.int64), np.zeros((valid, 5), np.float32)

    def infer_now(self, images):
        return self.collect(self.launch(0, len(images)))

    def device_name(self) -> str:
        return "host-bound model"


def operator_calls(torch, tensor, steps: int):
    """``steps`` x three eager operator calls (multiply, add, relu), as a conv-bn-relu block launches three
    kernels: the launch of OperatorCallEngine, and what its calibration times."""
    for _ in range(steps):
        tensor = torch.relu(tensor * 1.0 + 0.0)
    return tensor


class OperatorCallEngine(HostBoundEngine):
    """The launch is ``steps`` x three eager PyTorch operator calls on an 8-element CPU tensor (about
    ``launch_ms`` in all): each call releases the GIL for its kernel and takes it back, unlike the busy loop."""

    def __init__(self, launch_ms: float, device_ms: float, steps: int) -> None:
        import torch

        super().__init__(launch_ms, device_ms)
        self.torch, self.steps, self.tensor = torch, steps, torch.ones(8)

    @staticmethod
    def steps_for(launch_ms: float) -> int:
        """Steps of :func:`operator_calls` that take ``launch_ms`` here: the median of five timed runs."""
        import torch

        torch.set_num_threads(1)  # an 8-element op needs no intra-op pool; its threads would take the cores
        tensor, runs = torch.ones(8), []
        for _ in range(5):
            begun = time.perf_counter()
            operator_calls(torch, tensor, 500)
            runs.append((time.perf_counter() - begun) / 500)
        return max(1, round(launch_ms / 1000 / float(np.median(runs))))

    def launch(self, index: int, valid: int):
        operator_calls(self.torch, self.tensor, self.steps)
        self.free_at = max(self.free_at, time.perf_counter()) + self.device_s
        return self.free_at, valid


def engine_for(kind: str, launch_ms: float, device_ms: float, steps: int) -> HostBoundEngine:
    if kind == "torch":
        return OperatorCallEngine(launch_ms, device_ms, steps)
    return HostBoundEngine(launch_ms, device_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device-ms", type=float, default=5.0, help="device time per batch")
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--launch-ms", type=float, nargs="+", default=[0.05, 2.5, 5.0],
                        help="GIL-held host time per launch (a graph replay ~0.05, eager ResNet-50 ~5)")
    parser.add_argument("--switch-ms", type=float, nargs="+", default=[5.0],
                        help="GIL switch intervals to measure each launch cost at (Python's own: 5)")
    parser.add_argument("--launch-kind", nargs="+", choices=("busy", "torch"), default=["busy"],
                        help="busy: Python holding the GIL; torch: eager PyTorch operator calls")
    args = parser.parse_args()
    made = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    own = sys.getswitchinterval()
    for kind in args.launch_kind:
        for launch_ms in args.launch_ms:
            steps = OperatorCallEngine.steps_for(launch_ms) if kind == "torch" else 0
            for switch_ms in args.switch_ms:
                sys.setswitchinterval(switch_ms / 1000)
                engine = engine_for(kind, launch_ms, args.device_ms, steps)
                alone, _ = engine_rate(engine, engine.staging_buffers(3, args.max_batch), args.max_batch)
                batched = batcher_rate(engine_for(kind, launch_ms, args.device_ms, steps), args.max_batch, 5.0,
                                       300 * args.max_batch)
                sys.setswitchinterval(own)
                print(json.dumps({"git_sha": git_sha(), "timestamp_utc": made, "launch_kind": kind,
                                  "launch_ms": launch_ms, "operator_calls": 3 * steps or None,
                                  "switch_interval_ms": switch_ms, "device_ms": args.device_ms,
                                  "max_batch": args.max_batch, "engine_img_s": round(alone),
                                  "batcher_img_s": round(batched), "batcher_share": round(batched / alone, 3)}),
                      flush=True)


if __name__ == "__main__":
    main()
