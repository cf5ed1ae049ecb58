#!/usr/bin/env bash
# Compiled training and inference by input on one GPU, in priority order, each step bounded by
# `timeout` (the limits add up to about 15 minutes: each compiled PyTorch training run spends ~65 s
# compiling on an H200, a pair ~130 s; ONLY="A B C E" picks the sections, PAIRS the A pairs, so that
# the whole set fits in calls of 10 minutes):
#   A. compiled PyTorch training: the whole-step compile, then the model-only compile, each against
#      its plain peer in the same invocation (benchmarks/gpu_compare.py);
#   B. inference by input (resident, uint8_pinned, float32_pinned, float32_pageable), compiled bf16:
#      PyTorch at batches 256 and 512, JAX at 1, 64, 256 and 512, the plain compiled bf16 forwards
#      at batch 256;
#   C. JAX training at batch 512 and the whole step with CUDA graphs (reduce-overhead), each beside
#      its peer;
#   E. PyTorch's inference at batches 1 and 64 (last: the first to go if the machine is slow);
#   D. (OPTIONS=1 only, ~6 more minutes, after E) the DDP compile options on one process as option
#      rows: wrap_ddp_single = true with each ddp_compile mode, and the peers with --ddp.
# Rows: OUT_DIR/h200_perf.csv; peers: OUT_DIR/peers.jsonl; worker output: OUT_DIR/perf_log.txt;
# the summary (README tables) on stdout and in OUT_DIR/summary.md.
# Usage: benchmarks/gpu_perf.sh OUT_DIR        SMOKE=1: tiny sizes on the CPU (checks the paths)
set -uo pipefail
out=${1:?usage: gpu_perf.sh OUT_DIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
smoke=${SMOKE:-0}
export SMOKE=$smoke
rows=h200_perf.csv
log="$out/perf_log.txt"
specs=$(mktemp -d)
# CPU compilation in SMOKE mode is far slower than on the GPU machine: scale the limits.
scale=1; [ "$smoke" = 1 ] && scale=4
limit() { echo $(( $1 * scale )); }
say() { echo "[gpu_perf $(date -u +%H:%M:%S)] $*"; }

peer() {  # peer NAME SCRIPT ARGS...: one JSON line into peers.jsonl
  local name=$1 script=$2; shift 2
  local line
  line=$(timeout "$(limit "${PEER_LIMIT:-25}")" "$py" "benchmarks/plain_peers/$script" "$@" 2>>"$log" | grep '^{' | tail -1)
  if [ -n "$line" ]; then echo "{\"pair\": \"$name\", ${line#\{}" >>"$out/peers.jsonl"; say "$name: $line";
  else say "$name: no result (see perf_log.txt)"; fi
}

only=${ONLY:-A B C E}
section() { [[ " $only " == *" $1 "* ]]; }

if section A; then
  say "A. compiled training: whole step, then model only, each beside its plain peer"
  timeout "$(limit 300)" "$py" benchmarks/gpu_compare.py "$out" "${PAIRS:-step,model}" "$rows" 2>>"$log"
fi

# PyTorch compiles each batch shape twice (float32 and uint8 inputs): its sweep runs as two
# invocations, the batches the ratios need first, so that a timeout loses only one group's rows.
if [ "$smoke" = 1 ]; then
  small=(1) big=(4) sizes=('device="cpu"' 'model="smallcnn"' 'image_size=16' 'channels=3' 'num_classes=10'
                            'timing.windows=2' 'timing.window_steps=2' 'timing.warmup_steps=1')
  infer_peer=(--device cpu --arch tiny --image-size 16 --batch 4); jax_peer=(--image-size 32 --batch 2)
  train_peer=(--device cpu --arch tiny --image-size 16 --batch 4 --optimizer foreach)
else
  small=(1 64) big=(256 512) sizes=()
  infer_peer=(--batch 256); jax_peer=(--batch 256); train_peer=()
fi
infer_spec() {  # infer_spec NAME BATCH...: resnet50_infer.toml's sweep at these batches only
  local name=$1; shift
  local list; list=$(IFS=,; echo "$*")
  "$py" benchmarks/spec_variant.py experiments/resnet50_infer.toml "$specs/$name.toml" "name=\"$name\"" \
    'compile=true' 'precision="bf16"' 'infer.latency_samples=10' \
    'infer.input=["resident", "uint8_pinned", "float32_pinned", "float32_pageable"]' \
    "infer.batch_sizes=[$list]" del:infer.ablation del:serve.rates ${sizes[@]+"${sizes[@]}"}
  echo "$specs/$name.toml"
}
infer() {  # infer SECONDS BACKEND SPEC
  timeout "$(limit "$1")" "$py" -m cnnbench.cli infer "$3" -b "$2" --out "$out/$rows" --no-report >>"$log" 2>&1
  local rc=$?
  say "infer $2: exit $rc"
}
if section B; then
  say "B. inference by input, compiled bf16"
  infer 85 torch "$(infer_spec perf_infer "${big[@]}")"
  infer 80 jax "$(infer_spec perf_infer "${small[@]}" "${big[@]}")"
  PEER_LIMIT=30 peer infer-torch-b256 torch_resnet50_infer.py "${infer_peer[@]}"
  PEER_LIMIT=45 peer infer-jax-b256 jax_resnet50_infer.py "${jax_peer[@]}"
fi

if section C; then
  say "C. JAX at batch 512 and the whole step with CUDA graphs, beside their peers"
  timeout "$(limit 240)" "$py" benchmarks/gpu_compare.py "$out" jax-b512,step-cudagraphs "$rows" 2>>"$log"
fi

if section E; then
  say "E. PyTorch's inference at the small batches (last: the first to go if the machine is slow)"
  infer 150 torch "$(infer_spec perf_infer "${small[@]}")"
fi

if [ "${OPTIONS:-0}" = 1 ] || section D; then
  say "D. DDP compile options on one process (option rows)"
  for mode in ddp_optimizer no_optimization python_reducer; do
    "$py" benchmarks/spec_variant.py experiments/resnet50_synthetic.toml "$specs/ddp_$mode.toml" \
      "name=\"torch_ddp_$mode\"" 'backends=["torch"]' 'compile=true' 'torch.wrap_ddp_single=true' \
      "torch.ddp_compile=\"$mode\"" 'timeout_s=200'
    timeout "$(limit 110)" "$py" -m cnnbench.cli run "$specs/ddp_$mode.toml" --devices 1 --out "$out/$rows" \
      --no-report >>"$log" 2>&1
    PORT=$((29600 + RANDOM % 100)) PEER_LIMIT=110 peer "ddp-$mode" torch_resnet50.py --compile step --ddp "$mode" ${train_peer[@]+"${train_peer[@]}"}
  done
fi

rm -rf "$specs"
rm -f "$out/$rows.lock"
"$py" benchmarks/perf_summary.py "$out" "$rows" | tee "$out/summary.md"
exit 0
