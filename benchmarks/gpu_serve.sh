#!/usr/bin/env bash
# `cnnbench serve` on one GPU: ResNet-50 bf16 at 224 behind HTTP, PyTorch then JAX, server and load
# generator on the same machine's cores.
#   0. the HTTP stack alone (Starlette on uvicorn + the batcher, a model that takes no time) at saturation,
#      with httptools (if installed) and with h11;
#   for each configuration (PyTorch eager, PyTorch with CUDA graphs, JAX):
#   1. the engine alone, the in-process pipelined batcher and JPEG decode rates (serve_pipeline.py);
#   2. the server with dynamic batching: raw uint8 requests at 100 req/s (p99 target), 3,000 and 8,000 req/s,
#      JPEG requests (500x375 pictures, decoded and resized by the server) at saturation;
#   3. the plain route (batching none: one forward per request) at 100 req/s and at saturation;
#   for PyTorch with CUDA graphs and JAX, the multi-process server (cnnbench/serve/frontends.py):
#   4. frontends 0 and 4: raw at 100 req/s (p99) and at saturation, each saturation measured by cnnbench load
#      and then by wrk with the same connections (benchmarks/serve_clients.py flags the wrk row client_bound
#      when they differ by more than 10 %); JPEG 500x375 at saturation with 1, 2, 4 and 8 front ends;
#   sweep: PyTorch with CUDA graphs raw at saturation with 1, 2, 4, 7 front ends (SO_REUSEPORT) and 4, 7 on one
#      shared socket, by both clients: what the default front-end count and socket mode rest on;
#   frames: the seed's case, 1080x1920 JPEG frames (about 280 KB) at a 1080x1920 model input, max batch 16,
#      PyTorch fp16: `cnnbench infer` of the same spec first (the rate to reach, same invocation), then
#      `cnnbench serve` with its default front ends at saturation (FRAMES_FRONTENDS=N another count,
#      FRAMES_SECS the load's seconds, FRAMES_PROFILE=1 py-spy's samples of the loaded server,
#      FRAMES_COPY_THREADS="1 0" a server per copy-thread count);
#   litserve: PyTorch eager, the engine alone; cnnbench serve with 0 and the default front ends and its plain
#      route (one forward per request); the same engine
#      behind LitServe (benchmarks/litserve_peer.py) with 1 and 4 inference workers; raw and JPEG at saturation.
# STOP_TIMEOUT_S=N: each server bounds each stage of its stop by N s (default 60), so a held process prints its
# stacks sooner. Every step runs under timeout; a step that fails says so and the script goes on.
# Usage: benchmarks/gpu_serve.sh OUT_DIR  (SMOKE=1: a tiny CPU model and small rates, as a dry run)
# Writes OUT_DIR/serve_http.csv, stack_http.csv, frontends_http.csv, frames_infer.csv, frames_http.csv,
# peers_http.csv, litserve_http.csv, pipeline.jsonl and a log per part; prints the summary. PARTS picks the
# parts (each fits a 10-minute call; the runbook's serving-* sections name them).
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
  device=cpu; low=20; mid=100; high=200; jpeg_rate=100; plain_high=100; secs=2; low_secs=3; max_procs=1; shape=16,16,3; max_fe=2
else
  spec=experiments/resnet50_serve.toml
  device=gpu; low=100; mid=3000; high=8000; jpeg_rate=4000; plain_high=1500; secs=3; low_secs=10; max_procs=4; shape=224,224,3
  max_fe=$(( $(nproc) / 2 ))
fi
# PyTorch with CUDA graphs: the same spec with [torch] serve_cuda_graphs = true
graphs_spec=$(mktemp -d)/serve_graphs.toml
"$py" benchmarks/spec_variant.py "$spec" "$graphs_spec" 'torch.serve_cuda_graphs=true' >/dev/null
port=8100
url=http://127.0.0.1:$port

load() {  # load CSV RATE INPUT [extra args]: one row
  local csv=$1 rate=$2 input=$3; shift 3
  # the low rate's p99 is a latency claim: 10 s at 100 req/s gives 1,000 requests, so p99 is the 10th slowest
  # answer (3 s gave 300 and a p99 that moved 12 -> 21 ms between two runs of one server)
  local secs=$secs; ((rate <= low)) && secs=$low_secs
  # one client process per ~2,500 req/s; connections to match the
  # rate: at 100 req/s, 512 connections would each idle past uvicorn's 5 s keep-alive and reconnect
  local procs=${load_procs:-$(( rate / 2500 + 1 ))}; ((procs > max_procs)) && procs=$max_procs
  local conns=$(( rate / 8 )); ((conns < 32)) && conns=32; ((conns > 512)) && conns=512
  # the outer limit covers the wait for the server (--wait 150), the seconds of load and the last answers
  timeout $((150 + secs + 40)) "$py" -m cnnbench.cli load "$url" --rate "$rate" --requests $((rate * secs)) --duration "$secs" \
    --input "$input" --processes "$procs" --connections "$conns" --timeout 20 --wait 150 --out "$csv" "$@" \
    || echo "load $rate $input: failed ($?)"
}

