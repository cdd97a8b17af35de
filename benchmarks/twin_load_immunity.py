"""Twin rows must not depend on how busy the host is: the same seeded twin sweep idle and under 3x oversubscription.

    .venv/bin/python benchmarks/twin_load_immunity.py [--configs 0:0:0,3:4:8] [--batch-sizes 1,4]
        [--time-scale 20] [--output-tokens 256] [--load 3] [--json out.json]

Runs ``harness sweep --engine twin --seed S`` twice in this one process's lifetime: first on the host as it is
("idle": no load added by the benchmark; on a shared machine that is whatever the others run), then with
``load x cores`` busy-loop processes started by the benchmark (and stopped by their PIDs afterwards). Prints, per
metric, the largest relative difference between the two runs over all cells (goal <= 1 %) and the ratio of the
two sweeps' wall times (how much the load slowed the host, which the twin's numbers must not show).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GOAL = 0.01
METRICS = (
    "speed_tok_s",
    "joules_per_token",
    "accept_length",
    "avg_power_watts",
    "gpu_util_pct",
    "step_time_s",
    "wall_clock_s",
    "energy_joules",
    "total_output_tokens",
)
"""``avg_power_watts`` is the utilization of the reward (power / limit); ``gpu_util_pct`` is NVML's (one sample)."""
GATED = ("speed_tok_s", "joules_per_token", "accept_length", "avg_power_watts")
"""Speed, J/token, accept length and utilization (the reward's: average power / limit) must agree within ``GOAL``.
``gpu_util_pct`` is one integer-percent sample at the window's end, taken when the sampler's wall-clock schedule
says (as NVML's would be): it is reported in points, not gated."""
BUSY_LOOP = "while True:\n    pass\n"


def start_load(per_core: int) -> list[subprocess.Popen]:
    """``per_core`` busy-loop processes per CPU core (by PID; stopped by ``stop_load``)."""
    n = per_core * (os.cpu_count() or 1)
    return [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(n)]


def stop_load(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait(10)


def run_sweep(out: Path, args: argparse.Namespace) -> float:
    """One seeded twin sweep into ``out``; returns its wall seconds (raises on a non-zero exit)."""
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "sweep",
        "--engine",
        "twin",
        "--configs",
        args.configs,
        "--batch-sizes",
        args.batch_sizes,
        "--time-scale",
        str(args.time_scale),
        "--output-tokens",
        str(args.output_tokens),
        "--seed",
        str(args.seed),
        "--settle",
        "0",
        "--plain",
        "--out",
        str(out),
        "--engine-arg=--twin-launch-scale",
        f"--engine-arg={args.launch_scale}",
    ]
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"sweep failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return time.monotonic() - t0


def rows(run: Path) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for line in (run / "rows.jsonl").read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            out[row["cell_id"]] = row
    return out


def rel_diff(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None if a is None and b is None else float("inf")
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b))


def compare(idle: dict[str, dict], loaded: dict[str, dict]) -> dict[str, dict]:
    """Per metric: the largest relative difference over the cells both runs measured, and the cell it occurred in."""
    out: dict[str, dict] = {}
    cells = sorted(set(idle) & set(loaded))
    for m in METRICS:
        worst, where = 0.0, None
        for c in cells:
            d = rel_diff(idle[c].get(m), loaded[c].get(m))
            if d is not None and d >= worst:
                worst, where = d, c
        out[m] = {
            "max_rel_diff": worst,
            "cell": where,
            "idle": idle[where].get(m) if where else None,
            "loaded": loaded[where].get(m) if where else None,
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="0:0:0,3:4:8")
    ap.add_argument("--batch-sizes", default="1,4")
    ap.add_argument("--time-scale", type=float, default=20.0)
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--launch-scale", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--load", type=int, default=3, help="busy-loop processes per core in the loaded run")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--keep", type=Path, default=None, help="keep both run folders under this folder")
    args = ap.parse_args()
    console = Console(width=160)
    with tempfile.TemporaryDirectory() as d:
        tmp = args.keep or Path(d)
        if args.keep:
            tmp.mkdir(parents=True, exist_ok=True)
        wall_idle = run_sweep(tmp / "idle", args)
        load = start_load(args.load)
        try:
            wall_loaded = run_sweep(tmp / "loaded", args)
        finally:
            stop_load(load)
        idle, loaded = rows(tmp / "idle"), rows(tmp / "loaded")
    result = compare(idle, loaded)
    table = Table(
        title=f"twin load immunity: {len(idle)} cells, seed {args.seed}, time scale {args.time_scale:g}, "
        f"+{args.load} busy loops per core ({len(load)} processes)"
    )
    for col in ("metric", "max rel diff", "cell", "idle", "loaded", "goal"):
        table.add_column(col)
    for m, r in result.items():
        ok = r["max_rel_diff"] <= GOAL
        table.add_row(
            m,
            f"{r['max_rel_diff'] * 100:.3f} %",
            str(r["cell"]),
            f"{r['idle']}",
            f"{r['loaded']}",
            "[green]ok[/]" if ok else "[red]over[/]",
        )
    console.print(table)
    ratio = wall_loaded / wall_idle
    console.print(f"sweep wall time: idle {wall_idle:.1f} s, loaded {wall_loaded:.1f} s, ratio {ratio:.2f}")
    worst = max(result[m]["max_rel_diff"] for m in GATED)
    util_pts = max(
        (
            abs(idle[c]["gpu_util_pct"] - loaded[c]["gpu_util_pct"])
            for c in set(idle) & set(loaded)
            if idle[c].get("gpu_util_pct") is not None and loaded[c].get("gpu_util_pct") is not None
        ),
        default=0,
    )
    console.print(
        f"worst of speed, J/token, accept length, utilization (avg power / limit): {worst * 100:.3f} % "
        f"(goal <= {GOAL * 100:.0f} %); NVML utilization sample: max {util_pts:g} point(s) apart"
    )
    if args.json:
        out = {
            "metrics": result,
            "nvml_util_max_points": util_pts,
            "wall_idle_s": wall_idle,
            "wall_loaded_s": wall_loaded,
            "wall_ratio": ratio,
            "worst_gated": worst,
            "args": {k: str(v) for k, v in vars(args).items()},
        }
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
