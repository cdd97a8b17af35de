#!/usr/bin/env bash
# `make clients`: the real load tools (the official openai client, NVIDIA's aiperf, guidellm; sglang's bench_serving
# where the engines-cpu venv is built) against the twin engine and `harness serve` on loopback (docs/serve.md).
# Usage: .ci/clients.sh [pytest args...]
#   1. a venv with the pinned tools (tests/clients/requirements-clients.txt), built once per machine outside the
#      clone (under ~/.cache/eagle-energy-harness/clients/, keyed by the pins' hash; HARNESS_CLIENTS_CACHE moves it),
#      under a file lock so two clones build it once;
#   2. tests/clients, run by the project's venv; each tool runs as a process of the clients venv's Python
#      (HARNESS_CLIENTS_PYTHON). bench_serving also needs HARNESS_ENGINES_PYTHON: set from the engines-cpu cache
#      when `make engines-cpu` built it, else that test is skipped with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
REQS=tests/clients/requirements-clients.txt
BIN="${VENV:-.venv}/bin"
PY="${PY:-python3.11}"
ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/eagle-energy-harness"
CACHE="${HARNESS_CLIENTS_CACHE:-$ROOT/clients}"
KEY=$( (cat "$REQS"; "$PY" -c 'import sys; print(sys.version_info[:2])') | sha256sum | cut -c1-16)
ENV_DIR="$CACHE/clients-$KEY"
install_clients() { "$ENV_DIR/bin/pip" install -q --disable-pip-version-check -r "$REQS"; }
# shellcheck source=.ci/cached_venv.sh
. .ci/cached_venv.sh
SECONDS=0
cached_venv clients "clients (aiperf, guidellm, openai, ~2 GB with CPU torch)" "$CACHE" "$ENV_DIR" \
  "$CACHE/build-clients-$KEY.log" "$PY" install_clients
build_s=$SECONDS
if [ -z "${HARNESS_ENGINES_PYTHON:-}" ]; then
  for py in "${HARNESS_ENGINES_CACHE:-$ROOT/engines-cpu}"/sglang-0.5.23-*/bin/python; do
    if [ -f "$(dirname "$(dirname "$py")")/.ready" ]; then export HARNESS_ENGINES_PYTHON="$py"; fi
  done
fi
if [ -n "${HARNESS_ENGINES_PYTHON:-}" ]; then  # bench_serving's overlay: what that venv lacks, --no-deps
  BREQS=tests/clients/requirements-bench-serving.txt
  BKEY=$( (cat "$BREQS"; echo "$HARNESS_ENGINES_PYTHON") | sha256sum | cut -c1-16)
  OVERLAY="$CACHE/bench-serving-$BKEY"
  (
    flock 9
    if [ ! -f "$OVERLAY/.ready" ]; then
      rm -rf "$OVERLAY"
      if ! "$HARNESS_ENGINES_PYTHON" -m pip install -q --disable-pip-version-check --no-deps --target "$OVERLAY" \
          -r "$BREQS" >"$CACHE/build-bench-serving-$BKEY.log" 2>&1; then
        tail -20 "$CACHE/build-bench-serving-$BKEY.log" >&2
        echo "[clients] bench_serving's overlay failed (log $CACHE/build-bench-serving-$BKEY.log)" >&2
        exit 1
      fi
      touch "$OVERLAY/.ready"
    fi
  ) 9>"$CACHE/.build.lock"
  export HARNESS_BENCH_SERVING_PATH="$OVERLAY"
fi
export HARBOR_TELEMETRY=0 LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
HARNESS_CLIENTS_PYTHON="$ENV_DIR/bin/python" "$BIN/python" -m pytest -q -p no:cacheprovider tests/clients "$@"
echo "[clients] venv ${build_s}s, tests $((SECONDS - build_s))s, total ${SECONDS}s"
