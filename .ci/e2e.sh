#!/usr/bin/env bash
# End-to-end check of the containers: the twin stack built, started and swept through `docker compose`.
#
#   bash .ci/e2e.sh                 # everything (run by `make e2e`, which `.ci/run` calls); needs root
#   bash .ci/e2e.sh --install-only  # only install Docker Engine + Compose v2 (so `make test` can lint compose.yaml)
#
# What it does, in timed phases: install docker.io + debootstrap (apt, no recommends) and Compose v2 from Debian
# trixie's docker-compose .deb through a SEPARATE apt state (the system's sources are never changed); start a private
# dockerd on its own socket, data-root and exec-root (never /var/run/docker.sock); debootstrap a minbase bookworm
# rootfs with python3 (tarball cached under .e2e/) and `docker import` it as the local base; build a wheelhouse on the
# host with pip (honouring this machine's pip config); build the cpu and sampler images from it with --no-index and
# pull_policy never; bring up the twin stack; run a quick sweep through `docker compose run`; check its rows (and run
# report, train and the pilot's argument passing through compose); SIGKILL a compose sweep and `run sweep --resume`
# it; check that a task container started from the pilot writes where the pilot reads (Harbor's verifier path); run
# the reproduce, serve and gpu-check services; lint the GPU stack with `docker compose config -q`;
# tear down; stop the daemon by PID (trap on exit).
# Knobs: E2E_TRAIN=0 skips the torch image and the train step; E2E_GPU_STAGE=0 skips building the gpu target on a
# local stand-in for the sglang image; E2E_DIR (cache, default .e2e/), E2E_DATA_ROOT (the
# private daemon's images, default /var/lib/harness-e2e/docker; delete it to start cold), TWIN_TIME_SCALE (default 20).
# Network: loopback, plus the Debian mirror and the package indexes pip is configured with. dockerd gets a dead proxy
# so that an accidental registry pull fails at once.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

E2E_DIR="${E2E_DIR:-$ROOT/.e2e}"                              # git-ignored cache: rootfs tarball, wheels, apt state
E2E_DATA_ROOT="${E2E_DATA_ROOT:-/var/lib/harness-e2e/docker}" # the private daemon's images (kept for fast reruns)
BASE_TAG="harness-e2e/base:bookworm"
PROJECT="harness-e2e"
SUITE=bookworm
BASE_PACKAGES="python3,python3-venv,ca-certificates"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"                    # `make e2e` makes it; it reads the rows with harness.runs.rows

START_S=$SECONDS
PHASE=""
PHASE_T0=0
declare -a TIMINGS=()
TMP=""
DOCKERD_PID=""

log() { printf '[e2e %4ds] %s\n' "$((SECONDS - START_S))" "$*"; }
die() { printf '[e2e] FAIL: %s\n' "$*" >&2; exit 1; }

phase() {  # phase NAME: close the previous phase's timer and start a new one
  end_phase
  PHASE="$1"
  PHASE_T0=$SECONDS
  log "== $PHASE"
}
end_phase() {
  if [ -n "$PHASE" ]; then
    TIMINGS+=("$(printf '%-10s %4ds' "$PHASE" "$((SECONDS - PHASE_T0))")")
    PHASE=""
  fi
}
print_timings() {
  end_phase
  echo "[e2e] phase timings:"
  local t
  for t in "${TIMINGS[@]}"; do echo "  $t"; done
  echo "  total      $((SECONDS - START_S))s"
}

debian_mirror() {  # the Debian mirror named in this machine's apt sources (deb822 or one-line format)
  local uri
  uri="$(grep -hs -E '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
    | grep -v -E 'security|updates' | grep -o -E 'https?://[^ ]*/debian/?' | head -n1 || true)"
  echo "${uri:-http://deb.debian.org/debian}"
}

