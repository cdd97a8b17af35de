# Sourced by .ci/engines_cpu.sh and .ci/clients.sh: a venv built once per machine outside the clone, under a file
# lock so two clones on one machine build it once, marked `.ready` only when its install step succeeded.
# cached_venv TAG WHAT CACHE ENV_DIR LOG PY INSTALL_FN
#   TAG: the log prefix; WHAT: what is built (messages); CACHE: the cache folder (holds the lock); ENV_DIR: the venv;
#   LOG: the build log; PY: the interpreter that makes the venv; INSTALL_FN: a function that installs into ENV_DIR.
cached_venv() {
  local tag=$1 what=$2 cache=$3 env_dir=$4 log=$5 py=$6 install=$7
  mkdir -p "$cache"
  (
    flock 9
    if [ ! -f "$env_dir/.ready" ]; then
      echo "[$tag] building $env_dir ($what; GBs, a few minutes)"
      rm -rf "$env_dir"
      "$py" -m venv "$env_dir"
      if ! "$install" >"$log" 2>&1; then
        grep -v "^WARNING: Location" "$log" | tail -20 >&2
        echo "[$tag] building the $what venv failed (log $log)" >&2
        exit 1
      fi
      touch "$env_dir/.ready"
      echo "[$tag] built in ${SECONDS}s"
    else
      echo "[$tag] $what venv cached: $env_dir"
    fi
  ) 9>"$cache/.build.lock"
}
