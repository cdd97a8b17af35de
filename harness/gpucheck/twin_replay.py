"""The twin against the truth: replay a measured load timeline through the twin GPU's power/thermal model
(``harness.twin.device.gpu.TwinGpu``, no pydantic needed) with an H200 profile derived from the measurement."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.twin.device.gpu import TwinGpu

BASE_PROFILE = Path(__file__).resolve().parents[1] / "twin" / "profiles" / "rtx4060-laptop.json"


class _ReplayGpu(TwinGpu):
    """A twin GPU whose clock is set by the replay (device time = the measured wall time), not the wall clock."""

    replay_ns = 0

    def now_ns(self) -> int:
        return self.replay_ns


def derive_params(idle_w: float, loaded_w: float, limits: dict[str, Any], memory_total_mb: float | None, temps: tuple[float, float] | None,
                  dvfs_exponent: float | None, max_sm_mhz: int | None, name: str) -> dict[str, Any]:  # fmt: skip
    """Device parameters of a Hopper twin from measured idle / full-load power, the limits, temperatures and clocks."""
    params: dict[str, Any] = dict(json.loads(BASE_PROFILE.read_text())["device"])
    default_w = limits.get("default_w") or limits.get("enforced_w") or 700.0
    params.update(name=f"{name} (twin, derived by gpu_check)", driver_version="twin-1.0",
                  power_limit_w=default_w, power_management_limit_w=default_w,
                  power_limit_min_w=limits.get("min_w") or default_w * 0.3, power_limit_max_w=limits.get("max_w") or default_w,
                  idle_power_w=round(idle_w, 2), engine_loaded_power_w=0.0, power_noise_w=0.0, cap_overshoot_frac=0.0,
                  idle_after_s=0.3)  # fmt: skip
    if memory_total_mb:
        params["memory_total_mb"] = int(memory_total_mb)
    if dvfs_exponent and 0.5 < dvfs_exponent < 5:
        params["dvfs_exponent"] = round(dvfs_exponent, 3)
    if max_sm_mhz:
        params["max_sm_clock_mhz"] = int(max_sm_mhz)
    if temps and loaded_w > idle_w + 1:
        t_idle, t_load = temps
        r_th = max(0.005, (t_load - t_idle) / (loaded_w - idle_w))
        params.update(
            thermal_resistance_c_per_w=round(r_th, 5), ambient_c=round(t_idle - r_th * idle_w, 2), ambient_spread_c=0.0
        )
    params["_dynamic_full_load_w"] = round(max(0.0, loaded_w - idle_w), 2)
    return params


def replay(
    params: dict[str, Any], records: list[dict[str, Any]], segments: list[tuple[int, int, float]]
) -> dict[str, Any]:
    """Drive the twin with the measured utilization (``records``' ``utilization_pct``) and power limit over each
    (start_ns, end_ns, limit_w) segment; compare its power at every sample and its energy with the counter's."""
    dev = {k: v for k, v in params.items() if not k.startswith("_")}
    profile = SimpleNamespace(device=SimpleNamespace(**dev), name="h200-measured", hardware="twin:h200-measured")
    dyn_full = float(params["_dynamic_full_load_w"])
    errs: list[float] = []
    twin_j = meas_j = 0.0
    curve: list[tuple[float, float, float]] = []
    for start_ns, end_ns, limit_w in segments:
        rs = [
            r
            for r in records
            if start_ns <= r["t_wall_ns"] <= end_ns and r.get("power_w") is not None and r.get("energy_mj") is not None
        ]
        if len(rs) < 3:
            continue
        gpu = _ReplayGpu(profile, seed=0)  # type: ignore[arg-type]  # a duck-typed profile: the model reads .device only
        gpu.replay_ns = rs[0]["t_wall_ns"]
        gpu.t_ns = gpu.replay_ns
        gpu.seg_t, gpu.seg_e, gpu.seg_p = [gpu.t_ns], [0.0], [gpu.power_w]
        gpu.temp_c = float(rs[0].get("temperature_c") or gpu.temp_c)
        gpu.set_power_limit(min(max(limit_w, dev["power_limit_min_w"]), dev["power_limit_max_w"]))
        gpu.lease("load", 0.0, lease_s=3600.0)
        for a, b in zip(rs, rs[1:]):
            gpu.replay_ns = a["t_wall_ns"]
            util = float(a.get("utilization_pct") or 0.0) / 100.0
            gpu.activity("load", util > 0, dyn_full * util, util)
            e0 = gpu.energy_at(a["t_wall_ns"])
            gpu.replay_ns = b["t_wall_ns"]
            gpu.tick()
            dt = (b["t_wall_ns"] - a["t_wall_ns"]) / 1e9
            p_twin = (gpu.energy_at(b["t_wall_ns"]) - e0) / dt if dt > 0 else gpu.power_w
            p_meas = (b["energy_mj"] - a["energy_mj"]) / 1000.0 / dt if dt > 0 else float(b["power_w"])
            errs.append(p_twin - p_meas)
            twin_j += p_twin * dt
            meas_j += p_meas * dt
            curve.append(
                (round((b["t_wall_ns"] - records[0]["t_wall_ns"]) / 1e9, 2), round(p_meas, 1), round(p_twin, 1))
            )
    if not errs:
        return {"error": "too few samples with power and energy to replay"}
    return {
        "rms_w": round(math.sqrt(sum(e * e for e in errs) / len(errs)), 2), "mean_err_w": round(sum(errs) / len(errs), 2),
        "energy_twin_j": round(twin_j, 1), "energy_measured_j": round(meas_j, 1),
        "energy_err": round((twin_j - meas_j) / meas_j, 5) if meas_j else None, "intervals": len(errs),
        "curve_t_s_measured_w_twin_w": curve[:: max(1, len(curve) // 120)],
    }  # fmt: skip


def validate_with_pydantic(params: dict[str, Any]) -> str:
    """Check the derived parameters against the project's ``DeviceParams`` where pydantic is importable."""
    try:
        from harness.twin.profile import DeviceParams
    except ImportError as exc:
        return f"not validated here ({exc}); validate with harness.twin.profile.DeviceParams on the dev machine"
    DeviceParams(**{k: v for k, v in params.items() if not k.startswith("_")})
    return "valid harness.twin.profile.DeviceParams"
