#!/usr/bin/env bash
# Issue 22 on one GPU, in priority order, every step under `timeout` and inside a 350 s budget:
#   1. profiled ResNet-50 training (torch eager, jax) -> `cnnbench health` tables;
#   2. compile caches across restarts: first step of a fresh process, cold then warm cache
#      (torch.compile with the inductor FX graph cache; JAX's persistent compilation cache);
#   3. ResNet-50 inference at 1080x1920, batch 8 vs 16: utilisation and the per-layer table;
#   4. cudnn.benchmark x deterministic, one caller and concurrent callers;
#   5. DataLoader workers touching CUDA vs CUDA hidden (a standalone loader; cv2 threads);
#   6. pinned host memory: how much, which limit applies, one request past the host's RAM (last).
# Writes into OUT_DIR: health_rows.csv, health_torch.md, health_jax.md, pitfalls.jsonl, summary.txt.
# Usage: benchmarks/gpu_health.sh OUT_DIR      SMOKE=1: tiny sizes on the CPU (checks the script).
# About 5 minutes on one H200 (BUDGET_S, default 350, caps it; a step that would start past it is skipped).
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
probes="$out/pitfalls.jsonl"
: > "$probes"
budget=${BUDGET_S:-350}
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
  pin_args=(--cap-gib 1)
else
  device=gpu model=resnet50 size='image_size = 224' batch=256 precision=bf16 compile=true
  layer_args=(--height 1080 --width 1920 --batches 8,16 --warmup 3 --iters 10 --traced 3 --top 15)
  cudnn_args=(--batch 32 --size 224 --threads 4 --iters 20)
  loader_args=(--workers 4 --batch 32 --size 224 --steps 20)
  pin_args=(--cap-gib 32)
fi

spec() {  # spec NAME EXTRA_TOML -> path of a spec file
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
windows = 2
window_steps = 4

[torch]
channels_last = true
EOF
  echo "$work/$1.toml"
}

# 1. Profiled training runs: the health table of each (health.md next to its trace).
profile_spec=$(spec health_profile "")
for backend in torch jax; do
  step "profiled $backend training" 100 4 "$py" -m cnnbench.cli run "$profile_spec" -b "$backend" --out "$rows" \
    --profile "$work/traces" --no-report
  run_id=$("$py" - "$rows" "$backend" <<'EOF'
import sys
from pathlib import Path
from cnnbench.table import store
rows = Path(sys.argv[1])
found = [r for r in (store.read_rows(rows) if rows.is_file() else [])
         if r["backend"] == sys.argv[2] and r.get("profile_path") and r["status"] == "ok"]
print(found[-1]["run_id"] if found else "")
EOF
)
  if [[ -n "$run_id" ]]; then
    "$py" -m cnnbench.cli health "$rows" "$run_id" --out "$out/health_$backend.md" > /dev/null \
      || echo "health $backend failed"
    [[ $backend == jax ]] && probe "jax trace lines" 30 threads "$work/traces/$run_id"
  fi
done

# 2. Compile caches: the same run twice in fresh processes sharing one empty cache folder.
cache="$work/compile_cache"
cold=$(spec health_cache_cold "compile = $compile
compile_cache_dir = \"$cache\"")
warm=$(spec health_cache_warm "compile = $compile
compile_cache_dir = \"$cache\"")
sed -i 's/^warmup_steps = 2/warmup_steps = 1/; s/^windows = 2/windows = 1/; s/^window_steps = 4/window_steps = 2/' "$cold" "$warm"
for backend in jax torch; do
  step "$backend cold cache" 110 2 "$py" -m cnnbench.cli run "$cold" -b "$backend" --out "$rows" --no-report
  step "$backend warm cache" 80 2 "$py" -m cnnbench.cli run "$warm" -b "$backend" --out "$rows" --no-report
done
du -sh "$cache"/* 2>/dev/null

# 3-6. The standalone probes.
probe "batch 8 vs 16 at 1080x1920" 70 layers "${layer_args[@]}" --trace-dir "$work/layers"
probe "cudnn benchmark / deterministic" 60 cudnn "${cudnn_args[@]}"
probe "claims" 20 claims
probe "loader workers and CUDA" 60 loader "${loader_args[@]}"
probe "pinned memory" 60 pinned "${pin_args[@]}"
# Last, as the riskiest: one cudaHostAlloc of twice the host's RAM (PIN_PAST=0 leaves it out).
[[ "${PIN_PAST:-1}" == 1 ]] && probe "pinned past the host's RAM" 40 pinned-past

cp "$rows" "$out/health_rows.csv" 2>/dev/null
"$py" benchmarks/health_pitfalls.py summary --rows "$out/health_rows.csv" --probes "$probes" | tee "$out/summary.txt"
echo "total $((SECONDS - begun)) s"
exit 0