# ---------------------------------------------------------------------------------------------------------- install
install_tools() {
  [ "$(id -u)" = 0 ] || die "run as root (apt-get, dockerd and debootstrap need it)"
  export DEBIAN_FRONTEND=noninteractive
  local need=()
  command -v dockerd >/dev/null || need+=(docker.io)
  command -v debootstrap >/dev/null || need+=(debootstrap)
  command -v docker >/dev/null || need+=(docker.io)
  if [ "${#need[@]}" -gt 0 ]; then
    log "apt-get install ${need[*]}"
    apt-get -o DPkg::Lock::Timeout=180 update -qq
    apt-get -o DPkg::Lock::Timeout=180 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
  if ! docker compose version >/dev/null 2>&1; then
    install_compose_v2
  fi
  log "$(docker compose version)"
}

install_compose_v2() {  # Debian trixie's static Compose v2 .deb, fetched with an apt state of its own
  local state="$E2E_DIR/apt-trixie" mirror
  mirror="$(debian_mirror)"
  mkdir -p "$state/lists/partial" "$state/archives/partial"
  cat >"$state/trixie.sources" <<EOF
Types: deb
URIs: $mirror
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  local opts=(-o "Dir::Etc::SourceList=$state/trixie.sources" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$state/lists" -o "Dir::Cache::archives=$state/archives"
    -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o APT::Sandbox::User=root)
  log "Compose v2 from $mirror trixie (separate apt state in $state)"
  apt-get "${opts[@]}" update -qq
  (cd "$state/archives" && apt-get "${opts[@]}" download docker-compose >/dev/null)
  local deb
  deb="$(ls -t "$state"/archives/docker-compose_*.deb | head -n1)"
  dpkg -i "$deb" >/dev/null
  docker compose version >/dev/null || die "docker compose still missing after installing $deb"
}

# ----------------------------------------------------------------------------------------------------------- daemon
start_daemon() {
  TMP="$(mktemp -d /tmp/harness-e2e.XXXXXX)"
  mkdir -p "$E2E_DATA_ROOT" "$TMP/exec" "$TMP/docker-config"
  exec 9>"$E2E_DATA_ROOT.lock"   # one daemon per data-root: a concurrent run waits, then fails clearly
  flock -w 600 9 || die "another e2e run holds $E2E_DATA_ROOT.lock"
  export DOCKER_HOST="unix://$TMP/docker.sock"
  export DOCKER_CONFIG="$TMP/docker-config"   # no user config, no credentials
  # Host networking only: no bridge, no iptables or ip_forward changes on this machine. A dead proxy makes any
  # accidental registry pull fail at once.
  HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY=localhost,127.0.0.1 \
    dockerd -H "$DOCKER_HOST" --data-root "$E2E_DATA_ROOT" --exec-root "$TMP/exec" --pidfile "$TMP/dockerd.pid" \
    --bridge=none --iptables=false --ip-forward=false --ip-masq=false >"$TMP/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  local i
  for i in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
      log "private dockerd pid $DOCKERD_PID on $DOCKER_HOST (data-root $E2E_DATA_ROOT)"
      return 0
    fi
    kill -0 "$DOCKERD_PID" 2>/dev/null || { tail -n 30 "$TMP/dockerd.log" >&2; die "dockerd exited"; }
    sleep 0.5
  done
  tail -n 30 "$TMP/dockerd.log" >&2
  die "dockerd did not answer within 30 s"
}

cleanup() {
  local rc=$?
  set +e
  if [ -n "${WATCHDOG_PID:-}" ]; then kill "$WATCHDOG_PID" 2>/dev/null; wait "$WATCHDOG_PID" 2>/dev/null; fi
  if [ -n "$DOCKERD_PID" ] && kill -0 "$DOCKERD_PID" 2>/dev/null; then
    if [ "$rc" != 0 ] && [ -n "${COMPOSE_ARGS:-}" ]; then
      echo "[e2e] --- compose logs (tail) ---" >&2
      docker compose "${COMPOSE_ARGS[@]}" logs --no-color --tail 40 >&2 2>/dev/null
    fi
    [ -n "${COMPOSE_ARGS:-}" ] && docker compose "${COMPOSE_ARGS[@]}" down -t 5 --remove-orphans >/dev/null 2>&1
    kill "$DOCKERD_PID"
    local i
    for i in $(seq 1 40); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$DOCKERD_PID" 2>/dev/null; then kill -9 "$DOCKERD_PID"; fi
    wait "$DOCKERD_PID" 2>/dev/null
    log "dockerd $DOCKERD_PID stopped"
  fi
  if [ "$rc" != 0 ] && [ -n "$TMP" ] && [ -f "$TMP/dockerd.log" ]; then
    echo "[e2e] --- dockerd log (tail) ---" >&2
    tail -n 20 "$TMP/dockerd.log" >&2
  fi
  if [ -n "$TMP" ]; then  # dockerd leaves its default netns bind-mounted under the exec-root
    awk -v t="$TMP/" 'index($2, t) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do umount "$m"; done
    rm -rf "$TMP"
  fi
  print_timings
  [ "$rc" = 0 ] && echo "[e2e] OK" || echo "[e2e] FAILED (exit $rc)" >&2
  exit "$rc"
}

