"""Sampler window energy vs the twin device's exact /truth/energy.

    .venv/bin/python benchmarks/sampler_accuracy.py [--quick] [--json out.json]

Starts a twin GPU device and a sampler sidecar per time scale (real time at 10 Hz; 10x at 100 Hz wall = 10 Hz on
the device clock), drives load with two patterns (``random``: the load changes at random instants; ``edge``: the
harness pattern, load starts right after the window opens and stops right before it closes), and prints per window
length the worst and mean |relative error| of the default ``step`` edge model and of plain ``linear`` interpolation.
Goals: <= 0.5 % for windows >= 5 s, <= 2 % for 1 s windows (10 Hz sampling).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the test gear: _sampler_testbed

from _sampler_testbed import TwinLoad, measure_windows, start_sampler, start_twin_gpu
from rich.console import Console
from rich.table import Table

from harness.telemetry.client import TelemetryClient


def bound(device_s: float) -> float:
    return 0.005 if device_s >= 5.0 else 0.02


def run(plan: list[tuple[float, list[tuple[float, int]]]], scenarios: list[str], seed: int) -> list[dict]:
    rows: list[dict] = []
    for scale, lengths in plan:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            with (
                start_twin_gpu(tmp, time_scale=scale, seed=seed) as gpu,
                start_sampler(gpu.url, None, tmp, rate_hz=10.0 * scale) as sp,
            ):
                client = TelemetryClient(sp.url)
                client.wait_ready(10)
                load = TwinLoad(gpu.url)
                time.sleep(0.3)
                try:
                    for scenario in scenarios:
                        for device_s, count in lengths:
                            res = measure_windows(client, load, scenario=scenario, device_s=device_s, count=count, time_scale=scale,
                                                  seed=seed, edge_models=("linear",))  # fmt: skip
                            step = [abs(r["rel_err"]) for r in res if r["rel_err"] is not None]
                            lin = [abs(r["rel_err_linear"]) for r in res if r["rel_err_linear"] is not None]
                            rows.append({
                                "scenario": scenario, "device_s": device_s, "time_scale": scale, "rate_hz_wall": 10.0 * scale,
                                "rate_hz_device": 10.0, "windows": len(res), "valid": sum(r["valid"] for r in res),
                                "energy_missing": len(res) - len(step),
                                "step_max": max(step) if step else None, "step_mean": statistics.mean(step) if step else None,
                                "linear_max": max(lin) if lin else None, "linear_mean": statistics.mean(lin) if lin else None,
                                "bound": bound(device_s), "pass": bool(step) and len(step) == len(res) and max(step) <= bound(device_s),
                                "reasons": sorted({x for r in res for x in r["reasons"]}),
                            })  # fmt: skip
                finally:
                    load.close()
                    client.close()
    return rows


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.3%}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer windows (about 25 s instead of about 70 s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = ap.parse_args()
    if args.quick:
        plan = [(1.0, [(1.0, 2), (5.0, 1)]), (10.0, [(1.0, 6), (5.0, 4)])]
    else:
        plan = [(1.0, [(1.0, 3), (5.0, 2)]), (10.0, [(1.0, 10), (5.0, 10), (30.0, 3)])]
    t0 = time.monotonic()
    rows = run(plan, ["random", "edge"], args.seed)
    table = Table(title=f"sampler window energy vs /truth/energy ({time.monotonic() - t0:.0f} s)")
    for col in ("scenario", "window (device s)", "time scale", "Hz wall", "n", "valid", "step max |err|", "step mean", "linear max |err|",
                "linear mean", "goal", "ok"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["scenario"], f"{r['device_s']:g}", f"{r['time_scale']:g}", f"{r['rate_hz_wall']:g}", str(r["windows"]), str(r["valid"]),
                      _pct(r["step_max"]), _pct(r["step_mean"]), _pct(r["linear_max"]), _pct(r["linear_mean"]), f"{r['bound']:.1%}",
                      "yes" if r["pass"] else "NO")  # fmt: skip
    Console(width=160).print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0 if all(r["pass"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
