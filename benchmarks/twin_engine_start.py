"""Start-up time of the twin engine (it is launched once per sweep cell): this tree against a baseline commit.

    .venv/bin/python benchmarks/twin_engine_start.py [--baseline 6c0fb48] [--runs 7] [--json out.json]

The baseline's ``harness/`` is extracted from git (``git archive``) into a temporary folder and run from there with
``PYTHONPATH``; this tree runs from the checkout. Both engines start against one twin GPU of this tree (the device
contract is unchanged) with ``--twin-launch-scale 0``, so the simulated load/capture phases take no time and what is
measured is the real cost: interpreter, imports, device handshake, HTTP bind, warm-up generation. Runs alternate
(baseline, this, this, baseline, ...) so host load and run order hit both alike. Prints per side the median wall seconds from process start
to the first ``/health`` 200, the CPU seconds the engine process used (start-up and exit; much less sensitive to a
loaded host than wall time) and the median import time of the engine module (minima too: on a loaded shared host the
least disturbed run), and the ratios this/baseline (goal: no slower, ratio <= 1 within noise). The default baseline is the last commit before the shared HTTP layer and the
engine split.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from _twin_helpers import free_port, stop_process, twin_gpu  # noqa: E402 - tests/ is put on the path just above

ENGINE_ARGS = ["--model-path", "meta-llama/Llama-3.2-1B-Instruct", "--dtype", "float16", "--twin-launch-scale", "0"]
ENGINE_MODULE = {"baseline": "harness.twin.engine.scheduler", "this": "harness.twin.engine.launch"}


def extract(ref: str, dest: Path) -> Path:
    """``harness/`` of commit ``ref`` under ``dest``; exits with a message when the ref is unknown."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "harness"], capture_output=True)
    if archive.returncode != 0:
        sys.exit(f"cannot read {ref!r} from git: {archive.stderr.decode().strip()} (pass --baseline COMMIT)")
    dest.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def env_for(side: str, base_dir: Path) -> dict[str, str]:
    """The environment that makes ``import harness`` resolve to this side's code."""
    path = str(base_dir) if side == "baseline" else str(ROOT)
    return {**os.environ, "PYTHONPATH": path + os.pathsep + os.environ.get("PYTHONPATH", "")}


def start_to_healthy(env: dict[str, str], gpu_url: str, cwd: Path, timeout: float = 60.0) -> tuple[float, float]:
    """(wall seconds from spawning ``harness twin engine`` to its first ``/health`` 200, CPU seconds the engine
    process used by then and through its SIGTERM exit); CPU time hardly moves with host load, wall time does."""
    port = free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "twin",
            "engine",
            *ENGINE_ARGS,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--twin-gpu",
            gpu_url,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
    )
    wall: float | None = None
    try:
        with httpx.Client(timeout=1.0, trust_env=False) as client:
            while wall is None and time.perf_counter() - t0 < timeout:
                if proc.poll() is not None:
                    sys.exit(f"engine exited with {proc.returncode} before it was healthy")
                try:
                    if client.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                        wall = time.perf_counter() - t0
                except httpx.HTTPError:
                    time.sleep(0.005)
        if wall is None:
            sys.exit(f"engine not healthy after {timeout:g} s")
        proc.terminate()
        _, status, usage = os.wait4(proc.pid, 0)  # reaped here, with its resource usage
        proc.returncode = os.waitstatus_to_exitcode(status)
        return wall, usage.ru_utime + usage.ru_stime
    finally:
        stop_process(proc)  # a no-op once reaped; kills it on every early exit


def import_seconds(env: dict[str, str], module: str, cwd: Path) -> float:
    """Wall seconds a fresh interpreter takes to import ``module`` (python -X importtime's cumulative figure)."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    line = [ln for ln in out.stderr.splitlines() if ln.rstrip().endswith(f"| {module}")][-1]
    return int(line.split("|")[1]) / 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="6c0fb48", help="commit to compare against (default: before the split)")
    ap.add_argument("--runs", type=int, default=7, help="engine starts per side")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    console = Console(highlight=False)
    with tempfile.TemporaryDirectory(prefix="engine-start-") as tmp:
        base_dir = extract(args.baseline, Path(tmp) / "baseline")
        cwd = Path(tmp)  # not the checkout: ``python -m``/``-c`` put the working directory first on sys.path
        envs = {side: env_for(side, base_dir) for side in ("baseline", "this")}
        for side, env in envs.items():  # the right code is imported on each side
            where = subprocess.run(
                [sys.executable, "-c", "import harness; print(harness.__file__)"],
                env=env,
                cwd=cwd,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            console.print(f"{side}: harness from {where}")
        starts: dict[str, list[float]] = {"baseline": [], "this": []}
        cpus: dict[str, list[float]] = {"baseline": [], "this": []}
        imports: dict[str, list[float]] = {"baseline": [], "this": []}
        with twin_gpu(time_scale=20.0) as gpu:
            for i in range(args.runs):
                for side in ("baseline", "this") if i % 2 == 0 else ("this", "baseline"):  # ABBA: no order bias
                    env = envs[side]
                    wall, cpu = start_to_healthy(env, gpu.url, cwd)
                    starts[side].append(wall)
                    cpus[side].append(cpu)
                    imports[side].append(import_seconds(env, ENGINE_MODULE[side], cwd))
    med = {
        k: {
            "start_s": statistics.median(starts[k]),
            "cpu_s": statistics.median(cpus[k]),
            "import_s": statistics.median(imports[k]),
            "start_min_s": min(starts[k]),
            "import_min_s": min(imports[k]),
        }
        for k in starts
    }
    t = Table(title=f"twin engine start-up, median of {args.runs} (baseline {args.baseline})", title_justify="left")
    for col in ("side", "start -> /health 200 (s)", "min", "engine CPU (s)", "import engine (s)", "min"):
        t.add_column(col, justify="right")
    for side in ("baseline", "this"):
        m = med[side]
        t.add_row(
            side,
            f"{m['start_s']:.3f}",
            f"{m['start_min_s']:.3f}",
            f"{m['cpu_s']:.3f}",
            f"{m['import_s']:.3f}",
            f"{m['import_min_s']:.3f}",
        )
    console.print(t)
    ratio = {key: med["this"][key] / med["baseline"][key] for key in ("start_s", "start_min_s", "cpu_s", "import_s")}
    console.print(
        f"ratio this/baseline: start {ratio['start_s']:.3f} (min {ratio['start_min_s']:.3f}), "
        f"engine CPU {ratio['cpu_s']:.3f}, import {ratio['import_s']:.3f}"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "baseline": args.baseline,
                    "runs": args.runs,
                    "median": med,
                    "ratio": ratio,
                    "samples": {"start_s": starts, "cpu_s": cpus, "import_s": imports},
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
