"""Sharding a sweep on Ray: the same seeded twin grid serially and on 1, 2 and 4 twin GPUs, in one run.

    .venv/bin/python benchmarks/ray_scaling.py [--configs 0:0:0,1:1:2,3:4:8,5:4:16] [--batch-sizes 1,4,8,16]
        [--time-scale 10] [--output-tokens 256] [--gpus 1,2,4] [--json out.json]

Runs ``harness sweep --engine twin --seed S`` with ``--executor local`` (the baseline, measured in this same run), then
``--executor ray --twin-gpus N`` (a local Ray cluster per run) for each N. Prints per run: the process wall time, the
session wall time from the manifest, the speed-up against serial (goal: >= 0.8 x N at N = 4 once start-up is
amortised), the GPU-idle fraction (slot time not spent in a cell), the host CPU busy fraction while it ran (on a small
host the twin engines, samplers and Ray itself saturate the cores: that, not the scheduler, then caps the speed-up),
and whether the rows match the serial run's in count, validity and cell ids (each cell exactly once).
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
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
GOAL = 0.8
"""Speed-up at N GPUs >= GOAL x N (judged at the largest N)."""


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs from /proc/stat."""
    fields = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def run(out: Path, args: argparse.Namespace, gpus: int | None) -> dict[str, Any]:
    """One sweep (local when ``gpus`` is None); wall time, CPU busy fraction, manifest and rows."""
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
    ]
    if gpus is not None:
        cmd += ["--executor", "ray", "--twin-gpus", str(gpus)]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "HARBOR_TELEMETRY": "0"}
    b0, t0 = cpu_times()
    w0 = time.monotonic()
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.timeout)
    wall = time.monotonic() - w0
    b1, t1 = cpu_times()
    if res.returncode != 0:
        raise SystemExit(
            f"sweep {'local' if gpus is None else f'ray x{gpus}'} failed ({res.returncode}):\n"
            + res.stdout[-3000:]
            + res.stderr[-3000:]
        )
    manifest = json.loads((out / "manifest.json").read_text())
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines() if line.strip()]
    return {
        "gpus": gpus,
        "wall_s": wall,
        "session_s": manifest.get("wall_s"),
        "cpu_busy": (b1 - b0) / max(t1 - t0, 1),
        "executor": manifest.get("executor", {}),
        "rows": rows,
    }


def rows_match(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    """Same cells, each exactly once, same validity and error-ness."""

    def key(rows: list[dict[str, Any]]) -> dict[str, tuple[bool, bool]]:
        return {r["cell_id"]: (bool(r["window_valid"]), r["error"] is None) for r in rows}

    return len(a) == len(b) == len(key(a)) == len(key(b)) and key(a) == key(b)


def differences(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[str]:
    """Cells whose row differs in presence, validity or error (with the reasons)."""
    rb = {r["cell_id"]: r for r in b}
    out = [f"{cid} missing" for cid in {r["cell_id"] for r in a} - set(rb)]
    for r in a:
        o = rb.get(r["cell_id"])
        if o is not None and (bool(r["window_valid"]), r["error"]) != (bool(o["window_valid"]), o["error"]):
            out.append(
                f"{r['cell_id']}: serial {r['window_valid']} {r['window_reasons']} {r['error']} / "
                f"ray {o['window_valid']} {o['window_reasons']} {o['error']}"
            )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="0:0:0,1:1:2,3:4:8,5:4:16")
    ap.add_argument("--batch-sizes", default="1,4,8,16")
    ap.add_argument("--time-scale", type=float, default=10.0)
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gpus", default="1,2,4")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--keep", type=Path, default=None, help="keep the run folders here (default: a temp folder)")
    args = ap.parse_args()
    console = Console(highlight=False, width=160)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ray-scaling-") as tmp_dir:
        tmp = str(args.keep) if args.keep else tmp_dir
        for gpus in [None, *[int(x) for x in args.gpus.split(",")]]:
            label = "serial" if gpus is None else f"ray x{gpus}"
            console.print(f"running {label} ...")
            results.append(run(Path(tmp) / label.replace(" ", "-"), args, gpus))
    serial = results[0]
    table = Table(
        title=f"ray scaling: {len(serial['rows'])} cells, twin scale {args.time_scale:g}, {os.cpu_count()} CPU cores"
    )
    for col in (
        "run",
        "wall s",
        "session s",
        "speed-up",
        "goal",
        "cells s (ray)",
        "GPU idle",
        "CPU busy",
        "rows match",
    ):
        table.add_column(col)
    verdict = True
    summary = []
    for r in results:
        speedup = serial["wall_s"] / r["wall_s"]
        ex = r["executor"]
        goal = GOAL * r["gpus"] if r["gpus"] else None
        match = rows_match(serial["rows"], r["rows"])
        verdict &= match
        if not match:
            console.print(f"ray x{r['gpus']}: rows differ from serial: {differences(serial['rows'], r['rows'])}")
        idle = ex.get("gpu_idle_fraction")
        table.add_row(
            "serial" if r["gpus"] is None else f"ray x{r['gpus']}",
            f"{r['wall_s']:.1f}",
            f"{r['session_s']:.1f}",
            f"{speedup:.2f}",
            "-" if goal is None else f">= {goal:.1f}",
            f"{ex['wall_s']:.1f}" if "wall_s" in ex else "-",
            "-" if idle is None else f"{idle:.1%}",
            f"{r['cpu_busy']:.0%}",
            "yes" if match else "NO",
        )
        summary.append(
            {
                "gpus": r["gpus"],
                "wall_s": r["wall_s"],
                "session_s": r["session_s"],
                "speedup": speedup,
                "goal": goal,
                "executor_wall_s": ex.get("wall_s"),
                "slots_start_s": ex.get("slots_start_s"),
                "gpu_idle_fraction": idle,
                "cpu_busy": r["cpu_busy"],
                "rows_match": match,
            }
        )
    console.print(table)
    top = summary[-1]
    reached = top["goal"] is not None and top["speedup"] >= top["goal"]
    console.print(
        f"at N = {top['gpus']}: speed-up {top['speedup']:.2f} x serial (goal {top['goal']:.1f}): "
        f"{'reached' if reached else 'NOT reached'}; host CPU busy {top['cpu_busy']:.0%} "
        f"(serial {serial['cpu_busy']:.0%}); rows {'match' if verdict else 'DIFFER'}"
    )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
