"""`cnnbench serve`'s settings: the spec's ``[serve]`` table, each field overridable on the CLI."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from cnnbench.errors import UserError

BATCHING_MODES = ("dynamic", "none")
HTTP_PARSERS = ("auto", "h11", "httptools")
LISTEN_MODES = ("reuseport", "shared")
PIXEL_LIMIT_STATUSES = (413, 400)
IMAGE_TYPES = ("image/jpeg", "image/png", "application/octet-stream")
MAX_FRONTENDS = 32  # the ring's header keeps one row of request counters per front end


def default_frontends(cores: int | None = None) -> int:
    """Front-end processes for a host of ``cores``: none below 4 cores (the engine process and a load
    client on the same host leave no core for a separate front end), else one per two cores beyond the
    engine's two, at most 8. On a 16-core H200 host (7 front ends) raw requests reached the engine's rate from
    4 front ends on and JPEG decoding kept gaining up to 8 (docs/serving.md, `benchmarks/gpu.py serving-sweep`)."""
    cores = cores or os.cpu_count() or 1
    return 0 if cores < 4 else max(1, min(8, (cores - 2) // 2))


@dataclass(frozen=True)
class ServeConfig:
    """What the server does; the limits apply in every front end and in the single-process server."""

    host: str = "127.0.0.1"
    port: int = 8000
    max_batch: int = 32
    deadline_ms: float = 5.0  # a batch is launched when its oldest request has waited this long
    max_queue: int = 256  # requests waiting for the device; past it, 503 with Retry-After
    max_body_bytes: int = 8 * 2**20
    decode_workers: int = 4  # per front end
    copy_threads: int = 0  # threads copying one image into its batch slot; 0: 4 for images >= 1 MiB, else 1
    pad_multiple: int = 8
    top_k: int = 5
    batching: str = "dynamic"
    http: str = "auto"  # uvicorn's HTTP parser: httptools where installed (auto), else the pure-Python h11
    frontends: int = 0  # HTTP front-end processes feeding one engine process; 0: one process does both
    listen: str = "reuseport"  # front ends: a socket each (SO_REUSEPORT) or one shared socket
    header_timeout_s: float = 5.0  # a request head must be complete this long after the connection opened
    body_timeout_s: float = 30.0  # ...and its body this long after its head
    max_header_bytes: int = 32 * 1024  # request line + headers; past it 431
    max_connections: int = 1024  # per front end; past it new connections get 503
    max_pixels: int = 36_000_000  # encoded images larger than this (from their header) are refused
    pixel_limit_status: int = 413
    switch_interval_ms: float = 0.0  # the engine process's GIL switch interval; 0: Python's own (5 ms)
    stop_timeout_s: float = 60.0  # front ends: each stage of a stop waits this long, then stacks and SIGKILL

    def __post_init__(self) -> None:
        for name in ("max_batch", "max_queue", "max_body_bytes", "decode_workers", "pad_multiple", "top_k",
                     "max_header_bytes", "max_connections", "max_pixels"):
            if getattr(self, name) < 1:
                raise UserError(f"serve: {name} must be >= 1, found {getattr(self, name)}")
        if not 0 <= self.copy_threads <= 64:
            raise UserError(f"serve: copy_threads must be 0..64 (0: chosen by image size), found {self.copy_threads}")
        if not 0 <= self.port <= 65535:
            raise UserError(f"serve: port must be 0..65535, found {self.port}")
        for name in ("deadline_ms", "header_timeout_s", "body_timeout_s", "stop_timeout_s"):
            if getattr(self, name) < 0 or (name != "deadline_ms" and getattr(self, name) == 0):
                raise UserError(f"serve: {name} must be > 0, found {getattr(self, name)}")
        if not 0 <= self.switch_interval_ms <= 100:
            raise UserError(f"serve: switch_interval_ms must be 0..100 (0: Python's own), found "
                            f"{self.switch_interval_ms}")
        if not 0 <= self.frontends <= MAX_FRONTENDS:
            raise UserError(f"serve: frontends must be 0..{MAX_FRONTENDS}, found {self.frontends}")
        choices = {"http": HTTP_PARSERS, "batching": BATCHING_MODES, "listen": LISTEN_MODES,
                   "pixel_limit_status": PIXEL_LIMIT_STATUSES}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise UserError(f"serve: {name} must be one of {', '.join(map(str, allowed))}, "
                                f"found {getattr(self, name)!r}")
        if self.frontends and self.batching == "none":
            raise UserError("serve: batching = \"none\" (one forward per request) runs in one process: "
                            "set frontends = 0")

    @property
    def ring_slots_per_frontend(self) -> int:
        """Requests one front end may have in the engine at once: its share of the queue and of the
        batches in flight; past it the front end answers 503 itself."""
        share = -(-(self.max_queue + 3 * self.max_batch) // max(self.frontends, 1))
        return max(share, self.max_batch)


def apply_switch_interval(config: ServeConfig, role: str) -> None:
    """Set this process's GIL switch interval from ``config`` (0 leaves Python's own) and say so on stderr,
    naming the process's ``role`` (the one that runs the engine and its batcher). A thread that wants the GIL
    while another runs Python waits up to one interval for it. An engine whose launch holds the GIL for
    milliseconds would keep the thread receiving requests waiting that long at each hand-over; eager PyTorch
    lets go of it in every operator call, and on a CPU gained nothing from a shorter interval
    (benchmarks/batcher_gil.py, docs/serving.md)."""
    if config.switch_interval_ms:
        sys.setswitchinterval(config.switch_interval_ms / 1000)
        print(f"cnnbench serve: {role}: GIL switch interval {sys.getswitchinterval() * 1000:g} ms", file=sys.stderr,
              flush=True)
