#!/usr/bin/env bash
# On one GPU: the ResNet-50 inference benchmark (PyTorch, JAX) and the Keras engines beside the
# native backends (ResNet-50 bf16 batch 256). Usage: benchmarks/gpu_infer_keras.sh OUT_DIR [infer|keras|all]
set -uo pipefail
out=${1:?usage: gpu_infer_keras.sh OUT_DIR [infer|keras|all]}
what=${2:-all}
mkdir -p "$out"
cnnbench() { python3 -m cnnbench.cli "$@"; }
if [[ $what == infer || $what == all ]]; then
  cnnbench infer experiments/resnet50_infer.toml -b torch --out "$out/h200_infer.csv" --profile "$out/traces" -v
fi
if [[ $what == jax-infer || $what == all ]]; then
  cnnbench infer experiments/resnet50_infer.toml -b jax --out "$out/h200_infer.csv" --profile "$out/traces" -v
fi
if [[ $what == keras || $what == all ]]; then
  cnnbench run experiments/keras_resnet50.toml --out "$out/h200_keras.csv" -v
fi
exit 0
