"""What a hostile client cannot do to a front end: hold a connection open, send huge headers, stall a
body, or send an image that decodes to gigabytes.

- :func:`guarded_protocol` wraps uvicorn's HTTP protocol class (httptools or h11): a connection must
  deliver a complete request head within ``header_timeout_s`` of opening or of its previous answer
  (so idle and half-sent connections are closed: 408 if part of a head came), a head over
  ``max_header_bytes`` gets 431 and the connection is closed, and past ``max_connections`` open
  connections a new one gets 503 and is closed. Counting happens before the parser sees the bytes.
- :func:`read_body` reads a body within ``body_timeout_s`` of its head (a Content-Length larger than
  the body would otherwise hold the connection for ever) and under ``max_body_bytes``.
- :func:`image_pixels` reads the size of a JPEG or PNG from its header, so an image over
  ``max_pixels`` is refused before it is decoded.
"""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

from cnnbench.serve.config import ServeConfig


class RequestRefused(Exception):
    """A request the server answers with ``status`` and a one-line error, closing the connection."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ClientGone(Exception):
    """The client closed the connection before its body had arrived."""


def _raw_answer(status: int, reason: str, message: str) -> bytes:
    body = json.dumps({"error": message}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"connection: close\r\n\r\n").encode("latin-1") + body


def guarded_protocol(base: type, config: ServeConfig) -> type:
    """A subclass of uvicorn's ``base`` protocol class with the head limits of ``config``."""
    limit, timeout, max_connections = config.max_header_bytes, config.header_timeout_s, config.max_connections

    class Guarded(base):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._head_bytes, self._tail, self._in_head = 0, b"", True
            self._head_timer = self.loop.call_later(timeout, self._head_timed_out)
            if len(self.connections) > max_connections:
                self._refuse(503, "Service Unavailable",
                             f"{max_connections} connections are open (max_connections); try again")

        def data_received(self, data: bytes) -> None:
            if self._in_head and not self.transport.is_closing():
                seen = self._tail + data
                end = seen.find(b"\r\n\r\n")
                if end < 0:
                    self._head_bytes += len(data)
                    self._tail = seen[-3:]
                else:  # the head ends in this chunk: what follows is body
                    self._head_bytes += end + 4 - len(self._tail)
                    self._in_head, self._tail = False, b""
                    self._head_timer.cancel()
                if self._head_bytes > limit:
                    self._refuse(431, "Request Header Fields Too Large",
                                 f"request head over {limit} bytes (max_header_bytes)")
                    return
            super().data_received(data)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():  # the next request's head starts its own clock
                self._head_bytes, self._tail, self._in_head = 0, b"", True
                self._head_timer.cancel()
                self._head_timer = self.loop.call_later(timeout, self._head_timed_out)

        def connection_lost(self, exc: Exception | None) -> None:
            self._head_timer.cancel()
            super().connection_lost(exc)

        def _head_timed_out(self) -> None:
            if self._in_head and not self.transport.is_closing():
                if self._head_bytes:
                    self._refuse(408, "Request Timeout",
                                 f"request head not complete after {timeout:g} s (header_timeout_s)")
                else:
                    self.transport.close()  # idle: nothing to answer

        def _refuse(self, status: int, reason: str, message: str) -> None:
            self._in_head = False
            self._head_timer.cancel()
            self.transport.write(_raw_answer(status, reason, message))
            self.transport.close()

    Guarded.__name__ = f"Guarded{base.__name__}"
    return Guarded


async def read_body(request: Any, config: ServeConfig) -> bytes:
    """The whole body, within ``body_timeout_s`` and under ``max_body_bytes``; raises RequestRefused
    (408, 413) or ClientGone."""
    from starlette.requests import ClientDisconnect

    limit = config.max_body_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise RequestRefused(413, f"body of {int(declared)} bytes is over the limit of {limit} (max_body_bytes)")
    parts, size = [], 0
    try:
        async with asyncio.timeout(config.body_timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise RequestRefused(413, f"body is over the limit of {limit} bytes (max_body_bytes)")
                parts.append(chunk)
    except TimeoutError:
        raise RequestRefused(408, f"body not complete after {config.body_timeout_s:g} s: {size} bytes came of "
                                  f"{declared or 'an unknown length'} (body_timeout_s)") from None
    except ClientDisconnect:
        raise ClientGone() from None
    return b"".join(parts)


# JPEG start-of-frame markers carry the size; C4 (Huffman tables), C8 and CC (arithmetic coding) do not
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def image_pixels(data: bytes) -> int | None:
    """Width x height of a PNG or JPEG from its header (no decoding); None when the header does not say."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24 and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return width * height
    if data[:2] != b"\xff\xd8":
        return None
    at = 2
    while at + 9 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2:at + 4])
        if marker in _SOF_MARKERS:
            height, width = struct.unpack(">HH", data[at + 5:at + 9])
            return width * height
        at += 2 + length
    return None


def check_pixels(data: bytes, config: ServeConfig) -> None:
    """Refuse an encoded image whose header says it has more than ``max_pixels`` pixels."""
    pixels = image_pixels(data)
    if pixels is not None and pixels > config.max_pixels:
        raise RequestRefused(config.pixel_limit_status, f"image of {pixels:,} pixels is over the limit of "
                                                        f"{config.max_pixels:,} (max_pixels)")
