"""On one GPU, in one invocation: each plain peer and the matching cnnbench run (ResNet-50, batch
256, bf16, synthetic), then a table of peer img/s, cnnbench img/s, their ratio and first-step times.

Pairs (the optional second argument picks some, comma-separated; default all but resnet18):
  eager   PyTorch eager
  model   PyTorch compiled, the model's forward only (`[torch] compile_scope = "model"`)
  step    PyTorch compiled, the whole training step (`compile_scope = "step"`)
  jax     JAX sharded against a plain Flax loop
  resnet18  cnnbench's resnet18_cifar at batch 512 (no peer)

python benchmarks/gpu_compare.py OUT_DIR [eager,model,step,jax,resnet18]
(`torch` stands for eager,model,step.)
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from spec_variant import write_variant  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PEERS = Path(__file__).resolve().parent / "plain_peers"
SPEC = ROOT / "experiments" / "resnet50_synthetic.toml"

# name -> (label, peer command, cnnbench arguments, [torch] fields of the cnnbench spec)
PAIRS = {
    "eager": ("PyTorch eager", ("torch_resnet50.py",), ("-b", "torch"), {}),
    "model": ("PyTorch compiled, model only", ("torch_resnet50.py", "--compile", "model"),
              ("-b", "torch", "--compile"), {"compile_scope": "model"}),
    "step": ("PyTorch compiled, whole step", ("torch_resnet50.py", "--compile", "step"),
             ("-b", "torch", "--compile"), {"compile_scope": "step"}),
    "jax": ("JAX sharded", ("jax_resnet50.py",), ("-b", "jax"), {}),
}


def peer(script: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, str(PEERS / script), *args], capture_output=True, text=True, cwd=PEERS)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {"peer": script, "error": done.stderr[-500:]}
    return json.loads(lines[-1])


def cnnbench(spec: str | Path, out: Path, *args: str, strategy: str | None = None) -> dict:
    """Run a spec on one device; the row of the given strategy that this call appended."""
    before = _rows(out)
    subprocess.run([sys.executable, "-m", "cnnbench.cli", "run", str(spec), "--devices", "1", "--out", str(out),
                    "--no-report", *args], cwd=ROOT)
    new = _rows(out)[len(before):]
    chosen = [r for r in new if strategy in (None, r["strategy"])]
    return chosen[-1] if chosen else {"status": "missing"}


def _rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as handle:
        return list(csv.DictReader(handle))


def compare(out: Path, names: list[str], rows_file: Path) -> list[tuple[str, dict, dict]]:
    """(label, peer result, cnnbench row) for each named pair, peer first, in one invocation."""
    pairs, specs = [], Path(tempfile.mkdtemp(prefix="gpu_compare_"))  # OUT holds results only
    for name in names:
        label, peer_args, cli_args, torch_fields = PAIRS[name]
        spec = write_variant(SPEC, specs / f"compare_{name}.toml",
                             {"name": f"compare_{name}", "jax.strategies": ["sharded"],
                              **{f"torch.{k}": v for k, v in torch_fields.items()}})
        pairs.append((label, peer(*peer_args), cnnbench(spec, rows_file, *cli_args)))
    return pairs


def table(pairs: list[tuple[str, dict, dict]]) -> str:
    lines = ["| configuration | peer img/s | cnnbench img/s | cnnbench / peer | peer first step s | "
             "cnnbench first step s |", "|---|---:|---:|---:|---:|---:|"]
    for name, p, c in pairs:
        if "error" in p or c.get("status") != "ok":
            lines.append(f"| {name} | {p.get('error', '')[-80:]!r} | {c.get('status')} {c.get('error', '')[-80:]!r} "
                         f"| | | |")
            continue
        ips = float(c["images_per_sec"])
        lines.append(f"| {name} | {p['images_per_sec']:,.0f} | {ips:,.0f} | {ips / p['images_per_sec']:.3f} | "
                     f"{p['first_step_s']:.1f} | {float(c['first_step_s']):.1f} |")
    return "\n".join(lines)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    chosen = (sys.argv[2] if len(sys.argv) > 2 else "eager,model,step,jax").replace("torch", "eager,model,step")
    names = [n for n in chosen.split(",") if n]
    unknown = sorted(set(names) - set(PAIRS) - {"resnet18"})
    if unknown:
        sys.exit(f"gpu_compare.py: unknown pair {unknown[0]}; expected some of {', '.join(PAIRS)}, resnet18")
    pairs = compare(out, [n for n in names if n in PAIRS], out / "h200_resnet50.csv")
    if "resnet18" in names:
        cnnbench("experiments/resnet18_synthetic.toml", out / "h200_resnet18.csv", "-b", "torch,jax")
    text = table(pairs)
    (out / "gpu_compare.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
