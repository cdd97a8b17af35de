"""Check NVML energy measurement on a real GPU (the GPU-free development machine runs it only against the NVML shim).

    .venv/bin/python benchmarks/nvml_check.py [--gpu-index 0] [--seconds 20] [--poll-s 2] [--load]

Prints one JSON object with:
- ``nvml_py``: the installed nvidia-ml-py version; ``identity``: the probe's identity, including which sources
  answer (``power_w_source``: the ``NVML_FI_DEV_POWER_INSTANT`` field, or ``nvmlDeviceGetPowerUsage`` where that
  field is unsupported; ``memory_source``; ``clock_events_source``) and what is ``unsupported``;
- ``latency_ms``: p50/p99 of each NVML read the sampler makes, and of one whole ``NvmlProbe.read()``;
- ``update_period_ms``: how often the energy counter, the instant-power field, the average-power field and
  ``nvmlDeviceGetPowerUsage`` actually change (tight polling for ``--poll-s`` each; smallest and median change
  interval); a field whose ``nvmlReturn`` is not success reports that error instead of a value;
- ``agreement``: over ``--seconds`` of 10 Hz sampling through ``InProcessSampler(NvmlProbe)``, the window energy
  from the energy counter (step and linear edge models) vs the trapezoid of the same samples' ``power_w`` (source:
  ``power_w_source``) and of the average-power field (``NVML_FI_DEV_POWER_AVERAGE``), with the counter removed;
  relative differences. Without an energy counter ``energy_method`` says ``power_integration`` and the counter
  figures and ratios are null. ``--load`` runs a CUDA matmul loop (torch) during the middle third so the window
  contains load edges.
Exit codes: 0 done, 2 no NVML/GPU here (the normal outcome on a machine without an NVIDIA driver).
Nothing here was measured on a GPU by this project yet: run it on the GPU host and keep the JSON with the run.
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
        except Exception as exc:  # noqa: BLE001 - report, do not stop
            return {"error": str(exc)}
        now = time.monotonic()
        if last is not None and v != last[1]:
            changes.append(now)
        last = (now, v)
    gaps = [(b - a) * 1e3 for a, b in zip(changes, changes[1:])]
    return {
        "changes": len(changes),
        "min": pct(gaps, 0.0),
        "median": round(statistics.median(gaps), 3) if gaps else None,
    }


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


def field_reader(nv, h, field_id: int):
    """A reader of one GPU-scope field that raises the field's own NVML error instead of returning garbage."""
    from harness.telemetry.probes import field_value

    ids = [(field_id, getattr(nv, "NVML_POWER_SCOPE_GPU", 0))]

    def read():
        v = nv.nvmlDeviceGetFieldValues(h, ids)[0]
        val = field_value(nv, v)
        if val is None:
            raise nv.NVMLError(v.nvmlReturn)
        return val

    return read


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu-index", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=20.0, help="length of the agreement window")
    ap.add_argument("--poll-s", type=float, default=2.0, help="tight-polling time per update-period measurement")
    ap.add_argument("--load", action="store_true", help="run a CUDA matmul loop (torch) in the middle third")
    args = ap.parse_args()
    from harness.core.errors import HarnessError
    from harness.telemetry.probes import NvmlProbe, _dist_version

    try:
        probe = NvmlProbe(args.gpu_index)
    except HarnessError as exc:
        print(json.dumps({"ok": False, "error": exc.message, "fix": exc.fix}))
        print(f"nvml_check: {exc.message}; this check needs an NVIDIA GPU and driver", file=sys.stderr)
        return 2
    import pynvml as nv

    h = probe.handle
    identity = probe.identity()
    instant, average = (
        field_reader(nv, h, nv.NVML_FI_DEV_POWER_INSTANT),
        field_reader(nv, h, nv.NVML_FI_DEV_POWER_AVERAGE),
    )
    out: dict = {"ok": True, "identity": identity, "nvml_py": _dist_version("nvidia-ml-py")}
    out["latency_ms"] = {
        "total_energy": latency(lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h)),
        "field_power_instant": latency(instant),
        "power_usage": latency(lambda: nv.nvmlDeviceGetPowerUsage(h)),
        "temperature": latency(lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
        "utilization": latency(lambda: nv.nvmlDeviceGetUtilizationRates(h)),
        "memory_v2": latency(lambda: nv.nvmlDeviceGetMemoryInfo(h, nv.nvmlMemory_v2)),
        "memory_v1": latency(lambda: nv.nvmlDeviceGetMemoryInfo(h)),
        "clock_events": latency(lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h)),
        "probe_read": latency(probe.read, n=100),
    }
    out["update_period_ms"] = {
        "total_energy": update_period(lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h), args.poll_s),
        "field_power_instant": update_period(instant, args.poll_s),
        "field_power_average": update_period(average, args.poll_s),
        "power_usage": update_period(lambda: nv.nvmlDeviceGetPowerUsage(h), args.poll_s),
    }
    probe.close()

    from harness.core.clocks import wall_ns
    from harness.telemetry.sampler import InProcessSampler
    from harness.telemetry.windows import compute_window

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
        power_w_source = s.identity().get("power_w_source")
        samples = [r for r in s.core.store.since(-1, 1_000_000) if r.kind == "sample"]
    counter = w.energy_method == "counter"
    lin = compute_window(samples, t0, t1, 0.1, edge_model="linear")
    no_counter = [r.model_copy(update={"energy_mj": None}) for r in samples]
    integ = compute_window(no_counter, t0, t1, 0.1)
    avg_field = [
        r.model_copy(update={"energy_mj": None, "power_w": r.power_avg_w}) for r in samples if r.power_avg_w is not None
    ]
    integ_avg = compute_window(avg_field, t0, t1, 0.1) if avg_field else None

    def rel(x: float | None) -> float | None:
        return None if x is None or not counter or not w.energy_j else round((x - w.energy_j) / w.energy_j, 5)

    out["agreement"] = {
        "seconds": args.seconds, "load": args.load, "load_note": load_note[0] if load_note else None,
        "window": w.model_dump(), "energy_method": w.energy_method,
        "energy_counter_step_j": w.energy_j if counter else None, "energy_counter_linear_j": lin.energy_j if counter else None,
        "power_w_source": power_w_source, "energy_power_w_trapezoid_j": integ.energy_j,
        "energy_average_field_trapezoid_j": integ_avg.energy_j if integ_avg else None,
        "rel_diff_linear_vs_step": rel(lin.energy_j), "rel_diff_power_w_integral_vs_counter": rel(integ.energy_j),
        "rel_diff_average_field_integral_vs_counter": rel(integ_avg.energy_j if integ_avg else None),
    }  # fmt: skip
    print(json.dumps(out, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
