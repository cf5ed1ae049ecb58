"""The multi-process server's supervisor: it creates the ring, starts the engine process and the front
ends, restarts a front end that dies, and stops everything in order.

- A front end that dies (killed, crashed) is restarted with the same share of the ring; the others keep
  serving (with SO_REUSEPORT the kernel stops routing connections to a closed socket). Five deaths within
  a minute stop the server (exit 1): a front end that cannot live is a bug, not bad luck.
- The engine dying stops the server with exit 1 (it is not restarted: a model that crashed the process
  may well crash it again, and reloading it takes the warm-up again; an orchestrator restarting the whole
  server is the better judge). Until the front ends have stopped, each answers 503.
- SIGTERM or SIGINT (Ctrl-C reaches every process of the group; the children ignore SIGINT, the engine
  SIGTERM too) stops accepting: the front ends all get SIGTERM at once and answer everything in progress,
  then the engine gets STOP_SIGNAL and drains its batcher; exit 0. Each of the two waits is bounded
  (`stop_timeout_s`, 60 s by default), and one log line says how long each took. A process still running
  at the bound first gets STACKS_SIGNAL, which prints its threads' stacks into the log, then SIGKILL: a
  held engine says where it was held.
- A child starts with these signals blocked and unblocks them once its own handlers are in place, so a
  stop that comes while it is still importing (a busy host) waits for them instead of killing it with
  the default action, which would turn a clean stop into exit 1.
- The ring is removed on every way out of :meth:`Supervisor.run`; if the supervisor itself is killed,
  its children get SIGTERM from the kernel and Python's resource tracker removes the segment.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
from collections import deque
from typing import Any

from cnnbench.serve.config import ServeConfig
from cnnbench.serve.engine_process import HELD_SIGNALS, STOP_SIGNAL, engine_main
from cnnbench.serve.frontend import frontend_main, listening_socket
from cnnbench.serve.metrics import batch_size_buckets
from cnnbench.serve.ring import FAILED, READY, Ring
from cnnbench.serve.stacks import STACKS_SIGNAL, print_native_stacks

RESTARTS_PER_MINUTE = 5
STACKS_WAIT_S = 2.0  # for a held process to print its stacks before SIGKILL


class Supervisor:
    def __init__(self, config: ServeConfig, recipe: Any, info: dict[str, Any]) -> None:
        self.config, self.recipe, self.info = config, recipe, info
        self.context = multiprocessing.get_context("spawn")  # children start clean: no inherited threads or locks
        self.stopping = False
        self.deaths: deque[float] = deque()

    def run(self) -> int:
        config = self.config
        ring = Ring.create(config.frontends * config.ring_slots_per_frontend, tuple(self.info["image_shape"]),
                           self.info["top_k"], batch_size_buckets(config.max_batch))
        self.ring, self.address = ring, f"\0{ring.layout.name}"  # an abstract Unix address: no file
        self.engine: Any = None
        self.frontends: list[Any] = []
        try:
            return self._serve()
        finally:
            self._stop_all()
            ring.close()
            ring.unlink()

    def _serve(self) -> int:
        config = self.config
        # reuseport: a bound socket that never listens holds the port (port 0 resolves here) for the
        # front ends' own sockets, restarted ones included; shared: the one listening socket they all take.
        shared = config.listen == "shared"
        self.socket = listening_socket(config.host, config.port, reuse_port=not shared, backlog=2048 if shared else 0)
        self.info["port"] = self.socket.getsockname()[1]
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: setattr(self, "stopping", True))
        self.engine = self.context.Process(target=engine_main, name="cnnbench-engine",
                                           args=(self.recipe, self.ring.layout, self.address, config))
        start_holding_signals(self.engine)
        self.frontends = [self._start_frontend(i) for i in range(config.frontends)]
        announced = False
        while not self.stopping:
            sentinels = [self.engine.sentinel] + [p.sentinel for p in self.frontends]
            multiprocessing.connection.wait(sentinels, timeout=0.2)
            if self.stopping:
                break
            if not self.engine.is_alive():
                state = self.ring.state
                why = self.ring.message() if state == FAILED else f"exit code {self.engine.exitcode}"
                print(f"cnnbench serve: the engine process stopped ({why}); stopping the server",
                      file=sys.stderr, flush=True)
                return 1
            if not announced and self.ring.state == READY:
                announced = True
                self._announce()
            for index, process in enumerate(self.frontends):
                if not process.is_alive():
                    if not self._may_restart(index, process.exitcode):
                        return 1
                    self.frontends[index] = self._start_frontend(index)
        return 0 if self._drain() else 1

    def _start_frontend(self, index: int) -> Any:
        shared = self.socket if self.config.listen == "shared" else None
        process = self.context.Process(target=frontend_main, name=f"cnnbench-frontend-{index}",
                                       args=(index, self.config, self.ring.layout, self.address, self.info, shared))
        start_holding_signals(process)
        return process

    def _may_restart(self, index: int, exitcode: int | None) -> bool:
        now = time.monotonic()
        self.deaths.append(now)
        while self.deaths and self.deaths[0] < now - 60:
            self.deaths.popleft()
        if len(self.deaths) > RESTARTS_PER_MINUTE:
            print(f"cnnbench serve: front end {index} died (exit code {exitcode}), {len(self.deaths)} deaths "
                  f"within a minute; stopping the server", file=sys.stderr, flush=True)
            return False
        print(f"cnnbench serve: front end {index} died (exit code {exitcode}); restarting it",
              file=sys.stderr, flush=True)
        return True

    def _announce(self) -> None:
        row = self.info["row"]
        print(f"cnnbench serve: ready on http://{self.config.host}:{self.info['port']} ({row['backend']} "
              f"{row['model']}, {self.ring.message()}, {self.config.frontends} front ends, one engine process, "
              f"listen {self.config.listen})", file=sys.stderr, flush=True)

    def _drain(self) -> bool:
        """Front ends first (they answer what is in progress, which needs the engine), then the engine;
        True when every process exited 0."""
        began = time.monotonic()
        wait_s = self.config.stop_timeout_s
        clean = _terminate_all(self.frontends, wait_s)  # together: the slowest one's time, not the sum
        frontends_s = time.monotonic() - began
        if self.engine is not None:
            clean &= _terminate_all([self.engine], wait_s, STOP_SIGNAL)
        # one line that says where a slow stop spent its time (an orchestrator's grace period is finite)
        codes = ", ".join(str(p.exitcode) for p in self.frontends)
        engine_code = self.engine.exitcode if self.engine is not None else None
        print(f"cnnbench serve: stopped: front ends in {frontends_s:.1f} s (exit codes {codes}), engine drained "
              f"in {time.monotonic() - began - frontends_s:.1f} s (exit code {engine_code})",
              file=sys.stderr, flush=True)
        return clean

    def _stop_all(self) -> None:
        """Whatever is still running after an error: SIGTERM, a bounded wait, SIGKILL."""
        _terminate_all(self.frontends, self.config.stop_timeout_s)
        if self.engine is not None:
            _terminate_all([self.engine], self.config.stop_timeout_s, STOP_SIGNAL)


def start_holding_signals(process: Any) -> None:
    """Start ``process`` with HELD_SIGNALS blocked, which it inherits through fork and exec; the child
    unblocks them after installing its handlers (engine_main, frontend_main). The supervisor blocks them
    for the few milliseconds of the start only: one that comes meanwhile is delivered on unblocking."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
    try:
        process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _terminate_all(processes: list[Any], wait_s: float, sig: int = signal.SIGTERM) -> bool:
    """``sig`` to each, wait for all of them (``wait_s`` in all); each one still running then prints its
    threads' stacks (STACKS_SIGNAL) and is killed. True when every one exited 0."""
    for process in processes:
        if process.is_alive():
            os.kill(process.pid, sig)
    deadline = time.monotonic() + wait_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    held = [process for process in processes if process.is_alive()]
    for process in held:
        print(f"cnnbench serve: {process.name} (pid {process.pid}) still running {wait_s:g} s after its stop "
              f"signal; its threads' stacks follow, then SIGKILL", file=sys.stderr, flush=True)
        os.kill(process.pid, STACKS_SIGNAL)
    stacks_by = time.monotonic() + STACKS_WAIT_S
    for process in held:  # the stacks are written by the signal handler; it does not exit
        process.join(max(0.0, stacks_by - time.monotonic()))
    print_native_stacks([process.pid for process in held])  # what a held call waits for below Python (py-spy)
    for process in held:
        process.kill()
        process.join(10)
    return all(process.exitcode == 0 for process in processes)
