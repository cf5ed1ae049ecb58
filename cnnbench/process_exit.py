"""How a process ends once its work is done: at once, without the exit handlers of the libraries it loaded.

Two users, each at a point where everything it owes has been written or answered:
- A stopped server. On an H100 (2026-12-06) the first engine process of each compiled 1080p benchmark,
  having answered everything, was still alive at the supervisor's 60 s bound and was killed, so a server
  that had drained cleanly exited 1. The likely holder (not confirmed) is PyTorch inductor's exit handler,
  which waits up to 300 s for its compile-worker pool after a cold compile (`subprocess.wait(300)` in its
  SubprocPool; pytorch/pytorch#162199). Those compile workers watch their parent and end themselves within
  a minute of its exit (inductor's watchdog), so nothing is left behind for good.
- A training worker whose trainer sets ``leaves_at_once`` (PyTorch: a finished rank could abort in the
  C++ exit-time destructors of its process group; see backends/torch/train.py), after close() and its
  result file.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def leave(code: int) -> NoReturn:
    """Flush what this process printed, then exit with ``code`` now (``os._exit``)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing more can be said on it
            pass
    os._exit(code)
