"""The load generator's HTTP/1.1 client: persistent connections on asyncio streams, each request's bytes
built once, the answer's status read and its body dropped; loopback targets only.

httpx is not used for the load: its per-request cost made the client the bound (measured: one process
topped out near 400 requests/s of 150 KB bodies on two cores, and lagged 191 ms p99 at 100 requests/s
over six processes on a 16-core host); it still serves the few requests of /healthz, /v1/info and
/metrics (cnnbench.serve.load).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import urllib.parse

from cnnbench.errors import UserError


def check_loopback(url: str) -> str:
    """The base URL (scheme://host:port) of a loopback server; anything else is refused."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme != "http" or not parsed.hostname:
        raise UserError(f"load: expected a URL such as http://127.0.0.1:8000, found {url!r}")
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(parsed.hostname, parsed.port or 80)}
    except OSError as exc:
        raise UserError(f"load: cannot resolve {parsed.hostname!r}: {exc}") from None
    outside = [a for a in addresses if not ipaddress.ip_address(a.split("%")[0]).is_loopback]
    if outside:
        raise UserError(f"load: {parsed.hostname} is not a loopback address ({', '.join(sorted(outside))}); "
                        f"the load generator only targets this machine (127.0.0.1, ::1, localhost)")
    return f"http://{parsed.netloc}"


class ProtocolError(Exception):
    """An answer this client cannot read as HTTP/1.x."""


class Unanswered(ConnectionError):
    """The server closed (or reset) the connection before the first byte of its answer."""


def prebuilt_requests(url: str, bodies: list[tuple[bytes, dict[str, str]]]) -> list[bytes]:
    """Each body as the complete bytes of its POST (head and body), built once: sending a request is
    then one write of bytes that already exist."""
    parsed = urllib.parse.urlsplit(url)
    target = (parsed.path or "/") + (f"?{parsed.query}" if parsed.query else "")
    requests = []
    for body, headers in bodies:
        lines = [f"POST {target} HTTP/1.1", f"Host: {parsed.netloc}", f"Content-Length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in headers.items()
                  if name.lower() not in ("host", "content-length", "connection")]
        requests.append(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
    return requests


async def _skip_chunked(reader: asyncio.StreamReader) -> None:
    """Read past a chunked body and its trailers."""
    while size := int(((await reader.readuntil(b"\r\n")).split(b";", 1)[0]), 16):
        await reader.readexactly(size + 2)  # the chunk and its CRLF
    while await reader.readuntil(b"\r\n") != b"\r\n":
        pass


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """(status, whether the connection stays open) of one answer, its body read and dropped."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            raise Unanswered("closed before answering") from None
        raise
    except ConnectionResetError as exc:  # a server that closes with our request unread resets
        raise Unanswered(str(exc)) from None
    status_line, *lines = head[:-4].decode("latin-1").split("\r\n")
    version, code, *_ = status_line.split(" ", 2)
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise ProtocolError(status_line)
    fields = {}
    for line in lines:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip().lower()
    status = int(code)
    # HTTP/1.1 stays open unless the server says close; HTTP/1.0 closes unless it says keep-alive
    keep = fields.get("connection", "keep-alive" if version == "HTTP/1.1" else "close") != "close"
    if "chunked" in fields.get("transfer-encoding", ""):
        await _skip_chunked(reader)
    elif "content-length" in fields:
        await reader.readexactly(int(fields["content-length"]))
    elif not (100 <= status < 200 or status in (204, 304)):  # a body that runs to the end of the connection
        await reader.read()
        keep = False
    return status, keep


class Connection:
    """One persistent HTTP/1.1 connection, reopened after anything that leaves it unusable."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    def drop(self) -> None:
        """Abort (not close) the socket: after a timeout or error, nothing on it is worth flushing."""
        if self.writer is not None:
            self.writer.transport.abort()
        self.reader = self.writer = None

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
        self.reader = self.writer = None

    async def post(self, request: bytes) -> int:
        """Send ``request``, read its answer; the status."""
        if self.reader is not None and self.reader.at_eof():
            self.drop()  # the server closed it while it was idle (uvicorn's keep-alive timeout is 5 s)
        reused = self.writer is not None
        if not reused:
            await self.open()
        try:
            return await self._exchange(request)
        except Unanswered:
            if not reused:
                raise
            # The server closed this idle connection as the request went out (the keep-alive race
            # every HTTP client meets): it never saw the request; send it once more on a fresh one.
            self.drop()
            await self.open()
            return await self._exchange(request)

    async def _exchange(self, request: bytes) -> int:
        assert self.reader is not None and self.writer is not None
        try:
            self.writer.write(request)
            await self.writer.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise Unanswered(str(exc)) from None
        status, keep = await _read_response(self.reader)
        if not keep:
            self.drop()  # the server said Connection: close; the next request opens a new one
        return status


async def answer(connection: Connection, request: bytes, timeout_s: float) -> str:
    """The status of one request as a string, or timeout / connection / protocol; a connection left
    in an unknown state (part of an answer unread) is dropped, to be reopened by the next request."""
    try:
        async with asyncio.timeout(timeout_s):
            return str(await connection.post(request))
    except TimeoutError:  # before OSError, of which it is a subclass
        connection.drop()
        return "timeout"
    except (OSError, EOFError):  # refused, reset, or the end of the stream mid-answer
        connection.drop()
        return "connection"
    except (ProtocolError, ValueError, asyncio.LimitOverrunError):
        connection.drop()
        return "protocol"
