"""Test-only fault injection, driven by the environment variable CNNBENCH_FAULT.

``CNNBENCH_FAULT="rank=1,step=3,kind=raise"`` makes process 1 fail when it is about to run its
step 3 (0-based). Kinds: ``raise`` (a Python exception), ``kill`` (SIGKILL to itself, as the
OOM killer would), ``hang`` (sleep forever, as a deadlocked collective would). Without the variable
nothing is wrapped and the step runs untouched.
"""

from __future__ import annotations

import os
import signal
import time

ENV_VAR = "CNNBENCH_FAULT"
KINDS = ("raise", "kill", "hang")


class InjectedFault(RuntimeError):
    pass


def parse(text: str) -> dict[str, str]:
    fields = dict(part.split("=", 1) for part in text.split(",") if part)
    if fields.get("kind") not in KINDS or "step" not in fields:
        raise ValueError(f"{ENV_VAR}={text!r}: expected rank=R,step=S,kind={'|'.join(KINDS)}")
    return fields


def install(trainer: object, process_index: int) -> None:
    """Wrap ``trainer.step`` so that it misbehaves at the configured step and rank."""
    text = os.environ.get(ENV_VAR)
    if not text:
        return
    fault = parse(text)
    if int(fault.get("rank", 0)) != process_index:
        return
    inner, target, counter = trainer.step, int(fault["step"]), [0]

    def step(*batch) -> None:  # the runner may hand it the batch it fetched (see protocol.train)
        if counter[0] == target:
            if fault["kind"] == "raise":
                raise InjectedFault(f"injected fault at step {target} on process {process_index}")
            if fault["kind"] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            while True:  # hang
                time.sleep(3600)
        counter[0] += 1
        inner(*batch)

    trainer.step = step  # type: ignore[attr-defined]
