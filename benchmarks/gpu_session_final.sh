#!/usr/bin/env bash
# One GPU, in priority order, each step bounded: the inference ablation in interleaved rounds,
# the model-parallel code paths beside data parallelism, then the performance options.
# Usage: benchmarks/gpu_session_final.sh OUT_DIR
set -uo pipefail
out=${1:?usage: gpu_session_final.sh OUT_DIR}
mkdir -p "$out"
cnnbench() { python3 -m cnnbench.cli "$@"; }
timeout 170 python3 -m cnnbench.cli infer experiments/resnet50_ablation.toml --out "$out/h200_ablation.csv" --no-report
timeout 150 python3 -m cnnbench.cli run experiments/resnet50_model_parallel.toml --out "$out/h200_model_parallel.csv" --no-report -v 2>&1 | grep -v "^\[.*window"
timeout 120 python3 benchmarks/gpu_options.py "$out" jax
timeout 130 python3 benchmarks/gpu_options.py "$out" torch
exit 0
