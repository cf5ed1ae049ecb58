#!/usr/bin/env bash
# `cnnbench serve` on one GPU: ResNet-50 bf16 at 224 behind HTTP, PyTorch then JAX, server and load
# generator on the same machine's cores.
#   0. the HTTP stack alone (Starlette on uvicorn + the batcher, a model that takes no time) at saturation,
#      with httptools (if installed) and with h11;
#   for each configuration (PyTorch eager, PyTorch with CUDA graphs, JAX):
#   1. the engine alone, the in-process pipelined batcher and JPEG decode rates (serve_pipeline.py);
#   2. the server with dynamic batching: raw uint8 requests at 100 req/s (p99 target), 3,000 and 8,000 req/s,
#      JPEG requests (500x375 pictures, decoded and resized by the server) at saturation;
#   3. the plain route (batching none: one forward per request) at 100 req/s and at saturation.
# Usage: benchmarks/gpu_serve.sh OUT_DIR  (SMOKE=1: a tiny CPU model and small rates, as a dry run)
# Writes OUT_DIR/serve_http.csv, stack_http.csv, pipeline.jsonl, serve_{numpy,torch,torch-graphs,jax}.log; prints
# the summary. About 6-7 minutes on an H200 host.
set -uo pipefail
out=${1:?usage: gpu_serve.sh OUT_DIR}
mkdir -p "$out"
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
# The three JAX processes (reference, dynamic, none) compile the same shapes: compile once.
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-$(mktemp -d)}
if [[ ${SMOKE:-0} == 1 ]]; then
  spec=$(mktemp -d)/serve_smoke.toml
  cat > "$spec" <<'TOML'
name = "serve_smoke"
model = "smallcnn"
dataset = "synthetic"
image_size = 16
channels = 3
num_classes = 10
backends = ["torch", "jax"]
device = "cpu"
[serve]
max_batch = 8
timeout_ms = 5
pad_multiple = 4
max_queue = 64
decode_workers = 2
TOML
  device=cpu; low=20; mid=100; high=200; jpeg_rate=100; plain_high=100; secs=2; max_procs=1; shape=16,16,3
else
  spec=experiments/resnet50_serve.toml
  device=gpu; low=100; mid=3000; high=8000; jpeg_rate=4000; plain_high=1500; secs=3; max_procs=4; shape=224,224,3
fi
# PyTorch with CUDA graphs: the same spec with [torch] serve_cuda_graphs = true
graphs_spec=$(mktemp -d)/serve_graphs.toml
"$py" benchmarks/spec_variant.py "$spec" "$graphs_spec" 'torch.serve_cuda_graphs=true' >/dev/null
port=8100
url=http://127.0.0.1:$port

load() {  # load CSV RATE INPUT [extra args]: one row
  local csv=$1 rate=$2 input=$3; shift 3
  # one client process per ~2,500 req/s; connections to match the
  # rate: at 100 req/s, 512 connections would each idle past uvicorn's 5 s keep-alive and reconnect
  local procs=$(( rate / 2500 + 1 )); ((procs > max_procs)) && procs=$max_procs
  local conns=$(( rate / 8 )); ((conns < 32)) && conns=32; ((conns > 512)) && conns=512
  timeout 60 "$py" -m cnnbench.cli load "$url" --rate "$rate" --requests $((rate * secs)) --duration "$secs" \
    --input "$input" --processes "$procs" --connections "$conns" --timeout 20 --wait 150 --out "$csv" "$@" \
    || echo "load $rate $input: failed ($?)"
}

stop() {  # stop PID LOG: SIGTERM (the server drains), bounded wait, the exit code into the log
  kill -TERM "$1" 2>/dev/null
  timeout 30 tail --pid="$1" -f /dev/null || kill -KILL "$1"
  wait "$1"; echo "server exit code $?" >> "$2"
}

# 0. The HTTP stack alone: what one server process can answer when the model costs nothing, with
#    uvicorn's default parser (httptools where installed) and with the pure-Python h11.
for parser in auto h11; do
  NUMPY_ENGINE_SHAPE=$shape "$py" tests/numpy_serve_engine.py "$port" 0 32 512 5 dynamic "$parser" \
    >> "$out/serve_numpy.log" 2>&1 &
  pid=$!
  load "$out/stack_http.csv" "$high" raw
  stop "$pid" "$out/serve_numpy.log"
done

for config in torch torch-graphs jax; do
  backend=${config%-graphs}
  this_spec=$spec; [[ $config == *-graphs ]] && this_spec=$graphs_spec
  log=$out/serve_$config.log
  timeout 120 "$py" benchmarks/serve_pipeline.py measure "$this_spec" "$backend" "$device" "$out/pipeline.jsonl" \
    > /dev/null 2>> "$log" || echo "pipeline $config: failed ($?)"
  modes=(dynamic none); [[ $config == *-graphs ]] && modes=(dynamic)  # the plain route is the same either way
  for batching in "${modes[@]}"; do
    echo "== $config $batching" >> "$log"
    "$py" -m cnnbench.cli serve "$this_spec" -b "$backend" --device "$device" --port "$port" --batching "$batching" \
      >> "$log" 2>&1 &
    pid=$!
    load "$out/serve_http.csv" "$low" raw
    if [[ $batching == dynamic ]]; then
      load "$out/serve_http.csv" "$mid" raw
      load "$out/serve_http.csv" "$high" raw
      load "$out/serve_http.csv" "$jpeg_rate" jpeg --source-size 500x375
    else
      load "$out/serve_http.csv" "$plain_high" raw
    fi
    stop "$pid" "$log"
  done
done
rm -f "$out"/*.lock
"$py" benchmarks/serve_pipeline.py summary "$out"
exit 0
