"""On one GPU, in one invocation: each plain peer and the matching cnnbench run (ResNet-50, batch
256, bf16, synthetic), then a table of peer img/s, cnnbench img/s, their ratio and first-step times;
also cnnbench's resnet18_cifar at batch 512.

python benchmarks/gpu_compare.py OUT_DIR [torch|jax]   (the optional word runs one framework only)
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEERS = Path(__file__).resolve().parent / "plain_peers"


def peer(script: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, str(PEERS / script), *args], capture_output=True, text=True, cwd=PEERS)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {"peer": script, "error": done.stderr[-500:]}
    return json.loads(lines[-1])


def cnnbench(spec: str, out: Path, *args: str, strategy: str | None = None) -> dict:
    """Run a spec on one device; the row of the given strategy that this call appended."""
    before = _rows(out)
    subprocess.run([sys.executable, "-m", "cnnbench.cli", "run", spec, "--devices", "1", "--out", str(out),
                    "--no-report", *args], cwd=ROOT)
    new = _rows(out)[len(before):]
    chosen = [r for r in new if strategy in (None, r["strategy"])]
    return chosen[-1] if chosen else {"status": "missing"}


def _rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as handle:
        return list(csv.DictReader(handle))


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    only = sys.argv[2] if len(sys.argv) > 2 else "torch,jax"
    r50 = out / "h200_resnet50.csv"
    pairs = []
    if "torch" in only:
        pairs += [
            ("PyTorch eager", peer("torch_resnet50.py"),
             cnnbench("experiments/resnet50_synthetic.toml", r50, "-b", "torch")),
            ("PyTorch compiled", peer("torch_resnet50.py", "--compile"),
             cnnbench("experiments/resnet50_synthetic.toml", r50, "-b", "torch", "--compile")),
        ]
    if "jax" in only:
        pairs.append(("JAX sharded", peer("jax_resnet50.py"),
                      cnnbench("experiments/resnet50_synthetic.toml", r50, "-b", "jax", strategy="sharded")))
    cnnbench("experiments/resnet18_synthetic.toml", out / "h200_resnet18.csv", "-b", only)
    lines = ["| configuration | peer img/s | cnnbench img/s | cnnbench / peer | peer first step s | "
             "cnnbench first step s |", "|---|---:|---:|---:|---:|---:|"]
    for name, p, c in pairs:
        if "error" in p or c.get("status") != "ok":
            lines.append(f"| {name} | {p.get('error', '')[:80]} | {c.get('status')} | | | |")
            continue
        ips = float(c["images_per_sec"])
        lines.append(f"| {name} | {p['images_per_sec']:,.0f} | {ips:,.0f} | {ips / p['images_per_sec']:.3f} | "
                     f"{p['first_step_s']:.1f} | {float(c['first_step_s']):.1f} |")
    table = "\n".join(lines)
    (out / "gpu_compare.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
