#!/usr/bin/env bash
# Real input on one GPU (issue 20): ResNet-50 training from JPEG files against the same backend's
# synthetic-resident rate, PyTorch's GPU (nvJPEG) decode, decode speed per core, and inference over
# 16 x 3 x 1080 x 1920 frames from JPEGs and from a video split into decode, copy and compute, beside
# a plain PyTorch loop. About 7 minutes on an H200 host with 16 cores.
#
#   benchmarks/gpu_data.sh OUT_DIR            # the GPU run
#   SMOKE=1 benchmarks/gpu_data.sh OUT_DIR    # tiny sizes on the CPU (checks the script end to end)
#
# OUT_DIR gets: h200_data.csv (+ .history.csv) rows, split.json (decode/copy/compute of a frame batch),
# peer.json (the plain PyTorch peer), decode.json (JPEG decoders on one core), log.txt.
set -uo pipefail
out=${1:?usage: benchmarks/gpu_data.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export CNNBENCH_DATA=${CNNBENCH_DATA:-$(mktemp -d)}
work=$(mktemp -d)
log=$out/log.txt
csv=$out/h200_data.csv
: > "$log"

if [[ ${SMOKE:-0} == 1 ]]; then
  train_size="48 64"; per_class=10; classes=2; frame_size="64 96"; frames=16; frame_batch=4
  workers=1; device=cpu; image=32; train_batch=4; precision=fp32; compile=""; budget=900
else
  train_size="375 500"; per_class=256; classes=8; frame_size="1080 1920"; frames=48; frame_batch=16
  workers=14; device=gpu; image=224; train_batch=256; precision=bf16; compile="--compile"; budget=420
fi
deadline=$((SECONDS + budget))

# step NAME LIMIT_S CMD...: run one bounded step (skipped when the budget is spent), log its output.
step() {
  local name=$1 limit=$2; shift 2
  local left=$((deadline - SECONDS))
  if ((left < 20)); then echo "== $name: skipped (time budget spent)" | tee -a "$log"; return; fi
  ((limit > left)) && limit=$left
  echo "== $name (limit ${limit}s)" >> "$log"
  local begun=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >> "$log" 2>&1
  echo "== $name: rc=$? in $((SECONDS - begun)) s" | tee -a "$log"
}

# A spec from an experiment file with the sizes of this mode (the GPU mode keeps the file's own).
variant() {  # variant SRC DEST SED_EXPRESSIONS...
  local src=$1 dest=$2; shift 2
  local args=(-e "")  # never empty: with no -e, sed would read the file name as its script
  for e in "$@"; do args+=(-e "$e"); done
  if [[ ${SMOKE:-0} == 1 ]]; then
    args+=(-e "s/^image_size = .*/image_size = $image/" -e "s/^per_device_batch = .*/per_device_batch = $train_batch/"
           -e "s/^device = .*/device = \"cpu\"/" -e "s/^precision = .*/precision = \"$precision\"/"
           -e "s/^workers = [0-9]*/workers = $workers/" -e "s/^model = .*/model = \"resnet18_cifar\"/"
           -e "s/^window_steps = .*/window_steps = 2/")
  fi
  sed "${args[@]}" "$src" > "$dest"
}

step samples-train 120 python3 -m cnnbench.cli samples "$CNNBENCH_DATA/samples" --size $train_size --per-class $per_class \
  --classes $classes --video-frames 0
step samples-frames 120 python3 -m cnnbench.cli samples "$CNNBENCH_DATA/frames" --size $frame_size --per-class $frames \
  --classes 1 --video-frames $frames
step decode-speed 40 python3 benchmarks/decode_speed.py --seconds 0.5 --rounds 3 --json "$out/decode.json"

# -- training: from JPEG files vs synthetic-resident, torch (CPU and GPU decode) and jax -----------------
variant experiments/resnet50_imagefolder.toml "$work/files.toml"
variant experiments/resnet50_imagefolder.toml "$work/gpu_decode.toml" \
  's/^name = .*/name = "resnet50_imagefolder_gpu_decode"/' 's/^decode_device = .*/decode_device = "gpu"/'
variant experiments/resnet50_synthetic.toml "$work/synthetic.toml" 's/^devices = .*/devices = [1]/' \
  's/^warmup_steps = .*/warmup_steps = 5/' 's/^window_steps = .*/window_steps = 10/' \
  's/^windows = .*/windows = 3/' 's/^strategies = .*/strategies = ["sharded"]/'
step torch-files 100 python3 -m cnnbench.cli run "$work/files.toml" -b torch --out "$csv" --no-report -v
step torch-synthetic 80 python3 -m cnnbench.cli run "$work/synthetic.toml" -b torch --out "$csv" --no-report
if [[ $device == gpu ]]; then
  step torch-gpu-decode 100 python3 -m cnnbench.cli run "$work/gpu_decode.toml" -b torch --out "$csv" --no-report -v
fi
step jax-files 120 python3 -m cnnbench.cli run "$work/files.toml" -b jax --out "$csv" --no-report -v
step jax-synthetic 80 python3 -m cnnbench.cli run "$work/synthetic.toml" -b jax --out "$csv" --no-report

# -- inference over frames: the split, and the plain peer ----------------------------------------------
split_args=(--jpeg "$CNNBENCH_DATA/frames/images/astronaut" --video "$CNNBENCH_DATA/frames/video.mp4"
            --batch $frame_batch --size $frame_size --workers $workers --out "$out/split.json")
if [[ $device == gpu ]]; then
  step frames-split 150 python3 benchmarks/data_split.py "${split_args[@]}" --precision bf16 $compile
  step plain-peer 120 sh -c "cd benchmarks/plain_peers && python3 torch_frames.py --precision bf16 > '$out/peer.json'"
else
  step frames-split 240 python3 benchmarks/data_split.py "${split_args[@]}" --precision fp32 --device cpu --batches 2
  echo '{"peer": "skipped on the CPU (torchvision is not installed here)"}' > "$out/peer.json"
fi
# Last, while time is left: the same frames through `cnnbench infer` (rows in the CSV).
variant experiments/frames_1080p_infer.toml "$work/frames.toml" 's/^precision = .*/precision = "bf16"/' \
  's/^backends = .*/backends = ["torch"]/'
[[ ${SMOKE:-0} == 1 ]] && sed -i -e "s/^image_size = .*/image_size = [64, 96]/" -e "s/^compile = .*/compile = false/" \
  -e "s/^batch_sizes = .*/batch_sizes = [4]/" -e "s/^device = .*/device = \"cpu\"/" "$work/frames.toml"
step frames-infer 150 python3 -m cnnbench.cli infer "$work/frames.toml" --out "$csv" --no-report

# -- summary ----------------------------------------------------------------------------------------------
python3 - "$out" <<'EOF'
import json, sys
from pathlib import Path
from cnnbench.table import store

out = Path(sys.argv[1])
rows = store.read_rows(out / "h200_data.csv") if (out / "h200_data.csv").exists() else []
print("training (ResNet-50 bf16 at 224, one GPU):" if rows else "no rows")
print(f"{'backend':10s} {'input':10s} {'decode':6s} {'img/s':>8s} {'wait ms':>8s} {'wait %':>7s} status")
rates = {}
for r in rows:
    if r["mode"] != "train":
        continue
    decode = "gpu" if "gpu_decode" in (r["spec_name"] or "") else "cpu"
    key = (r["backend"], r["input_source"])
    ips = r["images_per_sec"] or 0.0
    rates.setdefault(r["backend"], {})[r["input_source"] + ("-gpu" if decode == "gpu" else "")] = ips
    share = r["data_wait_share"]
    print(f"{r['backend']:10s} {r['input_source']:10s} {decode:6s} {ips:8.0f} {r['data_wait_ms_median'] or 0:8.2f} "
          f"{100 * (share or 0):6.1f}% {r['status']} {(r['error'] or '')[:80]}")
for backend, found in rates.items():
    if found.get("synthetic"):
        for name, ips in found.items():
            if name != "synthetic":
                print(f"{backend} {name}: {ips / found['synthetic']:.1%} of synthetic-resident")
for r in rows:
    if r["mode"] == "infer":
        print(f"infer {r['backend']} {r['input_source']} {r['precision']} b{r['global_batch']} {r['image_size']}: "
              f"{r['step_time_ms_median'] or 0:.1f} ms/batch, {r['status']}")
for name in ("decode.json", "split.json", "peer.json"):
    path = out / name
    if path.exists():
        try:
            print(name, json.dumps(json.loads(path.read_text().strip().splitlines()[-1] if name == "peer.json"
                                              else path.read_text())))
        except ValueError:
            print(name, "(unreadable)")
EOF
rm -rf "$work"
rm -f "$out"/*.lock  # the appends' lock files: not results
exit 0
