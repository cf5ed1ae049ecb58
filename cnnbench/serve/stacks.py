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

STACKS_SIGNAL = signal.SIGUSR2


def print_stacks_on_signal() -> None:
    """From now on STACKS_SIGNAL prints this process's threads' stacks on stderr and the process goes on."""
    faulthandler.register(STACKS_SIGNAL, file=sys.stderr, all_threads=True)


NATIVE_STACKS_TIMEOUT_S = 30.0  # unwinding every thread of a process with CUDA's libraries loaded takes seconds


def print_native_stacks(pid: int) -> bool:
    """``py-spy dump --native`` of ``pid`` on this process's stderr, if py-spy is installed (it reads the
    process through ptrace: root, or a ptrace scope that allows it); False when it is not or it failed."""
    py_spy = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))  # a venv's
    if py_spy is None:
        return False
    print(f"cnnbench serve: native stacks of pid {pid} (py-spy dump --native):", file=sys.stderr, flush=True)
    try:
        done = subprocess.run([py_spy, "dump", "--native", "--pid", str(pid)], stdout=sys.stderr, stderr=sys.stderr,
                              timeout=NATIVE_STACKS_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"cnnbench serve: py-spy dump of pid {pid} failed: {exc}", file=sys.stderr, flush=True)
        return False
    return done.returncode == 0
