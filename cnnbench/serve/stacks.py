"""Every thread's Python stack on demand: STACKS_SIGNAL (SIGUSR2) to a process of `cnnbench serve` prints
them on its stderr.

faulthandler writes them from the C-level signal handler, so they come even while the process is held in C
code (a lock, a device wait, a compile) where a Python-level handler would never run. The supervisor sends
it to a child that outlives its stop bound, just before SIGKILL, so the log says where that child was held;
an operator may send it to any of the server's processes at any time, as one would run `py-spy dump`.

Python frames say which call holds a thread, not what that call waits for inside a framework's C++ or the
driver (a futex, a device synchronisation). Where `py-spy` is installed (it is in the dev extra), the
supervisor also prints a held child's native stacks with it before the kill (:func:`print_native_stacks`).
"""

from __future__ import annotations

import faulthandler
import os
import shutil
import signal
import subprocess
import sys
import time

STACKS_SIGNAL = signal.SIGUSR2


def print_stacks_on_signal() -> None:
    """From now on STACKS_SIGNAL prints this process's threads' stacks on stderr and the process goes on."""
    faulthandler.register(STACKS_SIGNAL, file=sys.stderr, all_threads=True)


NATIVE_STACKS_TIMEOUT_S = 30.0  # unwinding every thread of a process with CUDA's libraries loaded takes seconds


def print_native_stacks(pids: list[int]) -> bool:
    """``py-spy dump --native`` of each of ``pids`` on this process's stderr, one block after another, if
    py-spy is installed (it reads a process through ptrace: root, or a ptrace scope that allows it). The
    dumps run side by side under one NATIVE_STACKS_TIMEOUT_S, so several held processes (front ends) add
    one bound to a stop, not one each. False when py-spy is not installed or a dump failed."""
    py_spy = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))  # a venv's
    if py_spy is None or not pids:
        return False
    dumps = {pid: subprocess.Popen([py_spy, "dump", "--native", "--pid", str(pid)], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True) for pid in pids}
    deadline, every_one = time.monotonic() + NATIVE_STACKS_TIMEOUT_S, True
    for pid, dump in dumps.items():
        try:
            text, _ = dump.communicate(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            dump.kill()
            text, _ = dump.communicate()
            text += f"(py-spy stopped after {NATIVE_STACKS_TIMEOUT_S:g} s)\n"
        every_one &= dump.returncode == 0
        print(f"cnnbench serve: native stacks of pid {pid} (py-spy dump --native):\n{text.rstrip()}",
              file=sys.stderr, flush=True)
    return every_one
