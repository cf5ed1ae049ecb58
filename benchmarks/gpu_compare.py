"""On one GPU, in one invocation: each plain peer and the matching cnnbench run (ResNet-50, bf16,
synthetic data resident on the GPU), then a table of peer img/s, cnnbench img/s, their ratio and
first-step times. Each pair's line is printed as soon as it is measured; the peers' results are
appended to OUT_DIR/peers.jsonl, cnnbench's rows to OUT_DIR/ROWS (default h200_resnet50.csv), the
table to OUT_DIR/gpu_compare.md.

Pairs (the optional second argument picks some, comma-separated, in that order):
  eager            PyTorch eager (batch 256)
  model            PyTorch compiled, the model's forward only (`[torch] compile_scope = "model"`)
  step             PyTorch compiled, the whole training step (`compile_scope = "step"`, the default)
  step-cudagraphs  the whole step with `compile_mode = "reduce-overhead"` (CUDA graphs)
  jax              JAX sharded against a plain Flax loop (batch 256)
  jax-b512         the same at batch 512
  resnet18         cnnbench's resnet18_cifar at batch 512 (no peer)
`torch` stands for eager,model,step; the default is eager,model,step,jax.

python benchmarks/gpu_compare.py OUT_DIR [PAIRS] [ROWS]
SMOKE=1 runs every pair in a tiny CPU configuration (a check of the code paths, not a benchmark).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spec_variant import write_variant  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PEERS = Path(__file__).resolve().parent / "plain_peers"
SPEC = ROOT / "experiments" / "resnet50_synthetic.toml"
SMOKE = os.environ.get("SMOKE") == "1"

COMPILED = {"compile": True, "backends": ["torch"]}
# name -> (label, peer command, changes to the cnnbench spec)
PAIRS: dict[str, tuple[str, tuple[str, ...], dict[str, Any]]] = {
    "eager": ("PyTorch eager", ("torch_resnet50.py",), {"backends": ["torch"]}),
    "model": ("PyTorch compiled, model only", ("torch_resnet50.py", "--compile", "model"),
              {**COMPILED, "torch.compile_scope": "model"}),
    "step": ("PyTorch compiled, whole step", ("torch_resnet50.py", "--compile", "step"),
             {**COMPILED, "torch.compile_scope": "step"}),
    "step-cudagraphs": ("PyTorch compiled, whole step, reduce-overhead (CUDA graphs)",
                        ("torch_resnet50.py", "--compile", "step", "--mode", "reduce-overhead"),
                        {**COMPILED, "torch.compile_scope": "step", "torch.compile_mode": "reduce-overhead"}),
    "jax": ("JAX sharded", ("jax_resnet50.py",), {"backends": ["jax"]}),
    "jax-b512": ("JAX sharded, batch 512", ("jax_resnet50.py", "--batch", "512"),
                 {"backends": ["jax"], "per_device_batch": 512}),
}
# SMOKE: tiny sizes on the CPU, for the peers and for cnnbench
SMOKE_PEER = {"torch_resnet50.py": ("--device", "cpu", "--arch", "tiny", "--image-size", "16", "--batch", "4",
                                    "--optimizer", "foreach"),
              "jax_resnet50.py": ("--image-size", "32", "--batch", "2")}
SMOKE_SPEC = {"device": "cpu", "model": "smallcnn", "image_size": 16, "channels": 3, "num_classes": 10,
              "per_device_batch": 4, "timing.warmup_steps": 1, "timing.windows": 2, "timing.window_steps": 2,
              "timeout_s": 400}


def peer(script: str, *args: str) -> dict:
    if SMOKE:
        args = tuple(a for a in args if a not in ("--batch", "512")) + SMOKE_PEER[script]
    done = subprocess.run([sys.executable, str(PEERS / script), *args], capture_output=True, text=True, cwd=PEERS)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {"peer": f"{script} {' '.join(args)}", "error": done.stderr[-500:]}
    return json.loads(lines[-1])


def cnnbench(spec: str | Path, out: Path, *args: str, strategy: str | None = None) -> dict:
    """Run a spec on one device; the row of the given strategy that this call appended."""
    before = _rows(out)
    # cnnbench's own progress goes to stderr: stdout is the table
    subprocess.run([sys.executable, "-m", "cnnbench.cli", "run", str(spec), "--devices", "1", "--out", str(out),
                    "--no-report", *args], cwd=ROOT, stdout=sys.stderr)
    new = _rows(out)[len(before):]
    chosen = [r for r in new if strategy in (None, r["strategy"])]
    return chosen[-1] if chosen else {"status": "missing"}


def _rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as handle:
        return list(csv.DictReader(handle))


HEADER = ["| configuration | peer img/s | cnnbench img/s | cnnbench / peer | peer first step s | "
          "cnnbench first step s |", "|---|---:|---:|---:|---:|---:|"]


def table_line(name: str, p: dict, c: dict) -> str:
    if "error" in p or c.get("status") != "ok":
        return (f"| {name} | {p.get('error', '')[-80:]!r} | {c.get('status')} {c.get('error', '')[-80:]!r} "
                f"| | | |")
    ips = float(c["images_per_sec"])
    return (f"| {name} | {p['images_per_sec']:,.0f} | {ips:,.0f} | {ips / p['images_per_sec']:.3f} | "
            f"{p['first_step_s']:.1f} | {float(c['first_step_s']):.1f} |")


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    chosen = (sys.argv[2] if len(sys.argv) > 2 else "eager,model,step,jax").replace("torch", "eager,model,step")
    rows_file = out / (sys.argv[3] if len(sys.argv) > 3 else "h200_resnet50.csv")
    names = [n for n in chosen.split(",") if n]
    unknown = sorted(set(names) - set(PAIRS) - {"resnet18"})
    if unknown:
        sys.exit(f"gpu_compare.py: unknown pair {unknown[0]}; expected some of {', '.join(PAIRS)}, resnet18")
    specs = Path(tempfile.mkdtemp(prefix="gpu_compare_"))  # OUT_DIR holds results only
    lines = list(HEADER)
    print("\n".join(HEADER), flush=True)
    for name in names:
        if name == "resnet18":
            cnnbench("experiments/resnet18_synthetic.toml", out / "h200_resnet18.csv", "-b", "torch,jax")
            continue
        label, peer_args, changes = PAIRS[name]
        spec = write_variant(SPEC, specs / f"compare_{name}.toml",
                             {"name": f"compare_{name}", "jax.strategies": ["sharded"], **changes,
                              **(SMOKE_SPEC if SMOKE else {}),
                              **({"per_device_batch": 8} if SMOKE and "per_device_batch" in changes else {})})
        result = peer(*peer_args)
        with (out / "peers.jsonl").open("a") as handle:
            handle.write(json.dumps({"pair": name, **result}) + "\n")
        lines.append(table_line(label, result, cnnbench(spec, rows_file)))
        print(lines[-1], flush=True)
    with (out / "gpu_compare.md").open("a") as handle:  # each invocation adds its table
        handle.write("\n".join(lines) + "\n\n")


if __name__ == "__main__":
    main()
