"""Facts stamped on every row: framework versions, git commit, Python, host.

Versions come from installed package metadata, so the launching process learns them without
importing a framework.
"""

from __future__ import annotations

import functools
import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path

from cnnbench.registry import REGISTRY


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _packages(backend: str, strategy: str | None) -> tuple[str, ...]:
    entry = REGISTRY[backend]
    return entry.packages + entry.strategy_packages.get(strategy or "", ())


def backend_versions(backend: str, strategy: str | None = None) -> dict[str, str]:
    """Installed versions of the backend's packages (and its strategy's engine; missing ones left out)."""
    found = {name: package_version(name) for name in _packages(backend, strategy)}
    return {name: version for name, version in found.items() if version}


def backend_version(backend: str, strategy: str | None = None) -> str | None:
    """Version of the framework itself; None when it is not installed.

    Keras strategies name an engine: their version is both, e.g. ``3.15.1 (jax 0.10.2)``, and None
    when either is missing."""
    entry, versions = REGISTRY[backend], backend_versions(backend, strategy)
    if entry.strategy_packages:
        own = versions.get(entry.packages[0])
        engine = entry.strategy_packages.get(strategy or "")
        if own is None or engine is None:
            return own if strategy is None else None
        found = [versions[name] for name in engine if name in versions]
        return f"{own} ({engine[0]} {found[0]})" if found else None
    for name in entry.packages:
        if name in versions and name != "keras":  # tensorflow's version, not keras'
            return versions[name]
    return None


def stack_versions(backend: str, strategy: str | None = None, gpu: bool = False) -> str:
    """``name=version;...`` of the backend's packages; on a GPU run also ``nvidia-driver=...``."""
    text = ";".join(f"{k}={v}" for k, v in sorted(backend_versions(backend, strategy).items()))
    driver = gpu_driver() if gpu else None
    return f"{text};nvidia-driver={driver}" if driver else text


def backend_devices(backend: str, timeout_s: float = 300.0) -> list[str] | None:
    """The devices a backend's framework sees, asked in a process of its own (frameworks never share
    one); None when it could not say (not installed, crashed, timed out)."""
    import json
    import sys

    code = f"import json, {REGISTRY[backend].module} as m; print(json.dumps(m.devices()))"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s,
                              cwd=Path(__file__).resolve().parent.parent)
        return json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
        return None


@functools.cache
def gpu_driver() -> str | None:
    """The NVIDIA driver version (nvidia-smi), None where there is none; asked once per process."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    return lines[0] if done.returncode == 0 and lines else None


@functools.cache
def git_sha() -> str:
    """Commit of the cnnbench checkout that runs, with -dirty when tracked files changed.

    ``CNNBENCH_GIT_SHA`` names it instead, for a copy of a commit's tree whose git history is not the
    tree's (a working tree copied to another machine with an older ``.git``)."""
    given = os.environ.get("CNNBENCH_GIT_SHA", "").strip()
    if given:
        return given
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root,
                             capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return ""
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10)
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return ""


def python_version() -> str:
    return platform.python_version()


def host_name() -> str:
    return socket.gethostname()


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"
