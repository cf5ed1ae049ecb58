#!/usr/bin/env bash
# benchmarks/gpu_input_prep.sh OUT_DIR: the GPU host's numbers for the decoding/augmentation pieces.
#   1. JPEG decode speed on one of its cores (fills the README's "GPU host" column of the decoder table);
#   2. the on-device prepare() cost, PyTorch eager/compiled and JAX, ms per batch;
#   3. the gpu-marked cross-framework test (prepare on the GPU against the numpy reference).
# SMOKE=1 runs tiny sizes on the CPU. About 4 minutes on the H200 machine.
set -uo pipefail
OUT=${1:?usage: benchmarks/gpu_input_prep.sh OUT_DIR}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [[ -n "${SMOKE:-}" ]]; then DEV=cpu; SMOKE_FLAG=--smoke; DECODE_S=0.5; else DEV=gpu; SMOKE_FLAG=; DECODE_S=4; fi
rm -f "$OUT/prepare_speed.jsonl"

echo "== decode speed, one core"
timeout 300 $PY benchmarks/decode_speed.py --seconds $DECODE_S --rounds 5 --json "$OUT/decode_speed.json" \
  2>&1 | tee "$OUT/decode_speed.txt" | tail -8
echo "== prepare() on $DEV"
for fw in torch jax; do
  timeout 300 $PY benchmarks/prepare_speed.py $fw --device $DEV $SMOKE_FLAG --json "$OUT/prepare_speed.jsonl" \
    2>"$OUT/prepare_$fw.err" || { echo "prepare_speed $fw failed (rc $?):"; tail -5 "$OUT/prepare_$fw.err"; }
done
if [[ -z "${SMOKE:-}" ]]; then
  echo "== gpu-marked prepare tests"
  timeout 300 $PY -m pytest -q -m gpu tests/test_transforms.py 2>&1 | tail -3
fi
