#!/usr/bin/env bash
# System prerequisites of the full test suite, installed only where missing (idempotent):
#   tmux (Terminus 2 drives a tmux session in the local sandbox), chromium (HTML report screenshot test), gcc (the NVML shim tests), Docker CLI + Compose v2 (compose.yaml lint tests),
#   and the isolated Harbor venv (.harbor-venv, Python >= 3.12) for the Terminal-Bench pilot tests.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${VENV:-.venv}/bin"
as_root() { [ "$(id -u)" = 0 ]; }

if ! command -v tmux >/dev/null 2>&1; then
  if as_root; then
    echo "[prereqs] installing tmux"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tmux >/dev/null
  else
    echo "[prereqs] tmux missing and not root: the Terminal-Bench sandbox tests will fail; install tmux" >&2
  fi
fi

if ! command -v gcc >/dev/null 2>&1; then
  if as_root; then
    echo "[prereqs] installing gcc (the NVML shim tests build a stand-in libnvidia-ml.so.1)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null
  else
    echo "[prereqs] gcc missing and not root: the NVML shim tests will fail; install gcc" >&2
  fi
fi

if ! command -v chromium >/dev/null 2>&1; then
  if as_root; then
    echo "[prereqs] installing chromium (the HTML report test screenshots the report headless)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
  else
    echo "[prereqs] chromium missing and not root: the HTML report screenshot test will skip; install chromium" >&2
  fi
fi

if ! docker compose version >/dev/null 2>&1; then
  if as_root; then
    echo "[prereqs] installing Docker CLI and Compose v2"
    bash .ci/e2e.sh --install-only
  else
    echo "[prereqs] docker compose missing and not root: the compose tests will fail; see docs/containers.md" >&2
  fi
fi

echo "[prereqs] Harbor venv for the Terminal-Bench pilot"
"$BIN/harness" pilot setup --suite terminalbench