stop() {  # stop PID LOG: SIGTERM (the server drains), bounded wait, the exit code and seconds into the log
  # the server bounds its own stop (a front end's graceful shutdown, then the engine's drain: 60 s each at
  # most); waiting longer than that records the server's own exit code, not this script's SIGKILL
  local began=$SECONDS
  kill -TERM "$1" 2>/dev/null
  timeout 150 tail --pid="$1" -f /dev/null || kill -KILL "$1"
  wait "$1"; echo "server exit code $? after $((SECONDS - began)) s" >> "$2"
}

# 0. The HTTP stack alone: what one server process can answer when the model costs nothing, with
#    uvicorn's default parser (httptools where installed) and with the pure-Python h11.
# PARTS picks what runs (each part fits a 10-minute call on its own): base (the HTTP stack alone, each engine
# alone and in one process at several rates), frontends (0 and 4 front ends raw by both clients, 1/2/4/8 for
# JPEG), sweep (1/2/4/7 front ends, SO_REUSEPORT or one shared socket), frames (the 1080p frames case),
# litserve (LitServe beside cnnbench serve); peers = frames and litserve.
parts=${PARTS:-base,frontends,sweep,frames,litserve}
[[ ",$parts," == *",peers,"* ]] && parts="$parts,frames,litserve"
part() { [[ ",$parts," == *",$1,"* ]]; }
part base && for parser in auto h11; do
  NUMPY_ENGINE_SHAPE=$shape "$py" tests/numpy_serve_engine.py "$port" 0 32 512 5 dynamic "$parser" \
    >> "$out/serve_numpy.log" 2>&1 &
  pid=$!
  load "$out/stack_http.csv" "$high" raw
  stop "$pid" "$out/serve_numpy.log"
done

engine_alone() {  # engine_alone CONFIG LOG: the engine without HTTP into OUT/pipeline.jsonl, so that every part's
  local config=$1 backend=${1%-graphs} this_spec=$spec  # "share of the engine" comes from its own invocation
  [[ $config == *-graphs ]] && this_spec=$graphs_spec
  timeout 120 "$py" benchmarks/serve_pipeline.py measure "$this_spec" "$backend" "$device" "$out/pipeline.jsonl" \
    > /dev/null 2>> "$2" || echo "pipeline $config: failed ($?)"
}

