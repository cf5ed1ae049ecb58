"""Test-only fault injection, driven by the environment variable CNNBENCH_FAULT.

``CNNBENCH_FAULT="rank=1,step=3,kind=raise"`` makes process 1 fail when it is about to run its
step 3 (0-based). Kinds: ``raise`` (a Python exception), ``kill`` (SIGKILL to itself, as the
OOM killer would), ``orphan`` (PyTorch only: SIGKILL to its parent, torchrun, as the OOM killer
might choose it; the ranks, each in a session of its own, are left without it), ``hang`` (sleep
forever, as a deadlocked collective would), ``sleep`` (``ms=N``: a host stall of N ms in every step
from ``step`` on, default 0, as a slow host-side input stage would; the health table must see the
device idle for it), ``hold_exit`` (`cnnbench serve` only: the process that builds the engine gets an
exit handler that never returns, as PyTorch's compile-worker pool can hold a process at exit after a
cold compile), ``slow_start`` (`cnnbench serve` with front ends only: front end ``rank`` sleeps ``ms=N``
before it installs its signal handlers, as a front end still importing its libraries on a busy host
does), ``slow_exit`` (`cnnbench serve` with front ends only: front end ``rank`` sleeps ``ms=N`` after its
HTTP server has stopped, before it exits, as a front end's interpreter teardown can), ``hold_drain``
(`cnnbench serve` with front ends only: the engine process, stopped, never starts its drain, as the first
compiled engine of a 1080p run was held after its work on a GPU), ``abort_exit``
(training: process ``rank`` aborts (SIGABRT) at its exit, after a run that finished, as a PyTorch gloo
rank's exit-time destructors could). Without the variable nothing is wrapped and the step runs untouched.
"""

from __future__ import annotations

import atexit
import os
import signal
import time

ENV_VAR = "CNNBENCH_FAULT"
KINDS = ("raise", "kill", "orphan", "hang", "sleep", "hold_exit", "slow_start", "slow_exit", "hold_drain",
         "abort_exit")


class InjectedFault(RuntimeError):
    pass


def parse(text: str) -> dict[str, str]:
    fields = dict(part.split("=", 1) for part in text.split(",") if part)
    if fields.get("kind") in ("sleep", "slow_start", "slow_exit"):
        if not fields.get("ms", "").replace(".", "", 1).isdigit():
            raise ValueError(f"{ENV_VAR}={text!r}: kind={fields['kind']} needs ms=N (milliseconds)")
        fields.setdefault("step", "0")
    if fields.get("kind") in ("hold_exit", "hold_drain", "abort_exit"):
        fields.setdefault("step", "0")  # not a step: the stop or the exit
    if fields.get("kind") not in KINDS or "step" not in fields:
        raise ValueError(f"{ENV_VAR}={text!r}: expected rank=R,step=S,kind={'|'.join(KINDS)} "
                         "(sleep, slow_start, slow_exit: ms=N)")
    return fields


def _misbehave(kind: str, message: str) -> None:
    if kind == "raise":
        raise InjectedFault(message)
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "orphan":
        os.kill(os.getppid(), signal.SIGKILL)
    while True:  # hang
        time.sleep(3600)


def install(trainer: object, process_index: int) -> None:
    """Wrap ``trainer.step`` so that it misbehaves at the configured step and rank."""
    text = os.environ.get(ENV_VAR)
    if not text:
        return
    fault = parse(text)
    if int(fault.get("rank", 0)) != process_index or fault["kind"] in ("slow_start", "slow_exit"):  # serving only
        return
    if fault["kind"] == "abort_exit":
        atexit.register(os.abort)
        return
    inner, target, counter = trainer.step, int(fault["step"]), [0]

    def step(*batch) -> None:  # the runner may hand it the batch it fetched (see protocol.train)
        if fault["kind"] == "sleep":
            if counter[0] >= target:
                time.sleep(float(fault["ms"]) / 1000.0)
            counter[0] += 1
            inner(*batch)
            return
        if counter[0] == target:
            _misbehave(fault["kind"], f"injected fault at step {target} on process {process_index}")
        counter[0] += 1
        inner(*batch)

    trainer.step = step  # type: ignore[attr-defined]


def install_on_engine(engine: object) -> None:
    """`cnnbench serve`: ``CNNBENCH_FAULT="step=S,kind=raise"`` makes the model call of served batch S
    (0-based, counted after warm-up) misbehave; with ``batching = "none"`` each request is a batch."""
    text = os.environ.get(ENV_VAR)
    if not text:
        return
    fault, counter = parse(text), [0]
    if fault["kind"] in ("slow_start", "slow_exit", "hold_drain", "abort_exit"):  # another process's or moment's fault
        return
    if fault["kind"] == "hold_exit":
        atexit.register(time.sleep, 3600)
        return
    target = int(fault["step"])

    def wrapped(inner):
        def call(*args, **kwargs):
            index, counter[0] = counter[0], counter[0] + 1
            if index == target:
                _misbehave(fault["kind"], f"injected fault in served batch {target}")
            return inner(*args, **kwargs)

        return call

    engine.launch = wrapped(engine.launch)  # type: ignore[attr-defined]
    engine.infer_now = wrapped(engine.infer_now)  # type: ignore[attr-defined]


def delay_frontend(index: int, kind: str) -> None:
    """`cnnbench serve` front end ``index``: ``CNNBENCH_FAULT="rank=I,kind=slow_start,ms=N"`` makes it sleep
    N ms before anything else, stretching the time in which it has no signal handlers of its own;
    ``kind=slow_exit`` makes it sleep after its HTTP server has stopped, stretching the time in which a late
    stop signal can reach it. ``kind`` names the moment the caller is at."""
    text = os.environ.get(ENV_VAR)
    if not text:
        return
    fault = parse(text)
    if fault["kind"] == kind and int(fault.get("rank", 0)) == index:
        time.sleep(float(fault["ms"]) / 1000.0)


def hold_drain() -> None:
    """The engine process, stopped, is held here for good under ``kind=hold_drain`` (its stacks name this
    function); otherwise nothing happens."""
    text = os.environ.get(ENV_VAR)
    if text and parse(text)["kind"] == "hold_drain":
        while True:
            time.sleep(3600)
