"""Shared helpers: run the real `cnnbench` command, write specs, skip GPU tests without a GPU."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def has_gpu() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


def pytest_collection_modifyitems(config, items):
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def run_cli(*args: str, timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    """The real command line, in a fresh process (frameworks never load in the test process)."""
    import os

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