# ------------------------------------------------------------------------------------------------------------- base
build_base_image() {  # a minbase bookworm with python3, made by debootstrap and imported: nothing is pulled
  if docker image inspect "$BASE_TAG" >/dev/null 2>&1; then
    log "$BASE_TAG already in the private daemon"
    return 0
  fi
  local key tarball
  key="$(echo "$SUITE $BASE_PACKAGES" | sha256sum | cut -c1-12)"
  tarball="$E2E_DIR/cache/rootfs-$SUITE-minbase-$key.tar"
  if [ ! -s "$tarball" ]; then
    local rootfs="$TMP/rootfs" mirror
    mirror="$(debian_mirror)"
    log "debootstrap --variant=minbase --include=$BASE_PACKAGES $SUITE from $mirror"
    mkdir -p "$E2E_DIR/cache"
    debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$rootfs" "$mirror" >"$TMP/debootstrap.log" 2>&1 \
      || { tail -n 20 "$TMP/debootstrap.log" >&2; die "debootstrap failed"; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar --numeric-owner -C "$rootfs" -cf "$tarball.partial" .
    mv "$tarball.partial" "$tarball"
    rm -rf "$rootfs"
  else
    log "cached rootfs $tarball"
  fi
  docker import -c 'ENV LANG=C.UTF-8' "$tarball" "$BASE_TAG" >/dev/null
  docker run --rm --network none "$BASE_TAG" python3 -c 'import sys, venv, ensurepip; print("base python", sys.version.split()[0])'
}

# ----------------------------------------------------------------------------------------------------------- wheels
build_wheelhouse() {  # host-side pip (this machine's pip config and local indexes) -> .e2e/wheels, used with --no-index
  # pyproject's core dependencies and extras: [report,export,stats] for the cpu image; [policies,ray] for the train image and the
  # gpu stage, with torch only for the train image (the torch [test] pins; the gpu stage's base brings its own)
  local wh="$E2E_DIR/wheels" req="$E2E_DIR/requirements.txt"
  mkdir -p "$wh"
  "$PYTHON" - "$ROOT/pyproject.toml" "${E2E_TRAIN:-1}" "${E2E_GPU_STAGE:-1}" >"$req" <<'PY'
import sys, tomllib
from packaging.requirements import Requirement
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
train, gpu = sys.argv[2] == "1", sys.argv[3] == "1"
extras = ["report", "export", "stats"] + (["policies", "ray"] if train or gpu else [])  # [all]: these five
is_torch = lambda d: Requirement(d).name.lower() == "torch"
deps = project["dependencies"] + [d for e in extras for d in project["optional-dependencies"][e] if not is_torch(d)]
pinned = [d for d in project["optional-dependencies"]["test"] if is_torch(d)]  # the suite's torch
print("\n".join(deps + (pinned if train else []) + ["setuptools>=68", "wheel"]))
PY
  log "pip wheel -r $(basename "$req") -> $wh ($(wc -l <"$req") requirements, torch: ${E2E_TRAIN:-1})"
  "$PYTHON" -m pip wheel -q --disable-pip-version-check --wheel-dir "$wh" -r "$req" >"$E2E_DIR/pip-wheel.log" 2>&1 \
    || { grep -v '^WARNING: Location' "$E2E_DIR/pip-wheel.log" | tail -n 30 >&2; die "pip wheel failed"; }
  log "wheelhouse: $(ls "$wh" | wc -l) wheels, $(du -sh "$wh" | cut -f1)"
}

