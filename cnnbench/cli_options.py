"""What several `cnnbench` commands share on their command lines: option declarations and their parsing
(each refusal one line naming the option)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from cnnbench.errors import UserError
from cnnbench.registry import BACKEND_NAMES, REGISTRY


def parse_backends(values: list[str] | None) -> tuple[str, ...] | None:
    if not values:
        return None
    names: list[str] = []
    for value in values:
        for name in value.split(","):
            if name == "all":
                names.extend(BACKEND_NAMES)
            elif name in REGISTRY:
                names.append(name)
            else:
                raise UserError(f"--backend: unknown backend {name!r}; expected one of "
                                f"{', '.join(BACKEND_NAMES)} or all")
    return tuple(dict.fromkeys(names))


def parse_devices(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UserError(f"--devices: expected comma-separated integers such as 1,2,4, found {text!r}") from None
    if any(n < 1 for n in counts):
        raise UserError(f"--devices: device counts must be >= 1, found {text!r}")
    return counts


def check_device(device: str | None) -> None:
    if device not in (None, "cpu", "gpu"):
        raise UserError(f"--device: expected cpu or gpu, found {device!r}")


SpecArg = Annotated[Optional[Path], typer.Argument(help="Experiment TOML (default: experiments/quickstart.toml).")]
BackendOpt = Annotated[Optional[list[str]], typer.Option(
    "--backend", "-b", help="Backends to run: a comma-separated list (torch,jax), or the option repeated, or all; "
                            "it replaces the spec's list and may name a backend the spec leaves out.")]
DevicesOpt = Annotated[Optional[str], typer.Option(help="Device counts, e.g. 1,2,4 (overrides the spec).")]
OutOpt = Annotated[Path, typer.Option(help="Results CSV to append to; checked before anything runs (a missing "
                                             "folder is created).")]
DeviceOpt = Annotated[Optional[str], typer.Option(help="cpu or gpu (overrides the spec's device).")]
PeakTflopsOpt = Annotated[Optional[float], typer.Option(help="Device peak TFLOP/s for the mfu column.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Stream worker output.")]
NoReportOpt = Annotated[bool, typer.Option("--no-report", help="Do not regenerate the charts.")]
