"""Check NVML energy measurement on a real GPU (cannot run on the GPU-free development machine).

    .venv/bin/python benchmarks/nvml_check.py [--gpu-index 0] [--seconds 20] [--load]

Prints one JSON object with:
- ``latency_ms``: p50/p99 of each NVML read the sampler makes, and of one whole ``NvmlProbe.read()``;
- ``update_period_ms``: how often the energy counter, the instant-power field, the average-power field and the
  legacy ``nvmlDeviceGetPowerUsage`` actually change (tight polling, smallest and median change interval);
- ``agreement``: over ``--seconds`` of 10 Hz sampling through ``InProcessSampler(NvmlProbe)``, the window energy
  from the counter (step and linear edge models) vs the trapezoid of 10 Hz instant power (the same samples with the
  counter removed) and vs the legacy average power; relative differences. ``--load`` runs a CUDA matmul loop
  (torch) during the middle third so the window contains load edges.
Exit codes: 0 done, 2 no NVML/GPU here (the normal outcome on a machine without an NVIDIA driver).
Nothing here was measured by this project yet: run it on the GPU host and keep the JSON with the run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 4)


def latency(fn, n: int = 200) -> dict:
    ts, err = [], None
    for _ in range(n):
        t = time.perf_counter()
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - report, do not stop
            err = str(exc)
            break
        ts.append((time.perf_counter() - t) * 1e3)
    return {"p50": pct(ts, 0.5), "p99": pct(ts, 0.99), "error": err}


def update_period(fn, seconds: float = 2.0) -> dict:
    """Poll ``fn`` as fast as possible; intervals between value changes (ms)."""
    changes, last, t_end = [], None, time.monotonic() + seconds
    while time.monotonic() < t_end:
        try:
            v = fn()
        except Exception as exc:  # noqa: BLE001
            return {"error": str(exc)}
        now = time.monotonic()
        if last is not None and v != last[1]:
            changes.append(now)
        last = (now, v)
    gaps = [(b - a) * 1e3 for a, b in zip(changes, changes[1:])]
    return {"changes": len(changes), "min": pct(gaps, 0.0), "median": round(statistics.median(gaps), 3) if gaps else None}


def load_gpu(stop: threading.Event, index: int) -> str | None:
    try:
        import torch
    except ImportError:
        return "torch not installed"
    if not torch.cuda.is_available():
        return "torch without CUDA"
    a = torch.randn(8192, 8192, device=f"cuda:{index}", dtype=torch.float16)
    while not stop.is_set():
        (a @ a).sum().item()
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu-index", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--load", action="store_true", help="run a CUDA matmul loop (torch) in the middle third")
    args = ap.parse_args()
    from harness.errors import HarnessError
    from harness.telemetry.probes import NvmlProbe

    try:
        probe = NvmlProbe(args.gpu_index)
    except HarnessError as exc:
        print(json.dumps({"ok": False, "error": exc.message, "fix": exc.fix}))
        print(f"nvml_check: {exc.message}; this check needs an NVIDIA GPU and driver", file=sys.stderr)
        return 2
    import pynvml as nv

    h = probe._h  # noqa: SLF001 - the check exercises the probe's own handle
    fields = [(nv.NVML_FI_DEV_POWER_INSTANT, nv.NVML_POWER_SCOPE_GPU)]
    avg_field = [(nv.NVML_FI_DEV_POWER_AVERAGE, nv.NVML_POWER_SCOPE_GPU)]
    out: dict = {"ok": True, "identity": probe.identity(), "nvml_py": getattr(nv, "__version__", None)}
    out["latency_ms"] = {
        "total_energy": latency(lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h)),
        "field_power_instant": latency(lambda: nv.nvmlDeviceGetFieldValues(h, fields)),
        "power_usage_legacy": latency(lambda: nv.nvmlDeviceGetPowerUsage(h)),
        "temperature": latency(lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
        "utilization": latency(lambda: nv.nvmlDeviceGetUtilizationRates(h)),
        "memory_v2": latency(lambda: nv.nvmlDeviceGetMemoryInfo(h, nv.nvmlMemory_v2)),
        "clock_events": latency(lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h)),
        "probe_read": latency(probe.read, n=100),
    }
    out["update_period_ms"] = {
        "total_energy": update_period(lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h)),
        "field_power_instant": update_period(lambda: nv.nvmlDeviceGetFieldValues(h, fields)[0].value.uiVal),
        "field_power_average": update_period(lambda: nv.nvmlDeviceGetFieldValues(h, avg_field)[0].value.uiVal),
        "power_usage_legacy": update_period(lambda: nv.nvmlDeviceGetPowerUsage(h)),
    }
    probe.close()

    from harness.telemetry.sampler import InProcessSampler
    from harness.telemetry.windows import compute_window
    from harness.timeutil import wall_ns

    stop = threading.Event()
    load_note: list[str | None] = []
    with InProcessSampler(NvmlProbe(args.gpu_index), rate_hz=10.0) as s:
        time.sleep(0.5)
        t0 = wall_ns()
        if args.load:
            time.sleep(args.seconds / 3)
            th = threading.Thread(target=lambda: load_note.append(load_gpu(stop, args.gpu_index)), daemon=True)
            th.start()
            time.sleep(args.seconds / 3)
            stop.set()
            th.join()
            time.sleep(args.seconds / 3)
        else:
            time.sleep(args.seconds)
        t1 = wall_ns()
        w = s.window(t0, t1)
        samples = [r for r in s.core.store.since(-1, 1_000_000) if r.kind == "sample"]
    lin = compute_window(samples, t0, t1, 0.1, edge_model="linear")
    no_counter = [r.model_copy(update={"energy_mj": None}) for r in samples]
    integ = compute_window(no_counter, t0, t1, 0.1)
    legacy = [r.model_copy(update={"energy_mj": None, "power_w": r.power_avg_w}) for r in samples if r.power_avg_w is not None]
    integ_avg = compute_window(legacy, t0, t1, 0.1) if legacy else None

    def rel(x: float | None) -> float | None:
        return None if x is None or not w.energy_j else round((x - w.energy_j) / w.energy_j, 5)

    out["agreement"] = {
        "seconds": args.seconds, "load": args.load, "load_note": load_note[0] if load_note else None,
        "window": w.model_dump(), "energy_counter_step_j": w.energy_j, "energy_counter_linear_j": lin.energy_j,
        "energy_instant_power_trapezoid_j": integ.energy_j, "energy_average_power_trapezoid_j": integ_avg.energy_j if integ_avg else None,
        "rel_diff_linear_vs_step": rel(lin.energy_j), "rel_diff_instant_integral_vs_counter": rel(integ.energy_j),
        "rel_diff_average_integral_vs_counter": rel(integ_avg.energy_j if integ_avg else None),
    }  # fmt: skip
    print(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