# -------------------------------------------------------------------------------------------------------- compose
free_port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

setup_compose_env() {
  RESULTS="$E2E_DIR/results"
  rm -rf "$RESULTS"
  mkdir -p "$RESULTS"
  chown 1000:1000 "$RESULTS"      # the images' non-root user
  export HARNESS_WORLD=twin HARNESS_BASE_IMAGE="$BASE_TAG" PIP_INSTALL_FLAGS=--no-index HARNESS_BUILD_NETWORK=none
  export HARNESS_RESULTS="$RESULTS"
  export HARNESS_TWIN_PORT="$(free_port)" HARNESS_SAMPLER_PORT="$(free_port)" TWIN_TIME_SCALE="${TWIN_TIME_SCALE:-20}"
  export COMPOSE_PROGRESS=plain BUILDKIT_PROGRESS=plain
  unset COMPOSE_PROFILES COMPOSE_FILE
  COMPOSE_ARGS=(-p "$PROJECT" -f "$ROOT/compose.yaml")
  log "twin ports: gpu-twin $HARNESS_TWIN_PORT, sampler $HARNESS_SAMPLER_PORT; time scale $TWIN_TIME_SCALE"
}

dc() { docker compose "${COMPOSE_ARGS[@]}" "$@"; }

build_images() {
  # gpu-twin, report and pilot share sweep's image (eagle-harness:cpu): building it once is enough
  local services=(sampler sweep)
  [ "${E2E_TRAIN:-1}" = 1 ] && services+=(train)
  timeout 600 docker compose "${COMPOSE_ARGS[@]}" --profile jobs build "${services[@]}" >"$TMP/build.log" 2>&1 \
    || { tail -n 40 "$TMP/build.log" >&2; die "docker compose build failed (log above)"; }
  docker image prune -f >/dev/null                            # superseded tags from earlier reruns
  docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^eagle-harness:|^harness-e2e/' | sed 's/^/  /'
}

up_stack() {
  timeout 180 docker compose "${COMPOSE_ARGS[@]}" up -d --wait gpu-twin sampler
  dc ps --format '{{.Service}} {{.Status}}' | sed 's/^/  /'
  # the healthchecks passed inside the containers; the host sees the same loopback (host networking)
  "$PYTHON" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$HARNESS_TWIN_PORT/v1/info', timeout=5)" \
    || die "the twin GPU is not reachable from the host on 127.0.0.1:$HARNESS_TWIN_PORT"
}

run_sweep() {
  timeout "${E2E_SWEEP_TIMEOUT_S:-420}" docker compose "${COMPOSE_ARGS[@]}" run --rm -T sweep --quick --out results/e2e-sweep \
    || die "the quick sweep through docker compose failed"
}

check_rows() {
  local run="$RESULTS/e2e-sweep"
  [ -s "$run/rows.jsonl" ] || die "no rows at $run/rows.jsonl"
  "$PYTHON" - "$run" <<'PY'
import json, sys
from pathlib import Path
from harness.runs.rows import PUBLISHED_KEYS
run = Path(sys.argv[1])
rows = [json.loads(l) for l in (run / "rows.jsonl").read_text().splitlines() if l.strip()]
published = [json.loads(l) for l in (run / "dataset.jsonl").read_text().splitlines() if l.strip()]
problems = []
if len(rows) < 2:
    problems.append(f"only {len(rows)} rows")
if len(published) != len(rows):
    problems.append(f"dataset.jsonl has {len(published)} lines, rows.jsonl {len(rows)}")
for i, p in enumerate(published):
    if tuple(p) != PUBLISHED_KEYS:
        problems.append(f"dataset line {i}: keys {list(p)[:5]}... are not the 26 published keys in order")
        break
labels = {r.get("hardware") for r in rows}
if not labels or not all(isinstance(h, str) and h.startswith("twin:") for h in labels):
    problems.append(f"hardware labels {labels} are not twin:<profile>")
errors = [r for r in rows if r.get("error")]
if len(errors) == len(rows):
    problems.append("every row is an error row")
energy = [r["energy_joules"] for r in rows if not r.get("error")] or [0.0]
if not all(isinstance(e, (int, float)) and e > 0 for e in energy):
    problems.append(f"non-positive or missing energy in measured rows: {energy[:5]}")
print(f"  {len(rows)} rows ({len(errors)} error rows), hardware {sorted(labels)}, "
      f"batch sizes {sorted({r['batch_size'] for r in rows})}, energy {min(energy):.1f}..{max(energy):.1f} J")
if problems:
    print("  row check failed: " + "; ".join(problems), file=sys.stderr)
    sys.exit(1)
PY
  # the project's own validator, inside the image the sweep ran in (a quick sweep is a subset of the 19 actions)
  if docker run --rm --network none eagle-harness:cpu dataset validate --help >/dev/null 2>&1; then
    docker compose "${COMPOSE_ARGS[@]}" run --rm -T --no-deps --entrypoint harness sweep \
      dataset validate --subset results/e2e-sweep || die "harness dataset validate rejected the quick sweep"
  else
    log "harness dataset validate is not available in the image: skipped"
  fi
}

