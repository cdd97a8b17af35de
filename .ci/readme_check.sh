#!/usr/bin/env bash
# README's "On the twin" sequence, top to bottom, as a new user runs it: in a clean clone of the committed tree, on a
# loaded host (one busy process per core for the whole run, as the 2-core CI machine under other work). Every
# command must exit 0; then the outputs the README promises are checked. Prints each command's wall time.
# Usage: bash .ci/readme_check.sh [--keep]   (--keep leaves the clone for a look; its path is printed)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d /tmp/readme-check.XXXXXX)"
LOAD_PIDS=()
cleanup() {
  for pid in "${LOAD_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ "${1:-}" = "--keep" ] || rm -rf "$WORK"
}
trap 'cleanup "${KEEP:-}"' EXIT
[ "${1:-}" = "--keep" ] && KEEP=--keep && echo "[readme] clone kept at $WORK/clone"
export HARBOR_TELEMETRY=0 LITELLM_LOCAL_MODEL_COST_MAP=True
git clone -q "$ROOT" "$WORK/clone"
cd "$WORK/clone"
# The block under "## On the twin (no GPU needed)": one command per line; comment-only lines dropped.
python3 - "$WORK/steps.txt" <<'PY'
import re, sys
text = open("README.md", encoding="utf-8").read()
block = text.split("## On the twin (no GPU needed)", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
steps = [re.sub(r"\s+#.*$", "", ln).strip() for ln in block.splitlines()]
open(sys.argv[1], "w").write("\n".join(s for s in steps if s and not s.startswith("#")) + "\n")
PY
for _ in $(seq "$(nproc)"); do
  python3 -c 'while True: pass' & LOAD_PIDS+=("$!")     # the load: a busy loop per core, for the whole sequence
done
echo "[readme] $(wc -l <"$WORK/steps.txt") steps, with $(nproc) busy processes loading this host"
SECONDS=0
while IFS= read -r step; do
  t0=$SECONDS
  echo "[readme] \$ $step"
  # shellcheck disable=SC1091
  bash -c "set -eo pipefail; [ -f .venv/bin/activate ] && . .venv/bin/activate; $step" </dev/null >"$WORK/step.log" 2>&1 \
    || { tail -n 40 "$WORK/step.log"; echo "[readme] FAILED after $((SECONDS - t0)) s: $step"; exit 1; }
  tail -n 3 "$WORK/step.log" | sed 's/^/    /'
  echo "[readme] ok in $((SECONDS - t0)) s"
done <"$WORK/steps.txt"
# What README promises the sequence leaves behind
rows=$(grep -c . results/twin-grid/rows.jsonl)
[ "$rows" -ge 228 ] || { echo "[readme] results/twin-grid has $rows rows, README promises the 228-row grid"; exit 1; }
for f in results/quick/rows.jsonl results/twin-grid/reports/report.html results/twin-grid/reports/summary.json \
         results/policies/picks.json; do
  [ -s "$f" ] || { echo "[readme] missing: $f"; exit 1; }
done
echo "[readme] OK: every step of README's twin sequence passed in ${SECONDS} s on a loaded host"
