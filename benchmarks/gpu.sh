#!/usr/bin/env bash
# benchmarks/gpu.sh SECTION... : benchmarks/gpu.py with the machine's python3 (see its --help).
exec "${PYTHON:-python3}" "$(dirname "$0")/gpu.py" "$@"