train_policies() {  # the train service (torch image) on the quick sweep's rows
  timeout 300 docker compose "${COMPOSE_ARGS[@]}" run --rm -T --no-deps train \
    --dataset results/e2e-sweep --out results/e2e-policies || die "harness train through docker compose failed"
  [ -s "$RESULTS/e2e-policies/picks.json" ] || die "train wrote no picks.json"
  log "policies: $(cd "$RESULTS/e2e-policies" && ls | tr '\n' ' ')"
}

report_sweep() {  # the report service's default command, pointed at the quick sweep
  timeout 120 docker compose "${COMPOSE_ARGS[@]}" run --rm -T --no-deps report sweep results/e2e-sweep >"$TMP/report.txt" 2>&1 \
    || { tail -n 20 "$TMP/report.txt" >&2; die "harness report sweep through docker compose failed"; }
  log "report: $(wc -l <"$TMP/report.txt") lines from docker compose run report"
}

check_pilot_args() {  # `docker compose run pilot --suite terminalbench ...` reaches `harness pilot` with its arguments
  local out
  out="$(timeout 120 docker compose "${COMPOSE_ARGS[@]}" run --rm -T --no-deps pilot --suite terminalbench --suite-help 2>&1)" \
    || { echo "$out" | tail -n 20 >&2; die "docker compose run pilot --suite terminalbench --suite-help failed"; }
  echo "$out" | grep -q "terminalbench" || { echo "$out" | tail -n 20 >&2; die "the pilot did not get --suite terminalbench"; }
  log "pilot: arguments reach harness pilot (--suite terminalbench --suite-help listed the suite's options)"
}

count_rows() { [ -s "$1" ] && wc -l <"$1" || echo 0; }

