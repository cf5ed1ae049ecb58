"""Shared helpers: run the real `cnnbench` command, write specs, skip GPU tests without a GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def has_gpu() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


# One JAX compilation cache for the whole session (JAX reads these variables at import; every JAX
# process the tests start inherits them): every worker otherwise compiles the same small programs
# again (a model's eager initialisation alone is ~6 s of a smallcnn probe's ~12 s of CPU). The
# compiled code is the same; the folder is new per session, so a fresh clone starts cold. A run whose
# spec names compile_cache_dir uses that folder instead.
JAX_CACHE_VARIABLES = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
                       "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES")


def pytest_configure(config):
    if "JAX_COMPILATION_CACHE_DIR" in os.environ:  # the caller's own cache
        return
    folder = tempfile.mkdtemp(prefix="cnnbench-test-jax-cache-")
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
    config.add_cleanup(lambda: [os.environ.pop(name, None) for name in JAX_CACHE_VARIABLES])
    os.environ.update(dict(zip(JAX_CACHE_VARIABLES, (folder, "0", "-1"))))


def pytest_collection_modifyitems(config, items):
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def run_cli(*args: str, timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    """The real command line, in a fresh process (frameworks never load in the test process)."""
    return subprocess.run([sys.executable, "-m", "cnnbench.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, env={**os.environ, **(env or {})})


def write_spec(folder: Path, text: str, name: str = "spec.toml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


TINY_DIGITS = """
    name = "tiny"
    model = "smallcnn"
    dataset = "digits"
    backends = ["torch"]
    devices = [1]
    device = "cpu"
    per_device_batch = 64
    epochs = 2
    [timing]
    warmup_steps = 2
    windows = 3
    window_steps = 5
"""


@pytest.fixture
def tiny_spec(tmp_path: Path) -> Path:
    return write_spec(tmp_path, TINY_DIGITS)
