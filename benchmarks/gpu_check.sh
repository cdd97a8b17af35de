#!/usr/bin/env bash
# The GPU proof kit: run the check under the machine's python3 (stdlib + nvidia-ml-py + torch), print the verdict
# table, write OUT_DIR/gpu_check.json. Usage: benchmarks/gpu_check.sh [OUT_DIR] [gpu_check.py flags...]
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:-${OUT:-results/gpu-check}}"
[ $# -gt 0 ] && shift
exec "${PYTHON:-python3}" -u "$here/gpu_check.py" --out "$out" "$@"