resume_killed_sweep() {  # a compose sweep SIGKILLed mid-run continues with `docker compose run sweep --resume DIR`
  local run="$RESULTS/e2e-resume" name="${PROJECT}-resume" i
  docker compose "${COMPOSE_ARGS[@]}" run -d -T --name "$name" sweep --configs 0:0:0,3:1:4 --batch-sizes 1,4 \
    --repeats 2 --output-tokens 128 --out results/e2e-resume --plain >/dev/null
  for i in $(seq 1 240); do [ "$(count_rows "$run/rows.jsonl")" -ge 2 ] && break; sleep 0.5; done
  [ "$(count_rows "$run/rows.jsonl")" -ge 2 ] || { docker logs "$name" 2>&1 | tail -n 20 >&2; die "the sweep to kill wrote no rows"; }
  docker kill "$name" >/dev/null
  docker rm -f "$name" >/dev/null 2>&1 || true
  local before; before="$(count_rows "$run/rows.jsonl")"
  log "resume: killed the sweep (SIGKILL) after $before of 8 rows"
  # the service passes its folder in HARNESS_SWEEP_OUT and --engine/--sampler-url/--twin-gpu: --resume accepts them
  timeout 300 docker compose "${COMPOSE_ARGS[@]}" run --rm -T sweep --resume results/e2e-resume >"$TMP/resume.log" 2>&1 \
    || { tail -n 30 "$TMP/resume.log" >&2; die "docker compose run sweep --resume failed"; }
  "$PYTHON" - "$run" "$before" <<'PY'
import json, sys
from pathlib import Path
run, before = Path(sys.argv[1]), int(sys.argv[2])
rows = [json.loads(l) for l in (run / "rows.jsonl").read_text().splitlines() if l.strip()]
manifest = json.loads((run / "manifest.json").read_text())
cells = [r["cell_id"] for r in rows]
problems = []
if len(rows) != 8 or len(set(cells)) != 8:
    problems.append(f"{len(rows)} rows, {len(set(cells))} distinct cells (want 8 and 8)")
if manifest.get("status") != "complete":
    problems.append(f"status {manifest.get('status')!r}")
if len(manifest.get("sessions") or []) < 2:
    problems.append(f"{len(manifest.get('sessions') or [])} sessions (want the killed one and the resume)")
print(f"  resume: {before} rows before the kill, {len(rows)} after, status {manifest.get('status')}, "
      f"{len(manifest.get('sessions') or [])} sessions")
if problems:
    print("  resume check failed: " + "; ".join(problems), file=sys.stderr)
    sys.exit(1)
PY
}

pilot_results_path() {  # what Harbor's verifier relies on: a task container on the host's daemon writes into a
  # trial folder bind-mounted by its path in the pilot's container; the pilot must read what it wrote. The twin
  # world's pilot has the GPU world's paths (x-pilot-paths); the socket and CLI are added here as run -v.
  local sock="${DOCKER_HOST#unix://}" out
  out="$(PWD="$E2E_DIR" timeout 120 docker compose "${COMPOSE_ARGS[@]}" run --rm -T --no-deps --user 0:0 \
      -v "$sock:/var/run/docker.sock" -v "$(command -v docker):/usr/local/bin/docker:ro" --entrypoint sh pilot -c '
        d="$PWD/results/e2e-pilot/harbor/jobs/trial-1/verifier"; mkdir -p "$d"
        docker run --rm --network none -v "$d:/logs/verifier" '"$BASE_TAG"' sh -c "echo 1 > /logs/verifier/reward.txt"
        echo "pwd=$PWD reward=$(cat "$d/reward.txt" 2>/dev/null || echo missing)"' 2>&1)" \
    || { echo "$out" | tail -n 20 >&2; die "the pilot container could not start a task container"; }
  echo "$out" | tail -n 1 | sed 's/^/  pilot: /'
  echo "$out" | grep -q "pwd=$E2E_DIR reward=1" || die "the verifier's reward did not reach the pilot (results path differs inside and out)"
  [ "$(cat "$RESULTS/e2e-pilot/harbor/jobs/trial-1/verifier/reward.txt")" = 1 ] || die "the reward is not on the host either"
}

new_services() {  # reproduce (the published protocol, --quick), serve (a request through it), gpu-check (--argv here)
  timeout 300 docker compose "${COMPOSE_ARGS[@]}" run --rm -T reproduce --quick --out results/e2e-reproduce --plain \
    >"$TMP/reproduce.log" 2>&1 || { tail -n 30 "$TMP/reproduce.log" >&2; die "docker compose run reproduce --quick failed"; }
  [ "$(count_rows "$RESULTS/e2e-reproduce/rows.jsonl")" = 8 ] || die "reproduce --quick wrote $(count_rows "$RESULTS/e2e-reproduce/rows.jsonl") rows, not 8"
  log "reproduce: 8 rows in results/e2e-reproduce"
  local argv
  argv="$(timeout 120 docker compose "${COMPOSE_ARGS[@]}" run --rm -T --no-deps gpu-check 2>"$TMP/gpu-check.log")" \
    || { tail -n 20 "$TMP/gpu-check.log" >&2; die "docker compose run gpu-check failed"; }
  echo "$argv" | "$PYTHON" -c 'import json,sys; d=json.load(sys.stdin); assert d["configs"] == 19 and len(d["argv"]) == 19, d; print("  gpu-check: the 19 launch lines of sglang", d["sglang_version_flags"])' \
    || die "gpu-check --argv printed no 19 launch lines"
  local port name="${PROJECT}-serve" i
  port="$(free_port)"
  docker compose "${COMPOSE_ARGS[@]}" run -d -T --name "$name" serve --picks 1=0:0:0,16=3:1:4 --port "$port" \
    --out results/e2e-serve >/dev/null
  for i in $(seq 1 240); do
    "$PYTHON" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=2)" 2>/dev/null && break
    sleep 0.5
  done
  "$PYTHON" - "$port" <<'PY' || { docker logs "$name" 2>&1 | tail -n 30 >&2; docker rm -f "$name" >/dev/null; die "harness serve through compose did not answer"; }
