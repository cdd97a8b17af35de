"""CPU cost of the sampler sidecar at 10 Hz and 100 Hz against an idle baseline process measured in the same run.

    .venv/bin/python benchmarks/sampler_overhead.py [--seconds 20] [--json out.json]

For each rate it starts a twin GPU device (the probe's backend; its own CPU is not counted), a sampler sidecar
(`harness sampler serve --probe twin --log DIR`) and a baseline process that imports the same modules and sleeps.
After a warm-up it reads user+system CPU of both from /proc over the same interval and prints CPU as % of one
core, the sampler's net cost (sampler - baseline), the ratio to the baseline, peak RSS and the mean sampling
period. Goal: <= 1 % of one core at 10 Hz. Linux only (/proc).
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the test gear: _sampler_testbed

import httpx
from _sampler_testbed import start_sampler, start_twin_gpu
from rich.console import Console
from rich.table import Table

TICK = os.sysconf("SC_CLK_TCK")
GOAL_PCT = 1.0  # percent of one core at 10 Hz
BASELINE_CODE = "import harness.telemetry.server, harness.telemetry.probes, httpx, time\nwhile True: time.sleep(3600)"


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (from /proc/PID/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(rate_hz: float, seconds: float, warmup_s: float) -> dict:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        base = subprocess.Popen([sys.executable, "-c", BASELINE_CODE])
        try:
            with start_twin_gpu(tmp) as gpu, start_sampler(gpu.url, tmp / "log", tmp, rate_hz=rate_hz) as sp:
                time.sleep(warmup_s)
                c0s, c0b, t0 = cpu_s(sp.pid), cpu_s(base.pid), time.monotonic()
                n0 = httpx.get(f"{sp.url}/v1/latest").json()["seq"]
                time.sleep(seconds)
                c1s, c1b, t1 = cpu_s(sp.pid), cpu_s(base.pid), time.monotonic()
                last = httpx.get(f"{sp.url}/v1/latest").json()
                metrics = httpx.get(f"{sp.url}/metrics").text
                rss = rss_mb(sp.pid)
        finally:
            base.terminate()
            base.wait(timeout=10)
    wall = t1 - t0
    overruns = next(
        (float(x.split()[1]) for x in metrics.splitlines() if x.startswith("sampler_loop_overruns_total ")), 0.0
    )
    sampler_pct, base_pct = 100 * (c1s - c0s) / wall, 100 * (c1b - c0b) / wall
    return {
        "rate_hz": rate_hz,
        "seconds": round(wall, 2),
        "sampler_cpu_pct_core": round(sampler_pct, 3),
        "baseline_cpu_pct_core": round(base_pct, 3),
        "net_cpu_pct_core": round(sampler_pct - base_pct, 3),
        "ratio_to_baseline": round(sampler_pct / base_pct, 1)
        if base_pct > 0
        else None,  # None: the baseline used 0 ticks
        "ratio_to_goal": round((sampler_pct - base_pct) / GOAL_PCT, 3) if rate_hz == 10.0 else None,
        "samples": last["seq"] - n0,
        "mean_period_ms": round(1e3 * wall / max(1, last["seq"] - n0), 3),
        "overruns": overruns,
        "sampler_peak_rss_mb": round(rss, 1),
        "cpu_tick_s": 1 / TICK,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="measured interval per rate")
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--rates", default="10,100")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if not Path("/proc/self/stat").exists():
        print("sampler_overhead: needs Linux /proc", file=sys.stderr)
        return 2
    rows = [measure(float(r), args.seconds, args.warmup) for r in args.rates.split(",")]
    table = Table(title="sampler CPU (percent of one core) vs an idle baseline process, same run")
    for col in ("rate Hz", "seconds", "sampler %", "baseline %", "net %", "x baseline", "net / goal", "samples", "mean period ms", "overruns",
                "peak RSS MB"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(*(str(r[k]) for k in ("rate_hz", "seconds", "sampler_cpu_pct_core", "baseline_cpu_pct_core", "net_cpu_pct_core",
                                            "ratio_to_baseline", "ratio_to_goal", "samples", "mean_period_ms", "overruns", "sampler_peak_rss_mb")))  # fmt: skip
    Console(width=160).print(table)
    print(json.dumps(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    ten = next((r for r in rows if r["rate_hz"] == 10.0), None)
    return 0 if ten is None or ten["net_cpu_pct_core"] <= GOAL_PCT else 1


if __name__ == "__main__":
    sys.exit(main())
