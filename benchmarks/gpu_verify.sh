#!/usr/bin/env bash
# GPU verification of the training paths on one GPU: ResNet-50 bf16 batch 256 (PyTorch DDP/NCCL
# eager and compiled, JAX sharded and pmap) and ResNet-18 (CIFAR) bf16 batch 512.
# Usage: benchmarks/gpu_verify.sh OUT_DIR
set -uo pipefail
out=${1:?usage: gpu_verify.sh OUT_DIR}
mkdir -p "$out"
cnnbench() { python3 -m cnnbench.cli "$@"; }
cnnbench env
cnnbench run experiments/resnet50_synthetic.toml --devices 1 -b torch --out "$out/h200_resnet50.csv" -v
cnnbench run experiments/resnet50_synthetic.toml --devices 1 -b torch --compile --out "$out/h200_resnet50.csv" -v
cnnbench run experiments/resnet50_synthetic.toml --devices 1 -b jax --out "$out/h200_resnet50.csv" -v
cnnbench run experiments/resnet18_synthetic.toml --devices 1 -b torch --out "$out/h200_resnet18.csv"
cnnbench run experiments/resnet18_synthetic.toml --devices 1 -b torch --compile --out "$out/h200_resnet18.csv"
cnnbench run experiments/resnet18_synthetic.toml --devices 1 -b jax --out "$out/h200_resnet18.csv"
exit 0
