"""One GPU: the effect of user-facing performance options on ResNet-50 bf16 training (issue: each
option recorded). Each variant is experiments/resnet50_synthetic.toml with one option changed,
written to OUT/specs/ and run by `cnnbench run`; all rows go to OUT/h200_options.csv, the spec
name saying which option ran.

Usage: python benchmarks/gpu_options.py OUT [torch|jax|all]
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BASE = Path(__file__).resolve().parent.parent / "experiments" / "resnet50_synthetic.toml"

# name -> (backend, extra top-level lines, [torch] lines, [jax] lines)
VARIANTS = {
    "torch_eager_foreach": ("torch", "", 'optimizer_impl = "foreach"', ""),
    "torch_eager_fused": ("torch", "", 'optimizer_impl = "fused"', ""),
    "torch_compile_reduce_overhead": ("torch", "compile = true", 'compile_mode = "reduce-overhead"', ""),
    "torch_compile_max_autotune_no_cudagraphs": ("torch", "compile = true\ntimeout_s = 400",
                                                 'compile_mode = "max-autotune-no-cudagraphs"', ""),
    "jax_b512": ("jax", "", "", ""),
    "jax_no_command_buffers": ("jax", "", "", 'xla_flags = "--xla_gpu_enable_command_buffer="'),
    "jax_autotune_max": ("jax", "", "",
                         'xla_flags = "--xla_gpu_autotune_level=4 --xla_gpu_exhaustive_tiling_search=true"'),
}


def spec_text(name: str, top: str, torch_lines: str, jax_lines: str) -> str:
    text = BASE.read_text().replace('name = "resnet50_synthetic"', f'name = "{name}"')
    if name == "jax_b512":
        text = text.replace("per_device_batch = 256", "per_device_batch = 512")
    text = text.replace("timeout_s = 1200", "timeout_s = 300")
    if "timeout_s = 400" in top:
        text, top = text.replace("timeout_s = 300", "timeout_s = 400"), top.replace("\ntimeout_s = 400", "")
    text = text.replace("[optimizer]", f"{top}\n\n[optimizer]", 1)
    text = text.replace("[torch]\n", f"[torch]\n{torch_lines}\n", 1)
    return text.replace('[jax]\nstrategies = ["sharded", "pmap"]', f'[jax]\nstrategies = ["sharded"]\n{jax_lines}')


def main() -> None:
    out = Path(sys.argv[1])
    which = sys.argv[2] if len(sys.argv) > 2 else "all"
    (out / "specs").mkdir(parents=True, exist_ok=True)
    for name, (backend, top, torch_lines, jax_lines) in VARIANTS.items():
        if which not in ("all", backend):
            continue
        spec = out / "specs" / f"{name}.toml"
        spec.write_text(spec_text(name, top, torch_lines, jax_lines))
        subprocess.run([sys.executable, "-m", "cnnbench.cli", "run", str(spec), "--devices", "1", "-b", backend,
                        "--out", str(out / "h200_options.csv"), "--no-report"], check=False)


if __name__ == "__main__":
    main()
