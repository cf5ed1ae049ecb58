"""A plain peer and the matching cnnbench run, in one invocation: is cnnbench as fast as plain code?

``benchmarks/plain_peers/`` holds the loops a skilled user writes without cnnbench, timed with the same
window protocol. A pair runs the peer, then cnnbench on a copy of a spec with the pair's fields set, and
appends the peer's JSON line to the peers file with the commit and the run id of cnnbench's row, so
that the tables put the two halves of one invocation side by side.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runbook import sidefile
from runbook.steps import BENCHMARKS, SMOKE_TRAIN, Context

PEERS = BENCHMARKS / "plain_peers"
TRAIN_SPEC = "experiments/resnet50_synthetic.toml"
PEERS_FILE = "h200_perf_peers.jsonl"
PERF_ROWS = "h200_perf.csv"

# SMOKE: the peers' own tiny CPU configurations
SMOKE_PEER = {"torch_resnet50.py": ("--device", "cpu", "--arch", "tiny", "--image-size", "16", "--batch", "4",
                                    "--optimizer", "foreach"),
              "torch_resnet50_infer.py": ("--device", "cpu", "--arch", "tiny", "--image-size", "16", "--batch", "4"),
              "jax_resnet50.py": ("--image-size", "16", "--batch", "2", "--tiny"),
              "jax_resnet50_infer.py": ("--image-size", "16", "--batch", "2", "--tiny")}


@dataclass(frozen=True)
class Pair:
    label: str
    peer: tuple[str, ...]                       # script and arguments under plain_peers/
    changes: dict[str, Any] = field(default_factory=dict)  # to resnet50_synthetic.toml
    limit_s: float = 150.0                      # each half's own limit on the H200, warm caches


COMPILED = {"compile": True, "backends": ["torch"]}
PAIRS: dict[str, Pair] = {
    "eager": Pair("PyTorch eager", ("torch_resnet50.py",), {"backends": ["torch"]}, 90),
    "model": Pair("PyTorch compiled, model only", ("torch_resnet50.py", "--compile", "model"),
                  {**COMPILED, "torch.compile_scope": "model"}),
    "step": Pair("PyTorch compiled, whole step", ("torch_resnet50.py", "--compile", "step"),
                 {**COMPILED, "torch.compile_scope": "step"}),
    "step-cudagraphs": Pair("PyTorch compiled, whole step, CUDA graphs (reduce-overhead)",
                            ("torch_resnet50.py", "--compile", "step", "--mode", "reduce-overhead"),
                            {**COMPILED, "torch.compile_scope": "step", "torch.compile_mode": "reduce-overhead"}, 240),
    "jax": Pair("JAX sharded", ("jax_resnet50.py",), {"backends": ["jax"]}, 90),
    "jax-b512": Pair("JAX sharded, batch 512", ("jax_resnet50.py", "--batch", "512"),
                     {"backends": ["jax"], "per_device_batch": 512}, 100),
}


def read_rows(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open() as handle:
        return list(csv.DictReader(handle))


def peer(ctx: Context, pair: str, args: tuple[str, ...], limit_s: float, peers_file: str = PEERS_FILE,
         **link: Any) -> dict | None:
    """Run one plain peer; its result line, stamped, appended to the peers file (None if it gave none)."""
    script, *rest = args
    if ctx.smoke:  # the peer's own tiny configuration, its batch included
        batch_at = rest.index("--batch") if "--batch" in rest else len(rest)
        rest = rest[:batch_at] + rest[batch_at + 2:] + list(SMOKE_PEER[script])
    step = ctx.run(f"{pair} peer", [ctx.python, PEERS / script, *rest], limit_s, cwd=PEERS)
    lines = [line for line in (step.output if step else "").splitlines() if line.startswith("{")]
    if not step or not step.ok or not lines:
        return None
    record = {"pair": pair, **json.loads(lines[-1]), **link}
    sidefile.append(ctx.out / peers_file, [record])
    return record


def cnnbench_row(ctx: Context, name: str, command: str, spec: Path, rows: str, limit_s: float,
                 *args: str) -> dict | None:
    """Run cnnbench; the last row this call appended (None if none)."""
    before = len(read_rows(ctx.out / rows))
    ctx.cnnbench(name, command, spec, rows, limit_s, *args)
    new = read_rows(ctx.out / rows)[before:]
    return new[-1] if new else None


def compare(ctx: Context, group: str, label: str, cnnbench_step: str, spec: Path, rows: str,
            cnnbench_limit_s: float, pair: str, peer_args: tuple[str, ...], peer_limit_s: float) -> None:
    """cnnbench first, then the plain peer (linked to cnnbench's row), as one group of steps: both halves
    or neither (Context.run_group); the ratio said when both gave a number."""

    def both_halves() -> None:
        row = cnnbench_row(ctx, cnnbench_step, "run", spec, rows, cnnbench_limit_s)
        found = peer(ctx, pair, peer_args, peer_limit_s, cnnbench_run_id=row["run_id"] if row else None)
        if row and found and row.get("status") == "ok":
            ratio = float(row["images_per_sec"]) / found["images_per_sec"]
            ctx.say(f"{label}: cnnbench {float(row['images_per_sec']):,.0f} img/s, peer "
                    f"{found['images_per_sec']:,.0f} img/s, ratio {ratio:.3f}")

    ctx.run_group(group, (cnnbench_step, f"{pair} peer"), both_halves)


def run_pair(ctx: Context, name: str, rows: str = PERF_ROWS) -> None:
    """One of PAIRS: the spec with the pair's fields, each half under the pair's limit."""
    pair = PAIRS[name]
    smoke = {**SMOKE_TRAIN, **({"per_device_batch": 8} if "per_device_batch" in pair.changes else {})}
    spec = ctx.spec(TRAIN_SPEC, f"compare_{name}", {"jax.strategies": ["sharded"], "timeout_s": pair.limit_s,
                                                   **pair.changes}, smoke)
    compare(ctx, name, pair.label, f"{name} cnnbench", spec, rows, pair.limit_s + 20, name, pair.peer, pair.limit_s)