import json, sys, urllib.request
port = sys.argv[1]
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body, {"Content-Type": "application/json"})
reply = json.load(urllib.request.urlopen(req, timeout=60))
text = reply["choices"][0]["message"]["content"]
assert text and reply["usage"]["completion_tokens"] > 0, reply
print(f"  serve: a chat completion of {reply['usage']['completion_tokens']} tokens through docker compose run serve")
PY
  docker stop -t 30 "$name" >/dev/null
  docker rm -f "$name" >/dev/null 2>&1 || true
  [ -s "$RESULTS/e2e-serve/options.yaml" ] || die "serve wrote no options.yaml"
}

gpu_stage() {  # the Dockerfile's gpu target on a stand-in for the sglang image (no registry here, no GPU needed)
  # The stand-in is the local base with a pip-enabled interpreter first on PATH, as in sglang's images. It checks the
  # gpu stage's own logic: Python check, install into the base's interpreter constrained to its pip freeze, the
  # non-root user, `harness` on PATH. It proves nothing about sglang itself. Like sglang's images it has a torch: a
  # STAND-IN distribution named torch (tests/_install_helpers.py, a few bytes at 2.8.0+standin), which the gpu stage
  # must keep (harness[all] accepts any torch >= 2.4 and is constrained to the base's pip freeze).
  local fake="lmsysorg/sglang:e2e-standin" standin
  # Like an engine image warmed as root, it holds a JIT cache under /root (flashinfer's and triton's places).
  if ! docker run --rm --network none "$fake" sh -c 'python3 -m pip show torch && test -f /root/.triton/cache/standin.kernel' >/dev/null 2>&1; then
    docker rm -f harness-e2e-standin >/dev/null 2>&1 || true
    mkdir -p "$TMP/standin"
    standin="$(cd "$ROOT/tests" && "$PYTHON" -c 'import sys; from pathlib import Path; from _install_helpers import standin_torch_wheel; print(standin_torch_wheel(Path(sys.argv[1])).name)' "$TMP/standin")"
    docker run --network none --name harness-e2e-standin -v "$TMP/standin:/standin:ro" "$BASE_TAG" \
      sh -c "python3 -m venv /usr/local/py && /usr/local/py/bin/python3 -m pip install -q --no-index /standin/$standin \
             && mkdir -p /root/.cache/flashinfer /root/.triton/cache \
             && echo standin >/root/.cache/flashinfer/standin.so && echo standin >/root/.triton/cache/standin.kernel" >/dev/null
    docker commit -c 'ENV PATH=/usr/local/py/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      harness-e2e-standin "$fake" >/dev/null
    docker rm harness-e2e-standin >/dev/null
  fi
  SGLANG_TAG=e2e-standin HARNESS_WORLD=gpu timeout 600 docker compose "${COMPOSE_ARGS[@]}" build sweep \
    >"$TMP/build-gpu.log" 2>&1 || { tail -n 40 "$TMP/build-gpu.log" >&2; die "the gpu target failed to build"; }
  local img="eagle-harness:gpu-e2e-standin" who
  who="$(docker run --rm --network none --entrypoint sh "$img" -c 'id -u; command -v harness; python3 -c "import harness, sys; print(sys.executable)"')"
  echo "$who" | sed 's/^/  gpu stage: /'
  [ "$(echo "$who" | head -n1)" = 1000 ] || die "the gpu image does not run as uid 1000"
  docker run --rm --network none "$img" sweep --help >/dev/null || die "harness sweep --help fails in the gpu image"
  local torch_now
  torch_now="$(docker run --rm --network none --entrypoint python3 "$img" -c 'import torch; print(torch.__version__)')"
  log "gpu stage: torch $torch_now (the base's)"
  [ "$torch_now" = "2.8.0+standin" ] || die "the gpu stage replaced the base image's torch (now $torch_now)"
  # The non-root user finds every JIT cache in the cache volume's folder, seeded with what the base warmed as root.
  local caches
  caches="$(docker run --rm --network none --entrypoint sh "$img" -c \
    'cat "$HOME/.cache/flashinfer/standin.so" "$TRITON_CACHE_DIR/standin.kernel" && touch "$TRITON_CACHE_DIR/w" \
     && echo "$TRITON_CACHE_DIR $TORCHINDUCTOR_CACHE_DIR $CUDA_CACHE_PATH $XDG_CACHE_HOME"')" \
    || die "the gpu image's non-root user cannot read or write the JIT caches the base warmed"
  log "gpu stage: caches $(echo "$caches" | tail -n1)"
  case "$(echo "$caches" | tail -n1)" in
    "/home/harness/.cache/triton /home/harness/.cache/torchinductor /home/harness/.cache/nv/ComputeCache /home/harness/.cache") ;;
    *) die "a JIT cache of the gpu image lies outside the cache volume: $(echo "$caches" | tail -n1)" ;;
  esac
}

