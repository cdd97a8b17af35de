#!/usr/bin/env bash
# The GPU proof kit: run the check under the machine's python3 (stdlib + nvidia-ml-py + torch), print the verdict
# table, write OUT_DIR/gpu_check.json (docs/gpu_check.md).
#   benchmarks/gpu_check.sh [--read-only] [OUT_DIR] [gpu_check.py flags...]
# --read-only (or GPU_CHECK_READ_ONLY=1): no set call at all, for a lent GPU whose settings must not change.
# OUT_DIR defaults to $OUT, else results/gpu-check.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
flags=()
if [ "${1:-}" = "--read-only" ]; then flags+=(--read-only); shift; fi
out="${OUT:-results/gpu-check}"
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then out="$1"; shift; fi
exec "${PYTHON:-python3}" -u "$here/gpu_check.py" --out "$out" ${flags[@]+"${flags[@]}"} "$@"
