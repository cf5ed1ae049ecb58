#!/usr/bin/env bash
# Regenerate every committed chart folder under results/ (PNG + SVG charts, summary.md, ablation.md,
# index.html) from the committed CSVs. No GPU needed: it only reads rows.
#   benchmarks/charts.sh            (from the repository root; uses .venv/bin/python if there, else python3)
set -euo pipefail
cd "$(dirname "$0")/.."
python=python3
[ -x .venv/bin/python ] && python=.venv/bin/python
report() {  # OUT_DIR CSV...
  local out=$1; shift
  PYTHONPATH=$PWD "$python" -m cnnbench.cli report "$@" --out "$out" >/dev/null
  echo "$out: $(ls "$out" | wc -l) files from $*"
}
report results/quickstart results/quickstart.csv
report results/digits_scaling results/digits_scaling.csv
report results/h200 results/h200_resnet50.csv results/h200_resnet18.csv
report results/h200/h200_infer results/h200_infer.csv
report results/h200/h200_ablation results/h200_ablation.csv
report results/h200_keras results/h200_keras.csv
report results/h200_options results/h200_options.csv
report results/h200_model_parallel results/h200_model_parallel.csv
report results/model_parallel_cpu results/model_parallel_cpu.csv
