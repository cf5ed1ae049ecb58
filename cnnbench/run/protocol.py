"""The worker side shared by every backend: the timing protocol, evaluation, the result.

Timing lives here and nowhere else. The protocol (docs/protocol.md):
  1. the first step is timed alone (tracing/compilation + first execution): ``first_step_s``;
  2. ``warmup_steps`` more steps are run and discarded;
  3. ``windows`` windows of ``window_steps`` steps are timed, synchronizing the device at both
     ends of every window and never inside; a window never spans an epoch boundary;
  4. at the end of every epoch the test split is evaluated, off the training clock.

Most trainers expose ``step()`` and :func:`train` drives them. A trainer that owns its loop (Keras
``model.fit``) instead calls :meth:`Protocol.before_step` / :meth:`Protocol.after_step` from its
callbacks, so both paths are timed by the same code.

Input wait: a trainer that also exposes ``next_batch()`` gets its batch fetched here, apart from the
step, and the host time that call blocks is recorded for every step of the timed windows
(``data_wait_ms_median``; ``data_wait_share`` = total wait / the windows' wall time). Throughput stays
end to end: the windows include the waits.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cnnbench.backend import Trainer
from cnnbench.expand import plan_windows
from cnnbench.gpu_monitor import EnergyMeter
from cnnbench.runs import Run


@dataclass
class TrainResult:
    first_step_s: float
    window_step_ms: list[float]
    train_wall_s: float
    train_loss_final: float | None
    test_loss: float | None = None
    test_accuracy: float | None = None
    time_to_accuracy_s: float | None = None
    history: list[dict] = field(default_factory=list)
    profile_path: str | None = None
    window_spans: list[tuple[float, float]] = field(default_factory=list)  # perf_counter (start, end)
    data_wait_ms: list[float] = field(default_factory=list)  # per timed step; empty: not measured
    window_energy_j: list[float | None] = field(default_factory=list)  # per timed window; empty: no meter

    def data_wait_summary(self) -> dict[str, float | None]:
        if not self.data_wait_ms:
            return {"data_wait_ms_median": None, "data_wait_share": None}
        window_total = sum(self.window_step_ms) * (len(self.data_wait_ms) / max(len(self.window_step_ms), 1))
        return {"data_wait_ms_median": float(np.median(self.data_wait_ms)),
                "data_wait_share": float(sum(self.data_wait_ms) / window_total) if window_total else None}

    def timing_summary(self, global_batch: int, devices: int) -> dict[str, float]:
        ms = np.asarray(self.window_step_ms)
        median = float(np.median(ms))
        ips = global_batch / (median / 1000.0)
        return {
            "step_time_ms_median": median,
            "step_time_ms_p10": float(np.percentile(ms, 10)),
            "step_time_ms_p90": float(np.percentile(ms, 90)),
            "images_per_sec": ips,
            "images_per_sec_per_device": ips / devices,
        }


class Protocol:
    """The timing state machine; call before_step/after_step around every training step."""

    def __init__(self, trainer: Trainer, run: Run, log: Callable[[str], None] = print,
                 meter: EnergyMeter | None = None) -> None:
        self.trainer, self.run, self.log = trainer, run, log
        self.meter = meter  # NVML's energy counter, read where the windows synchronize
        self.steps_per_epoch = trainer.steps_per_epoch
        windows = plan_windows(run.total_steps, self.steps_per_epoch, run.warmup_steps,
                               run.windows, run.window_steps)
        self.window_ends = dict(windows)  # start -> end
        self.window_ms: list[float] = []
        self.window_spans: list[tuple[float, float]] = []  # the timed windows, for the NVML sampler
        self.history: list[dict] = []
        self.time_to_accuracy: float | None = None
        self.first_step_s = 0.0
        self.train_clock = 0.0  # training wall time, evaluation excluded
        self.last_loss: float | None = None
        self._window_end, self._window_t0, self._clock_t0 = -1, 0.0, 0.0
        self.data_wait_ms: list[float] = []
        # --profile: the first timed window runs under the framework's tracer and is left out of
        # the statistics (tracing slows it down); the row names the trace.
        self.profile_dir = Path(run.profile_dir) if run.profile_dir else None
        self._trace = contextlib.ExitStack()
        self._tracing = False
        self.profiled: str | None = None

    def start(self) -> None:
        self.trainer.sync()
        self._clock_t0 = time.perf_counter()

    def before_step(self, step: int) -> None:
        if step in self.window_ends:
            self.trainer.sync()
            if self.profile_dir is not None and not self.window_ms and not self._tracing:
                self._trace.enter_context(self.trainer.profiler(self.profile_dir))
                self._tracing = True
            if self.meter:
                self.meter.window_start()
            self._window_end, self._window_t0 = self.window_ends[step], time.perf_counter()

    def waited(self, step: int, seconds: float) -> None:
        """The host time step ``step`` waited for its batch; kept for steps inside timed windows."""
        if self._window_end > step and not self._tracing:
            self.data_wait_ms.append(seconds * 1000.0)

    def after_step(self, step: int) -> None:
        if step == 0:
            self.trainer.sync()
            self.first_step_s = time.perf_counter() - self._clock_t0
            self.log(f"first step {self.first_step_s:.2f} s")
        if step + 1 == self._window_end:
            self.trainer.sync()
            ms = (time.perf_counter() - self._window_t0) * 1000.0 / self.run.window_steps
            if self._tracing:
                self._trace.close()
                self._tracing, self.profile_dir, self.profiled = False, None, str(self.run.profile_dir)
                self.log(f"traced window: {ms:.2f} ms/step (left out) -> {self.run.profile_dir}")
            else:
                self.window_ms.append(ms)
                self.window_spans.append((self._window_t0, time.perf_counter()))
                if self.meter:
                    self.meter.window_end()
                self.log(f"window {len(self.window_ms)}/{self.run.windows}: {self.window_ms[-1]:.2f} ms/step")
        spe = self.steps_per_epoch
        if spe and (step + 1) % spe == 0:
            self._end_epoch((step + 1) // spe)

    def _end_epoch(self, epoch: int) -> None:
        self.trainer.sync()
        self.train_clock += time.perf_counter() - self._clock_t0
        self.last_loss = self.trainer.train_loss()
        test_loss, test_acc = self.trainer.evaluate()
        self.history.append({"epoch": epoch, "wall_s": self.train_clock, "train_loss": self.last_loss,
                             "test_loss": test_loss, "test_accuracy": test_acc})
        self.log(f"epoch {epoch}: train loss {self.last_loss:.4f}, test loss {test_loss:.4f}, "
                 f"accuracy {test_acc:.4f}, {self.train_clock:.1f} s")
        target = self.run.target_accuracy
        if self.time_to_accuracy is None and target and test_acc >= target:
            self.time_to_accuracy = self.train_clock
        self._clock_t0 = time.perf_counter()

    def finish(self) -> TrainResult:
        self.trainer.sync()
        if not self.steps_per_epoch:
            self.train_clock += time.perf_counter() - self._clock_t0
            self.last_loss = self.trainer.train_loss()
        expected = self.run.windows - (1 if self.run.profile_dir else 0)
        if len(self.window_ms) != expected:
            raise RuntimeError(f"only {len(self.window_ms)} of {expected} windows were timed")
        final = self.history[-1] if self.history else {}
        return TrainResult(
            first_step_s=self.first_step_s, window_step_ms=self.window_ms,
            train_wall_s=self.train_clock, train_loss_final=self.last_loss,
            test_loss=final.get("test_loss"), test_accuracy=final.get("test_accuracy"),
            time_to_accuracy_s=self.time_to_accuracy, history=self.history,
            profile_path=self.profiled, window_spans=self.window_spans, data_wait_ms=self.data_wait_ms,
            window_energy_j=self.meter.window_j if self.meter else [],
        )


def train(trainer: Trainer, run: Run, log: Callable[[str], None] = print,
          meter: EnergyMeter | None = None) -> TrainResult:
    """Train for ``run.total_steps`` steps under the timing protocol."""
    protocol = Protocol(trainer, run, log, meter)
    if getattr(trainer, "owns_loop", False):  # Keras fit: the trainer runs the loop, calling the hooks
        protocol.start()
        trainer.run_loop(protocol)
        return protocol.finish()
    protocol.start()
    fetch = getattr(trainer, "next_batch", None)
    for step in range(run.total_steps):
        protocol.before_step(step)
        if fetch is None:
            trainer.step()
        else:
            started = time.perf_counter()
            batch = fetch()
            protocol.waited(step, time.perf_counter() - started)
            trainer.step(batch)
        protocol.after_step(step)
    return protocol.finish()
