#!/usr/bin/env bash
# Issues 22 and 33 on one GPU, in priority order, every step under `timeout` and inside a budget:
#   known:   the health metrics against loops with known answers, PyTorch and JAX
#            (benchmarks/health_known.py: busy, NVML utilisation, energy, sleep, pageable H2D, sync);
#   train:   profiled ResNet-50 training (torch eager, jax) -> `cnnbench health` tables, energy columns;
#   pinned:  pinned host memory: how much in a time budget, which limit applies, one request past RAM;
#   energy:  ResNet-50 bf16 batch 256 energy per image: torch compiled training, inference for torch
#            eager and compiled and jax (the largest batch profiled: the inference health tables);
#   cache:   compile caches across restarts (torch.compile FX graph cache; JAX persistent cache);
#   layers:  ResNet-50 inference at 1080x1920, batch 8 vs 16; cudnn.benchmark; loader workers and CUDA.
# SECTIONS (default: all, in this order) picks some, e.g. SECTIONS=known,train,pinned,energy.
# Writes into OUT_DIR: health_rows.csv, infer_rows.csv, health_torch.md, health_jax.md,
# health_infer_*.md, known.jsonl, pitfalls.jsonl, tables.md.
# Usage: benchmarks/gpu_health.sh OUT_DIR      SMOKE=1: tiny sizes on the CPU (checks the script).
# BUDGET_S (default 600) caps the whole; a step that would start past it is skipped.
set -uo pipefail
out=${1:?usage: gpu_health.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rows="$work/rows.csv"
infer_rows="$work/infer_rows.csv"
probes="$out/pitfalls.jsonl"
: > "$probes"
budget=${BUDGET_S:-600}
sections=${SECTIONS:-known,train,pinned,energy,cache,layers}
want() { [[ ",$sections," == *",$1,"* ]]; }
begun=$SECONDS

# step NAME LIMIT_S TAIL CMD...: CMD under timeout (never past the budget; skipped when too little is
# left), the last TAIL lines of its output shown.
step() {
  local name=$1 limit=$2 lines=$3
  shift 3
  : > "$work/step.log"
  local left=$((budget - (SECONDS - begun)))
  if ((left < 15)); then
    echo "== $name: skipped (budget spent)"
    echo "{\"probe\": \"skipped\", \"step\": \"$name\"}" >> "$probes"
    return 0
  fi
  ((limit > left)) && limit=$left
  echo "== $name (limit ${limit}s, at $((SECONDS - begun))s)"
  timeout -k 5 "$limit" "$@" > "$work/step.log" 2>&1
  local rc=$?
  tail -n "$lines" "$work/step.log" | cut -c1-300
  ((rc == 124 || rc == 137)) && echo "{\"probe\": \"timeout\", \"step\": \"$name\", \"limit_s\": $limit}" >> "$probes"
  return 0
}

# probe NAME LIMIT_S ARGS...: one benchmarks/health_pitfalls.py measurement; its JSON lines kept.
probe() {
  local name=$1 limit=$2
  shift 2
  step "$name" "$limit" 12 "$py" benchmarks/health_pitfalls.py "$@"
  grep '^{"probe"' "$work/step.log" >> "$probes"
  return 0
}

if [[ "${SMOKE:-0}" == 1 ]]; then
  device=cpu model=smallcnn size='image_size = 16
channels = 1
num_classes = 10' batch=16 precision=fp32 compile=false
  layer_args=(--height 64 --width 96 --batches 1,2 --warmup 1 --iters 2 --traced 1 --top 8)
  cudnn_args=(--batch 1 --size 32 --threads 2 --iters 2)
  loader_args=(--workers 2 --batch 4 --size 32 --steps 3)
  pin_args=(--cap-gib 1 --budget-s 5)
  window_steps=4 energy_steps=4
else
  device=gpu model=resnet50 size='image_size = 224' batch=256 precision=bf16 compile=true
  layer_args=(--height 1080 --width 1920 --batches 8,16 --warmup 3 --iters 10 --traced 3 --top 15)
  cudnn_args=(--batch 32 --size 224 --threads 4 --iters 20)
  loader_args=(--workers 4 --batch 32 --size 224 --steps 20)
  pin_args=(--cap-gib 32 --budget-s 12 --child-timeout-s 10)
  window_steps=30 energy_steps=80  # >= 1 s a training window: NVML's energy counter moves in ~0.1 s steps
fi

spec() {  # spec NAME EXTRA_TOML [WINDOW_STEPS] -> path of a spec file
  cat > "$work/$1.toml" <<EOF
name = "$1"
model = "$model"
dataset = "synthetic"
$size
backends = ["torch", "jax"]
device = "$device"
per_device_batch = $batch
precision = "$precision"
timeout_s = 300
$2
[timing]
warmup_steps = 2
windows = 3
window_steps = ${3:-$window_steps}

[torch]
channels_last = true

[infer]
batch_sizes = [$batch]
input = "resident"
latency_samples = 5
EOF
  echo "$work/$1.toml"
}

# The last ok row of BACKEND with compile = true|false in CSV.
last_run_id() {
  "$py" - "$1" "$2" "$3" <<'EOF'
import sys
from pathlib import Path
from cnnbench.table import store
rows = Path(sys.argv[1])
found = [r for r in (store.read_rows(rows) if rows.is_file() else [])
         if r["backend"] == sys.argv[2] and r["status"] == "ok" and str(r["compile"]).lower() == sys.argv[3]]
print(found[-1]["run_id"] if found else "")
EOF
}

# 0. The known cases: each metric against a loop whose answer is known.
if want known; then
  for framework in torch jax; do
    step "known cases $framework" 120 3 "$py" benchmarks/health_known.py "$framework"
    grep '^{"probe"' "$work/step.log" >> "$out/known.jsonl"
  done
fi

# 1. Profiled training runs: the health table of each (health.md next to its trace), energy columns.
if want train; then
  profile_spec=$(spec health_profile "compile = false")
  for backend in torch jax; do
    step "profiled $backend training" 120 4 "$py" -m cnnbench.cli run "$profile_spec" -b "$backend" --out "$rows" \
      --profile "$work/traces" --no-report
    run_id=$(last_run_id "$rows" "$backend" false)
    if [[ -n "$run_id" ]]; then
      "$py" -m cnnbench.cli health "$rows" "$run_id" --out "$out/health_$backend.md" > /dev/null \
        || echo "health $backend failed"
      [[ $backend == jax ]] && probe "jax trace lines" 30 threads "$work/traces/$run_id"
    fi
  done
fi

# 2. Pinned host memory in a time budget; then, as the riskiest, one cudaHostAlloc of twice the
# host's RAM (PIN_PAST=0 leaves it out).
if want pinned; then
  probe "pinned memory" 45 pinned "${pin_args[@]}"
  [[ "${PIN_PAST:-1}" == 1 ]] && probe "pinned past the host's RAM" 40 pinned-past
fi

# 3. Energy per image: compiled PyTorch training; inference of all three (the largest batch traced).
if want energy; then
  # Inference batches take ~11 ms: 3 windows of 80 last > 2 s, what the energy columns need.
  eager=$(spec health_energy "compile = false" "$energy_steps")
  compiled=$(spec health_energy_compiled "compile = true" "$energy_steps")
  step "torch compiled training" 150 3 "$py" -m cnnbench.cli run "$compiled" -b torch --out "$rows" --no-report
  for backend in torch jax; do
    step "$backend inference" 90 3 "$py" -m cnnbench.cli infer "$eager" -b "$backend" --out "$infer_rows" \
      --profile "$work/infer_traces" --no-report
  done
  step "torch compiled inference" 120 3 "$py" -m cnnbench.cli infer "$compiled" -b torch --out "$infer_rows" \
    --no-report
  for folder in "$work"/infer_traces/*/; do
    [[ -f "$folder/health.md" ]] && cp "$folder/health.md" "$out/health_infer_$(basename "$folder").md"
  done
fi

# 4. Compile caches: the same run twice in fresh processes sharing one empty cache folder.
if want cache; then
  cache="$work/compile_cache"
  cold=$(spec health_cache_cold "compile = $compile
compile_cache_dir = \"$cache\"")
  warm=$(spec health_cache_warm "compile = $compile
compile_cache_dir = \"$cache\"")
  sed -i 's/^warmup_steps = 2/warmup_steps = 1/; s/^windows = 3/windows = 1/; s/^window_steps = .*/window_steps = 2/' \
    "$cold" "$warm"
  for backend in jax torch; do
    step "$backend cold cache" 110 2 "$py" -m cnnbench.cli run "$cold" -b "$backend" --out "$rows" --no-report
    step "$backend warm cache" 80 2 "$py" -m cnnbench.cli run "$warm" -b "$backend" --out "$rows" --no-report
  done
  du -sh "$cache"/* 2>/dev/null
fi

# 5. The standalone probes.
if want layers; then
  probe "batch 8 vs 16 at 1080x1920" 70 layers "${layer_args[@]}" --trace-dir "$work/layers"
  probe "cudnn benchmark / deterministic" 60 cudnn "${cudnn_args[@]}"
  probe "claims" 20 claims
  probe "loader workers and CUDA" 60 loader "${loader_args[@]}"
fi

cp "$rows" "$out/health_rows.csv" 2>/dev/null
cp "$infer_rows" "$out/infer_rows.csv" 2>/dev/null
"$py" benchmarks/health_tables.py --rows "$out/health_rows.csv" --infer-rows "$out/infer_rows.csv" \
  --known "$out/known.jsonl" | tee "$out/tables.md"
echo "total $((SECONDS - begun)) s"
exit 0
