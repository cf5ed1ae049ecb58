"""The engine process of the multi-process server: it owns the device, batches from the ring, answers.

It builds the engine and today's pipelined batcher (max batch, deadline from the oldest arrival, padding
to a multiple, two batches in flight), warms every batch shape up, then marks the ring ready. Front ends
connect to its Unix SOCK_SEQPACKET socket (an abstract address: nothing on disk to remove) and send one
20-byte descriptor per request (slot, request id, arrival time); the receiver thread copies the slot's
pixels into the batcher's staging buffer (pinned memory on a GPU; the ring itself is not registered with
the driver, as the device never reads it: see docs/serving.md), and when the batch is answered the
batcher's completer thread writes the top-k into the slot and sends the front end a reply (request id,
status, and the error for a failed batch). A front end that goes away is dropped: its requests still in
the batcher are computed and their answers discarded.

Signals: SIGINT and SIGTERM are ignored (Ctrl-C, or a SIGTERM sent to the process group, reaches every
process of the server at once, and the engine must outlive the front ends that still wait for answers);
STOP_SIGNAL, sent by the supervisor once every front end has exited (or by the kernel if the supervisor
dies), drains: every admitted request is launched and answered, then the process exits 0 at once
(:func:`cnnbench.process_exit.leave`: no framework's exit handler may hold a drained engine).
"""

from __future__ import annotations

import selectors
import signal
import socket
import struct
import sys
import threading
import time
from concurrent.futures import Future
from typing import Any

from cnnbench.infer.batcher import Closed, PipelinedBatcher, QueueFull
from cnnbench.process_exit import leave
from cnnbench.serve.config import ServeConfig, apply_switch_interval
from cnnbench.serve.ring import FAILED, READY, STOPPED, Ring, RingLayout, die_with_parent
from cnnbench.serve.stacks import STACKS_SIGNAL, print_stacks_on_signal

STOP_SIGNAL = signal.SIGUSR1
# blocked while a server's child process starts (see frontends.start_holding_signals), until its handlers are in
# (STACKS_SIGNAL too: its default action would kill a child that is still importing)
HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM, STOP_SIGNAL, STACKS_SIGNAL}
DESCRIPTOR = struct.Struct("<IQd")  # slot, request id, arrival (time.perf_counter)
REPLY = struct.Struct("<QH")  # request id, HTTP status; then the error message, UTF-8


class _FrontEnd:
    """One connected front end: replies to it are sent under a lock (the completer and receiver both send)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.lock, self.gone = sock, threading.Lock(), False

    def send(self, request_id: int, status: int, message: str = "") -> None:
        if self.gone:
            return
        try:
            with self.lock:
                self.sock.send(REPLY.pack(request_id, status) + message.encode()[:4000])
        except OSError:
            self.gone = True


class Router:
    """Descriptors in, batcher submissions, replies out."""

    def __init__(self, ring: Ring, batcher: PipelinedBatcher, listener: socket.socket) -> None:
        self.ring, self.batcher, self.listener = ring, batcher, listener
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, None)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            for key, _ in self.selector.select(timeout=0.2):
                if key.data is None:
                    sock, _ = self.listener.accept()
                    self.selector.register(sock, selectors.EVENT_READ, _FrontEnd(sock))
                else:
                    self._receive(key.data)
        for key in list(self.selector.get_map().values()):
            if key.data is not None:
                key.data.gone = True  # the supervisor stops the engine only after every front end
        self.selector.close()

    def _receive(self, front: _FrontEnd) -> None:
        while True:
            try:
                data = front.sock.recv(64, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:  # the front end is gone (exited, or killed)
                front.gone = True
                self.selector.unregister(front.sock)
                front.sock.close()
                return
            slot, request_id, arrived = DESCRIPTOR.unpack(data)
            if slot >= self.ring.layout.slots:
                front.send(request_id, 500, f"slot {slot} is outside the ring")
                continue
            try:
                future = self.batcher.submit(self.ring.pixels[slot], arrived)
            except (QueueFull, Closed) as exc:
                front.send(request_id, 503, str(exc))
                continue
            future.add_done_callback(lambda done, f=front, s=slot, r=request_id: self._answer(done, f, s, r))
        self.ring.set_queue_depth(self.batcher.depth)

    def _answer(self, future: Future, front: _FrontEnd, slot: int, request_id: int) -> None:
        if front.gone:
            return
        error = future.exception()
        if error is not None:
            front.send(request_id, 500, f"{type(error).__name__}: {error}")
            return
        ids, scores = future.result()
        self.ring.class_ids[slot] = ids
        self.ring.scores[slot] = scores
        front.send(request_id, 200)


def engine_main(recipe: Any, layout: RingLayout, address: str, config: ServeConfig) -> None:
    """The engine process's body (a spawn target)."""
    from cnnbench import faults
    from cnnbench.serve.service import warm_up

    for ignored in (signal.SIGINT, signal.SIGTERM):
        signal.signal(ignored, signal.SIG_IGN)
    print_stacks_on_signal()
    stop = threading.Event()
    signal.signal(STOP_SIGNAL, lambda *_: stop.set())
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD_SIGNALS)  # a stop that came while starting fires now
    die_with_parent(STOP_SIGNAL)
    apply_switch_interval(config, "engine process")
    ring = Ring.attach(layout)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(address)
    listener.listen(64)
    try:
        engine = recipe.build()
        batcher = PipelinedBatcher(engine, config.max_batch, config.deadline_ms, config.max_queue,
                                   copy_threads=config.copy_threads)  # resolved by command.serve
        warm_up(batcher, engine, config.max_batch)

        def on_batch(size: int, seconds: float) -> None:
            ring.record_batch(size)
            ring.set_queue_depth(batcher.depth)
            ring.record_engine_times(batcher.launcher_times, time.process_time())  # for the front ends' /metrics

        batcher.on_batch = on_batch  # served batches only, not warm-up ones
        faults.install_on_engine(engine)  # counts served batches too
        ring.set_state(READY, engine.device_name())
    except BaseException as exc:  # noqa: BLE001 - the server must stop, saying why
        message = f"{type(exc).__name__}: {exc}".strip()
        ring.set_state(FAILED, message)
        print(f"cnnbench serve: model failed to load: {message}", file=sys.stderr, flush=True)
        leave(1)
    Router(ring, batcher, listener).run(stop)
    # two lines that place a slow stop: before the first the stop signal was not taken, between them the drain
    began = time.perf_counter()
    print(f"cnnbench serve: engine: stop taken, draining {batcher.depth} waiting requests", file=sys.stderr,
          flush=True)
    faults.hold_drain()
    batcher.close()  # launches and answers whatever is still waiting
    listener.close()
    ring.set_state(STOPPED)
    print(f"cnnbench serve: engine: drained in {time.perf_counter() - began:.2f} s", file=sys.stderr, flush=True)
    leave(0)
