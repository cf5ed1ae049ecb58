#!/usr/bin/env bash
# One GPU: the pipeline strategy of both frameworks on one stage with 1, 2 and 8 micro-batches (4 is in
# experiments/resnet50_model_parallel.toml), ResNet-50 bf16 global batch 256: how the cost of a pipeline
# on one device grows with the micro-batch count, and what the schedule costs with none to speak of.
# Usage: benchmarks/gpu_pipeline_microbatches.sh OUT_DIR
set -uo pipefail
out=${1:?usage: gpu_pipeline_microbatches.sh OUT_DIR}
mkdir -p "$out"
for m in 1 2 8; do
  sed -e "s/^name = .*/name = \"resnet50_pipeline_${m}mb\"/" -e "s/^microbatches = .*/microbatches = $m/" \
    -e 's/^strategies = \["ddp", "pipeline"\]/strategies = ["pipeline"]/' \
    -e 's/^strategies = \["sharded", "tensor", "pipeline"\]/strategies = ["pipeline"]/' \
    experiments/resnet50_model_parallel.toml > "$out/resnet50_pipeline_${m}mb.toml"
  timeout 170 python3 -m cnnbench.cli run "$out/resnet50_pipeline_${m}mb.toml" \
    --out "$out/h200_pipeline_microbatches.csv" --no-report 2>&1 | tail -n 4
done
exit 0
