"""The load generator's HTTP/1.1 client against a minimal asyncio server on 127.0.0.1 (a thread of the
test process), which can answer with a Content-Length or chunked, close after each answer, close idle
connections, or never answer; every load is small and bounded in time."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from cnnbench.serve.loadgen import LoadPlan, _offer_in_process, offer_load

BODIES = [(bytes([i]) * 150_000, {"content-type": "application/octet-stream", "x-tensor-shape": "1"})
          for i in range(3)]
ANSWER = b'{"classes":[1]}'
RESPONSES = {
    "keep-alive": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
    "close": b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
    "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n",
    "idle-close": b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s",
}


class TinyServer:
    """Reads each POST's body whole, then answers as ``mode`` says ("silent": never)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.connections = self.requests = 0
        self.bodies_ok = True  # every body arrived with the length its Content-Length said
        self.loop = asyncio.new_event_loop()
        self.server = self.loop.run_until_complete(asyncio.start_server(self.handle, "127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1/infer"
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    async def next_head(self, reader: asyncio.StreamReader) -> bytes:
        if self.mode == "idle-close":  # like uvicorn's keep-alive timeout, only much shorter
            return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 0.05)
        return await reader.readuntil(b"\r\n\r\n")

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await self.next_head(reader)
                length = int(re.search(rb"content-length: *(\d+)", head, re.IGNORECASE).group(1))
                self.bodies_ok &= head.startswith(b"POST /v1/infer HTTP/1.1\r\n") and len(
                    await reader.readexactly(length)) == 150_000
                self.requests += 1
                if self.mode == "silent":
                    await asyncio.sleep(3600)
                writer.write(RESPONSES[self.mode] % (len(ANSWER), ANSWER))
                await writer.drain()
                if self.mode == "close":
                    break
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def stop(self) -> None:
        async def shut() -> None:
            self.server.close()
            handlers = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
            await self.server.wait_closed()

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@contextlib.contextmanager
def tiny_server(mode: str) -> Iterator[TinyServer]:
    server = TinyServer(mode)
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("mode", ["keep-alive", "chunked", "close", "idle-close"])
def test_every_request_is_answered_200_with_ordered_times(mode):
    with tiny_server(mode) as server:
        plan = LoadPlan(server.url, rate_rps=100, requests=60, max_duration_s=5, timeout_s=5, connections=4, seed=0)
        start, outcomes = _offer_in_process(plan, BODIES)
    assert len(outcomes) == 60 and {status for *_, status in outcomes} == {"200"}
    assert server.requests == 60 and server.bodies_ok
    for scheduled, sent, done, _ in outcomes:
        assert start <= scheduled <= sent < done < scheduled + 5
    assert [s for s, *_ in outcomes] == sorted(s for s, *_ in outcomes)
    if mode in ("keep-alive", "chunked"):
        assert server.connections == 4  # opened before the start, kept for the whole load
    elif mode == "close":
        assert 60 <= server.connections <= 64  # one per request (the four opened ahead included)
    else:
        assert server.connections > 4  # idle ones were closed by the server and reopened


def test_nothing_listening_counts_connection_errors_at_once():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: every connect is refused
        began = time.monotonic()
        result = offer_load(f"http://127.0.0.1:{port}/v1/infer", BODIES, rate_rps=200, requests=40,
                            max_duration_s=5, timeout_s=5, connections=4)
    assert time.monotonic() - began < 5
    assert result.ok == 0 and result.errors == {"connection": 40} and result.achieved_rps == 0.0


def test_a_server_that_never_answers_gives_timeouts_and_fresh_connections():
    with tiny_server("silent") as server:
        began = time.monotonic()
        result = offer_load(server.url, BODIES, rate_rps=50, requests=4, max_duration_s=5, timeout_s=0.3,
                            connections=2)
        assert time.monotonic() - began < 5
    assert result.errors == {"timeout": 4} and result.ok == 0
    assert server.connections >= 4  # each timed-out connection was dropped; the next request opened one


def test_several_processes_start_together():
    with tiny_server("keep-alive") as server:
        result = offer_load(server.url, BODIES, rate_rps=100, requests=60, max_duration_s=5, timeout_s=5,
                            connections=4, processes=2)
    assert result.sent == 60 and result.ok == 60 and server.requests == 60
    # each process opened its connections, then all were given one start: none sends late
    assert result.client_lag_ms_p99 < 200 and 0 < result.achieved_rps < 1000