lint_gpu_stack() {  # the GPU stack cannot run here; its file must still be valid (no daemon is needed for this)
  local w
  for w in gpu twin; do
    HARNESS_WORLD=$w DOCKER_HOST=unix:///nonexistent.sock docker compose -f "$ROOT/compose.yaml" --profile '*' config -q \
      || die "docker compose config -q fails for HARNESS_WORLD=$w"
  done
  HARNESS_WORLD=gpu DOCKER_HOST=unix:///nonexistent.sock docker compose -f "$ROOT/compose.yaml" config --images \
    | sed 's/^/  gpu stack image: /'
}

tear_down() {
  dc down -t 5 --remove-orphans
  [ -z "$(dc ps -aq)" ] || die "containers left after down"
  # housekeeping for long-lived CI hosts: build cache unused for a day (cheap when there is none)
  timeout 120 docker builder prune -f --filter until=24h >/dev/null 2>&1 || log "builder prune skipped"
}

main() {
  if [ "${1:-}" = "--install-only" ]; then
    phase install; install_tools; print_timings
    return 0
  fi
  [ "$(id -u)" = 0 ] || die "run as root (apt-get, dockerd and debootstrap need it)"
  mkdir -p "$E2E_DIR"
  trap cleanup EXIT
  trap 'echo "[e2e] time limit of ${E2E_LIMIT_S:-1200}s reached" >&2; exit 124' TERM
  # watchdog: at most E2E_LIMIT_S (20 min: the resume, pilot-path and services phases add ~1.5 min) in all; TERM lands between steps (each step has its own timeout too)
  (sleep "${E2E_LIMIT_S:-1200}" & s=$!; trap 'kill $s; exit 0' TERM; wait $s && kill -TERM $$) >/dev/null 2>&1 &
  WATCHDOG_PID=$!
  phase install; install_tools
  phase daemon; start_daemon
  phase base; build_base_image
  phase wheels; build_wheelhouse
  phase build; setup_compose_env; build_images
  phase up; up_stack
  phase sweep; run_sweep
  phase check; check_rows; report_sweep; check_pilot_args
  phase resume; resume_killed_sweep
  phase pilot-path; pilot_results_path
  phase services; new_services
  if [ "${E2E_TRAIN:-1}" = 1 ]; then phase train; train_policies; fi
  phase lint-gpu; lint_gpu_stack
  phase down; tear_down
  if [ "${E2E_GPU_STAGE:-1}" = 1 ]; then phase gpu-stage; gpu_stage; fi
  end_phase
}

main "$@"