part base && for config in torch torch-graphs jax; do
  backend=${config%-graphs}
  this_spec=$spec; [[ $config == *-graphs ]] && this_spec=$graphs_spec
  log=$out/serve_$config.log
  engine_alone "$config" "$log"
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
conns_for() { local c=$(( $1 / 8 )); ((c < 32)) && c=32; ((c > 512)) && c=512; echo $c; }
wrk_check() {  # wrk_check CSV: wrk with the connections of the last saturation load, same server
  if command -v wrk >/dev/null; then
    timeout 90 "$py" benchmarks/serve_clients.py "$1" "$url" "$shape" "$(conns_for "$high")" "$secs" \
      || echo "wrk: failed ($?)"
  else
    echo "wrk not installed: apt-get install wrk"
  fi
}
http_ok() {  # http_ok PORT PATH: true when GET PATH on loopback answers 200 (bash alone: no curl needed)
  local line
  { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
  IFS= read -r -t 5 line <&3
  exec 3>&-
  [[ $line == *" 200 "* ]]
}
ready() {  # ready PID PORT PATH LIMIT_S: wait until the server answers PATH; false when it exits first or the
  local pid=$1 at=$2 path=$3 limit=$4 waited=0  # limit passes (a failed start no longer costs load's --wait)
  while ((waited < limit)); do
    http_ok "$at" "$path" && return 0
    kill -0 "$pid" 2>/dev/null || { echo "server on port $at exited before it was ready"; return 1; }
    sleep 1; ((waited++))
  done
  echo "server on port $at not ready after ${limit} s"; return 1
}
start_server() {  # start_server SPEC BACKEND LOG [serve args]: its pid in $pid (a child of this shell, so
  local this_spec=$1 backend=$2 log=$3; shift 3  # that stop can wait for it and log its exit code)
  # STOP_TIMEOUT_S: the server's bound on each stage of its stop (a held process's stacks come sooner)
  "$py" -m cnnbench.cli serve "$this_spec" -b "$backend" --device "$device" --port "$port" \
    ${STOP_TIMEOUT_S:+--stop-timeout-s "$STOP_TIMEOUT_S"} "$@" >> "$log" 2>&1 &
  pid=$!
}
# Saturation with front ends: 8,000 req/s offered was all answered on the H200 (2026-12-04), so offer twice that.
fe_high=$((high * 2))
# FRONTENDS_CONFIGS picks the engines (default both); each is about 4-5 minutes, so the runbook gives each
# a section of its own. The JPEG curve is measured with the first engine only: decoding in the front ends is
# its bound, whatever the engine.
configs=(${FRONTENDS_CONFIGS:-torch-graphs jax})
part frontends && for config in "${configs[@]}"; do
  backend=${config%-graphs}
  this_spec=$spec; [[ $config == *-graphs ]] && this_spec=$graphs_spec
  log=$out/serve_frontends_$config.log
  part base || engine_alone "$config" "$log"
  for fe in 0 4; do
    echo "== $config frontends $fe" >> "$log"
    start_server "$this_spec" "$backend" "$log" --frontends "$fe"
    load "$out/frontends_http.csv" "$low" raw
    load "$out/frontends_http.csv" "$fe_high" raw
    wrk_check "$out/frontends_http.csv"
    stop "$pid" "$log"
  done
  [[ $config == "${configs[0]}" ]] && for fe in 1 2 4 8; do
    echo "== $config frontends $fe jpeg" >> "$log"
    start_server "$this_spec" "$backend" "$log" --frontends "$fe"
    load "$out/frontends_http.csv" "$jpeg_rate" jpeg --source-size 500x375
    stop "$pid" "$log"
  done
done
# The default front-end count and socket mode, chosen by measurement: PyTorch with CUDA graphs (the fastest
# engine, so the front ends are the bound), raw at saturation by both clients, 1/2/4/7 front ends each with its
# own SO_REUSEPORT socket, 4 and 7 on one shared socket (7 = the default for 16 cores: (cores - 2) // 2).
part sweep && ! part base && engine_alone torch-graphs "$out/serve_sweep.log"
part sweep && for setting in 1:reuseport 2:reuseport 4:reuseport 7:reuseport 4:shared 7:shared; do
  fe=${setting%:*}; listen=${setting#*:}
  ((fe > max_fe)) && { echo "sweep: $fe front ends skipped: more than this host's $max_fe"; continue; }
  log=$out/serve_sweep.log
  echo "== torch-graphs frontends $fe listen $listen" >> "$log"
  start_server "$graphs_spec" torch "$log" --frontends "$fe" --listen "$listen"
  load "$out/frontends_http.csv" "$fe_high" raw
  wrk_check "$out/frontends_http.csv"
  stop "$pid" "$log"
done
# The seed's case: 1080x1920 JPEG frames at a 1080x1920 model input, max batch 16, PyTorch fp16, eager or with
# FRAMES_COMPILE=true compiled (then every batch is padded to 16: one shape for the server to compile; infer and
# serve share one cache folder, so what their graphs have in common is compiled once). The rate to reach is
# `cnnbench infer` of the same spec in the same invocation; the queue is kept at 64 frames (6 MB each in the
# shared-memory ring).
if part frames; then
  log=$out/serve_frames.log
  frames_spec=$(mktemp -d)/frames_serve.toml
  if [[ ${SMOKE:-0} == 1 ]]; then
    "$py" benchmarks/spec_variant.py "$spec" "$frames_spec" 'name="frames_serve"' 'image_size=24' \
      'backends=["torch"]' serve.max_batch=4 serve.max_queue=16 'infer.batch_sizes=[4]' 'infer.input=["resident"]' >/dev/null
    frames_rate=40; frames_size=48x32
  else
    frames_compile=(compile=false)
    [[ ${FRAMES_COMPILE:-false} == true ]] && frames_compile=(compile=true serve.pad_multiple=16 \
      "compile_cache_dir=\"$(mktemp -d)\"")
    "$py" benchmarks/spec_variant.py experiments/frames_1080p_infer.toml "$frames_spec" 'name="frames_serve"' \
      'dataset="synthetic"' del:data_path num_classes=1000 'precision=["fp16"]' 'backends=["torch"]' \
      serve.max_batch=16 serve.max_queue=64 timeout_s=240 "${frames_compile[@]}" >/dev/null
    frames_rate=1000; frames_size=1920x1080
  fi
  timeout 300 "$py" -m cnnbench.cli infer "$frames_spec" -b torch --device "$device" --out "$out/frames_infer.csv" \
    --no-report >> "$log" 2>&1 || echo "frames infer: failed ($?)"
  frontends_arg=(); [[ -n ${FRAMES_FRONTENDS:-} ]] && frontends_arg=(--frontends "$FRAMES_FRONTENDS")
  # FRAMES_COPY_THREADS="1 0": one server per count, one after the other (0: the default by image size)
  for copy_threads in ${FRAMES_COPY_THREADS:-0}; do
    echo "== frames copy_threads $copy_threads" >> "$log"
    start_server "$frames_spec" torch "$log" "${frontends_arg[@]}" --copy-threads "$copy_threads"
    if ready "$pid" "$port" /v2/health/ready 300; then
      # FRAMES_PROFILE=1 (a diagnostic, needs py-spy): where the server's processes spend a loaded second, sampled
      # from 3 s into the load for 5 s into OUT/frames_profile_ctN.txt (collapsed stacks, one line per stack)
      if [[ ${FRAMES_PROFILE:-0} == 1 ]] && command -v py-spy >/dev/null; then
        (sleep 3; timeout 30 py-spy record --pid "$pid" --subprocesses --duration 5 --rate 100 --format raw \
          --nonblocking --output "$out/frames_profile_ct$copy_threads.txt" >> "$log" 2>&1) &
      fi
      # two client processes: 1,000 bodies of 280 KB a second is 280 MB/s for the client to send (one process
      # lagged its schedule by a p99 of 0.1-1.6 s in the runs of 2026-12-06)
      load_procs=2 secs=${FRAMES_SECS:-$secs} load "$out/frames_http.csv" "$frames_rate" jpeg \
        --source-size "$frames_size"
    fi
    stop "$pid" "$log"
  done
fi
# LitServe beside cnnbench serve, the same engine (PyTorch eager, as LitServe's predict calls it) and load:
# the engine alone, cnnbench serve with one process and with its default front ends, LitServe with 1 and 4
# inference workers (4 uvicorn API servers; batches padded and warmed up as cnnbench's, litserve_peer.py).
if part litserve; then
  log=$out/serve_litserve.log
  part base || engine_alone torch "$log"
  for fe in 0 default plain; do  # plain: one forward per request (batching none), the route most servers start as
    echo "== torch frontends $fe" >> "$log"
    case $fe in
      default) start_server "$spec" torch "$log" ;;
      plain) start_server "$spec" torch "$log" --frontends 0 --batching none ;;
      *) start_server "$spec" torch "$log" --frontends 0 ;;
    esac
    rate=$high jpeg=$jpeg_rate; [[ $fe == plain ]] && rate=$plain_high jpeg=$plain_high
    if ready "$pid" "$port" /v2/health/ready 150; then
      load "$out/peers_http.csv" "$rate" raw
      load "$out/peers_http.csv" "$jpeg" jpeg --source-size 500x375
    fi
    stop "$pid" "$log"
  done
  litport=$((port + 1))
  for workers in 1 4; do
    echo "== litserve workers $workers" >> "$log"
    # its own process group: LitServe's API servers and workers are children that outlive a signal to one pid
    describe=$(mktemp -u)  # the first worker writes its card and versions there, for the rows
    setsid timeout 300 "$py" benchmarks/litserve_peer.py serve "$spec" torch "$device" "$litport" \
      --max-batch "$([[ ${SMOKE:-0} == 1 ]] && echo 8 || echo 32)" --workers "$workers" --api-servers 4 \
      --describe "$describe" >> "$log" 2>&1 &
    lpid=$!
    ready "$lpid" "$litport" /health 150 && for input in raw jpeg; do
      rate=$high; [[ $input == jpeg ]] && rate=$jpeg_rate
      timeout 90 "$py" benchmarks/litserve_peer.py load "http://127.0.0.1:$litport" "$input" "$rate" "$secs" \
        "$(conns_for "$rate")" "$out/litserve_http.csv" --shape "$shape" --source-size 500x375 --describe "$describe" \
        --info '{"backend": "torch", "model": "'"$(basename "$spec" .toml)"'", "backend_options": "server=litserve;workers='"$workers"';api_servers=4"}' \
        || echo "litserve $input: failed ($?)"
    done
    kill -TERM -- -"$lpid" 2>/dev/null; timeout 30 tail --pid="$lpid" -f /dev/null || kill -KILL -- -"$lpid"
    rm -f "$describe"
  done
fi
rm -f "$out"/*.lock
"$py" benchmarks/serve_pipeline.py summary "$out"
exit 0
