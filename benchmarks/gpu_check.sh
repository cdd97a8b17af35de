#!/usr/bin/env bash
# The GPU proof kit: run the check under the machine's python3 (stdlib + nvidia-ml-py + torch), print the verdict
# table, write OUT_DIR/gpu_check.json (docs/gpu_check.md).
#   benchmarks/gpu_check.sh [--full | --read-only] [OUT_DIR] [gpu_check.py flags...]
# Read-only by default (no set call at all: a borrowed or shared GPU must not be changed by accident); --full adds the
# phases that set, verify and restore a power limit and locked SM clocks (your own GPU, as root). GPU_CHECK_READ_ONLY=1
# keeps it read-only even with --full.
# OUT_DIR defaults to $OUT, else results/gpu-check.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
flags=()
if [ "${1:-}" = "--read-only" ] || [ "${1:-}" = "--full" ]; then flags+=("$1"); shift; fi
out="${OUT:-results/gpu-check}"
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then out="$1"; shift; fi
exec "${PYTHON:-python3}" -u "$here/gpu_check.py" --out "$out" ${flags[@]+"${flags[@]}"} "$@"
