"""One front-end process of the multi-process server: the same HTTP app as the single-process server,
over :class:`RingService`, which hands each decoded image to the engine process through the ring.

A request is parsed, validated and decoded here (decode threads, as in the single-process server); its
pixels go straight into a free slot of this front end's share of the ring, and a 20-byte descriptor goes
to the engine over a Unix socket whose replies the event loop reads as they come. When the engine's
socket closes (the engine died) every waiting and every later request is answered 503 until the
supervisor stops this process. SIGINT is ignored (the supervisor orders the shutdown); SIGTERM stops
accepting and answers what is in progress. Both come blocked from the supervisor: SIGTERM stays blocked
until the HTTP server's handler is in place (``run_server``), so a stop sent while this process is still
starting is answered by a clean stop, not by death. Once stopped it ignores SIGTERM: one sent to the
whole process group (a service manager's stop) reaches it twice, from the sender and from the supervisor.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from cnnbench.infer.batcher import QueueFull
from cnnbench.serve.answers import Unavailable
from cnnbench.serve.config import ServeConfig
from cnnbench.serve.engine_process import DESCRIPTOR, REPLY
from cnnbench.serve.metrics import ServerMetrics
from cnnbench.serve.ring import FAILED, READY, Ring, RingLayout, die_with_parent
from cnnbench.serve.stacks import STACKS_SIGNAL, print_stacks_on_signal


class EngineError(RuntimeError):
    """The engine's model call failed for this request's batch (the message is the engine's)."""


class _Readiness:
    def __init__(self, service: RingService) -> None:
        self.service = service

    def is_set(self) -> bool:
        s = self.service
        return s.sock is not None and not s.engine_gone and s.ring.state == READY


class RingService:
    """The interface of InferenceService, served by the engine process through the ring."""

    def __init__(self, index: int, config: ServeConfig, ring: Ring, address: str, info: dict[str, Any]) -> None:
        self.index, self.config, self.ring, self.address, self._info = index, config, ring, address, info
        per = config.ring_slots_per_frontend
        self.free = list(range(index * per, (index + 1) * per))[::-1]  # LIFO: few slots' pages are touched
        self.pending: dict[int, tuple[asyncio.Future, int]] = {}
        self.admitting = 0  # requests being decoded, each sure of a slot (answers.admitted)
        self.ids = itertools.count()
        self.sock: socket.socket | None = None
        self.engine_gone = False
        self.pool = ThreadPoolExecutor(config.decode_workers, thread_name_prefix="decode")
        self.ready = _Readiness(self)
        self.metrics = ServerMetrics(config.max_batch, lambda: 0.0, shared=ring, frontend=index)
        self.on_failure = lambda: None
        info["frontend"] = {"index": index, "pid": os.getpid()}

    @property
    def info(self) -> dict[str, Any]:
        """/v1/info: the server's configuration, with the engine's card once the engine has written it into
        the ring (at ready), so that rows name the card as the single-process server's do."""
        if "device_name" not in self._info and self.ring.state == READY:
            self._info["device_name"] = self._info["row"]["device_name"] = self.ring.message()
        return self._info

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return self.ring.layout.image_shape

    @property
    def failure(self) -> str | None:
        if self.engine_gone:
            return "the engine process has stopped"
        return self.ring.message() if self.ring.state == FAILED else None

    def start(self) -> None:
        """Connect to the engine's socket (it makes it first thing; allow for its start-up)."""
        deadline = time.monotonic() + 60
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                sock.connect(self.address)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        sock.setblocking(False)
        self.sock = sock
        asyncio.get_running_loop().add_reader(sock, self._on_replies)

    def close(self) -> None:
        self.pool.shutdown(wait=True)

    def refusal(self, decoding: int) -> str | None:
        """Why this front end cannot take one more request beside ``decoding`` ones being decoded (each sure
        of one of its free ring slots), or None (answers.admitted)."""
        if len(self.free) > decoding:
            return None
        return (f"{len(self.pending)} requests of this front end are in the engine and {decoding} being decoded "
                f"(its {self.config.ring_slots_per_frontend} ring slots)")

    async def infer(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not self.ready.is_set():
            raise Unavailable(self.failure or "the engine is not ready")
        if not self.free:
            raise QueueFull(f"{len(self.pending)} requests of this front end are in the engine "
                            f"(its {self.config.ring_slots_per_frontend} ring slots)")
        slot = self.free.pop()
        self.ring.pixels[slot] = image
        request_id = next(self.ids)
        done = asyncio.get_running_loop().create_future()
        self.pending[request_id] = (done, slot)
        try:
            await asyncio.get_running_loop().sock_sendall(self.sock, DESCRIPTOR.pack(slot, request_id,
                                                                                       time.perf_counter()))
        except OSError:
            self._engine_gone()
        return await done

    def _on_replies(self) -> None:
        while True:
            try:
                data = self.sock.recv(4096)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._engine_gone()
                return
            request_id, status = REPLY.unpack_from(data)
            future, slot = self.pending.pop(request_id)
            if status == 200:
                result = (self.ring.class_ids[slot].copy(), self.ring.scores[slot].copy())
            self.free.append(slot)
            if future.done():
                continue
            if status == 200:
                future.set_result(result)
            elif status == 503:
                future.set_exception(QueueFull(data[REPLY.size:].decode(errors="replace")))
            else:
                future.set_exception(EngineError(data[REPLY.size:].decode(errors="replace")))

    def _engine_gone(self) -> None:
        if self.engine_gone:
            return
        self.engine_gone = True
        asyncio.get_running_loop().remove_reader(self.sock)
        for future, slot in self.pending.values():
            self.free.append(slot)
            if not future.done():
                future.set_exception(Unavailable("the engine process has stopped"))
        self.pending.clear()
        print(f"cnnbench serve: front end {self.index}: the engine process has stopped; answering 503",
              file=sys.stderr, flush=True)


def listening_socket(host: str, port: int, reuse_port: bool, backlog: int = 2048) -> socket.socket:
    """A TCP socket bound to host:port; with ``reuse_port``, one of several bound to the same port, among
    which the kernel spreads new connections."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    if backlog:
        sock.listen(backlog)
    return sock


def frontend_main(index: int, config: ServeConfig, layout: RingLayout, address: str, info: dict[str, Any],
                  shared_socket: socket.socket | None) -> None:
    """A front-end process's body (a spawn target)."""
    from cnnbench import faults
    from cnnbench.serve.app import run_server

    faults.delay_frontend(index, "slow_start")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print_stacks_on_signal()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, STACKS_SIGNAL})  # SIGTERM: once run_server handles it
    die_with_parent()
    sock = shared_socket or listening_socket(config.host, info["port"], reuse_port=True)
    ring = Ring.attach(layout)
    service = RingService(index, config, ring, address, info)
    code = run_server(service, sockets=[sock], stop_signals=(signal.SIGTERM,))
    faults.delay_frontend(index, "slow_exit")
    sys.exit(code)
