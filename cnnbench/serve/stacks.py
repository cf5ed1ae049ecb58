"""Every thread's Python stack on demand: STACKS_SIGNAL (SIGUSR2) to a process of `cnnbench serve` prints
them on its stderr.

faulthandler writes them from the C-level signal handler, so they come even while the process is held in C
code (a lock, a device wait, a compile) where a Python-level handler would never run. The supervisor sends
it to a child that outlives its stop bound, just before SIGKILL, so the log says where that child was held;
an operator may send it to any of the server's processes at any time, as one would run `py-spy dump`.
"""

from __future__ import annotations

import faulthandler
import signal
import sys

STACKS_SIGNAL = signal.SIGUSR2


def print_stacks_on_signal() -> None:
    """From now on STACKS_SIGNAL prints this process's threads' stacks on stderr and the process goes on."""
    faulthandler.register(STACKS_SIGNAL, file=sys.stderr, all_threads=True)
