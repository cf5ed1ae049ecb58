#!/usr/bin/env bash
# One GPU, in priority order, each step bounded: JAX's model-parallel strategies beside sharded data
# parallelism (ResNet-50 bf16, global batch 256), the JAX pipeline with 1 micro-batch (the cost of
# the per-stage schedule alone, without micro-batching), the JAX inference ablation in interleaved
# rounds (pinned and all included), and the GPU-marked tests.
# Usage: benchmarks/gpu_jax_pipeline.sh OUT_DIR
set -uo pipefail
out=${1:?usage: gpu_jax_pipeline.sh OUT_DIR}
mkdir -p "$out"
timeout 170 python3 -m cnnbench.cli run experiments/resnet50_model_parallel.toml -b jax \
  --out "$out/h200_model_parallel.csv" --no-report -v 2>&1 | grep -v "window"
sed -e 's/^name = .*/name = "resnet50_pipeline_1mb"/' -e 's/^microbatches = .*/microbatches = 1/' \
  -e 's/^strategies = \["sharded", "tensor", "pipeline"\]/strategies = ["pipeline"]/' \
  experiments/resnet50_model_parallel.toml > "$out/resnet50_pipeline_1mb.toml"
timeout 90 python3 -m cnnbench.cli run "$out/resnet50_pipeline_1mb.toml" -b jax \
  --out "$out/h200_model_parallel.csv" --no-report 2>&1 | tail -3
timeout 170 python3 -m cnnbench.cli infer experiments/resnet50_ablation.toml -b jax \
  --out "$out/h200_ablation.csv" --no-report 2>&1 | tail -25
timeout 150 python3 -m pytest -q -m gpu tests/test_gpu.py 2>&1 | tail -5
exit 0
