"""The window protocol of cnnbench, restated in a few lines so the peers stay independent of it:
first step alone, warm-up discarded, then windows synchronized at both ends."""

from __future__ import annotations

import json
import statistics
import time


def measure(step, sync, batch: int, warmup: int = 10, windows: int = 5, window_steps: int = 20) -> dict:
    sync()
    t0 = time.perf_counter()
    step()
    sync()
    first = time.perf_counter() - t0
    for _ in range(warmup):
        step()
    per_step = []
    for _ in range(windows):
        sync()
        t0 = time.perf_counter()
        for _ in range(window_steps):
            step()
        sync()
        per_step.append((time.perf_counter() - t0) / window_steps)
    median = statistics.median(per_step)
    return {"first_step_s": first, "step_time_ms_median": median * 1000, "images_per_sec": batch / median}


def report(name: str, result: dict) -> None:
    print(json.dumps({"peer": name, **result}), flush=True)
