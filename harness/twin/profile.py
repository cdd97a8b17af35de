"""Twin profiles: every physical parameter of the twin GPU and of the performance/power model, in one JSON file.

A profile is loaded by name from ``harness/twin/profiles/<name>.json`` (or from a path). The device serves it at
``GET /v1/profile`` so engines use exactly the device's parameters. ``harness twin calibrate`` rewrites the fitted
``perf``/``power`` parameters of the committed profile.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import DataError, MissingFileError

PROFILES_DIR = Path(__file__).parent / "profiles"
DEFAULT_PROFILE = "rtx4060-laptop"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DeviceParams(_Strict):
    """The GPU board: identity, limits, thermal and clock behaviour."""

    name: str = "NVIDIA GeForce RTX 4060 Laptop GPU (twin)"
    driver_version: str = "twin-1.0"
    power_limit_w: float = 80.0
    power_management_limit_w: float = 80.0
    cap_overshoot_frac: float = Field(0.012, description="steady overshoot of the power-cap controller above the limit")
    memory_total_mb: int = 8192
    memory_reserved_mb: int = 160
    memory_base_used_mb: int = 90
    idle_power_w: float = 4.0
    engine_loaded_power_w: float = Field(9.0, description="extra power while an engine holds the GPU (higher P-state)")
    power_noise_w: float = Field(0.35, description="std of the per-tick power jitter")
    dvfs_exponent: float = Field(2.2, description="dynamic power ~ clock_factor ** dvfs_exponent")
    min_clock_factor: float = 0.35
    max_sm_clock_mhz: int = 2370
    idle_sm_clock_mhz: int = 210
    mem_clock_mhz: int = 8001
    idle_mem_clock_mhz: int = 405
    ambient_c: float = 36.0
    ambient_spread_c: float = Field(1.5, description="seeded spread of the ambient temperature per device")
    thermal_resistance_c_per_w: float = 0.42
    thermal_tau_s: float = 45.0
    temp_noise_c: float = 0.3
    slowdown_temp_c: float = 87.0
    hw_slowdown_temp_c: float = 92.0
    slowdown_per_c: float = Field(0.04, description="clock factor lost per degree above the slowdown temperature")
    idle_after_s: float = Field(1.2, description="twin seconds without load before NVML reports the idle reason")
    tick_ms: float = Field(20.0, description="wall ms between physics ticks")


class PerfParams(_Strict):
    """Speculative decoding performance: acceptance and step time (milliseconds at full clocks)."""

    accept_first: float = 0.593
    accept_decay: float = 0.87
    rank_share: float = 0.45
    long_context_tokens: int = 2048
    long_context_accept_floor: float = 0.17
    long_context_scale_tokens: float = 1024.0
    prompt_quality_spread: float = 0.12
    target_mem_ms: float = 9.6
    target_ms_per_token: float = 0.03
    target_compute_knee_tokens: float = 48.0
    target_ms_per_token_above_knee: float = 0.05
    baseline_overhead_ms: float = 0.6
    spec_overhead_ms: float = 1.4
    spec_overhead_ms_per_req: float = 0.05
    draft_step_ms: float = 1.0
    draft_ms_per_token: float = 0.04
    compute_fraction_target: float = 0.35
    compute_fraction_draft: float = 0.5
    step_jitter: float = 0.03
    launch_spread: float = 0.012
    prefill_ms_per_token: float = 0.02
    prefill_fixed_ms: float = 6.0
    sched_gap_ms: float = 0.4


class PowerParams(_Strict):
    """Dynamic power demand (watts above idle + loaded, at full clocks) of each phase of a decode iteration."""

    target_w: float = 68.0
    target_w_per_token: float = 0.08
    target_w_token_sat: float = 128.0
    draft_w: float = 45.0
    overhead_w: float = 22.0
    prefill_w: float = 60.0
    util_target: float = 0.99
    util_draft: float = 0.9
    util_overhead: float = 0.6
    power_spread: float = 0.01


class MemoryParams(_Strict):
    """Memory footprint of an engine: static pool from the mem fraction plus buffers beyond it."""

    weights_mb: float = 2560.0
    context_mb: float = 420.0
    graph_mb_per_bs: float = 18.0
    spec_buffer_mb_per_token: float = 0.9
    spec_graph_mb: float = 160.0


class TwinProfile(_Strict):
    """Everything the twin needs; ``hardware`` is what rows record (``twin:<name>``)."""

    name: str = DEFAULT_PROFILE
    about: str = ""
    device: DeviceParams = DeviceParams()
    perf: PerfParams = PerfParams()
    power: PowerParams = PowerParams()
    memory: MemoryParams = MemoryParams()
    calibration: dict = Field(default_factory=dict, description="fit report written by harness twin calibrate")

    @property
    def hardware(self) -> str:
        return f"twin:{self.name}"


def profile_path(name_or_path: str) -> Path:
    """A profile name (``rtx4060-laptop``) or a path to a JSON file."""
    p = Path(name_or_path)
    if p.suffix == ".json" or p.exists():
        return p
    return PROFILES_DIR / f"{name_or_path}.json"


def load_profile(name_or_path: str = DEFAULT_PROFILE) -> TwinProfile:
    path = profile_path(name_or_path)
    if not path.exists():
        known = ", ".join(sorted(q.stem for q in PROFILES_DIR.glob("*.json"))) or "none"
        raise MissingFileError(f"twin profile not found: {path}", fix=f"use one of: {known}, or a path to a profile JSON")
    try:
        return TwinProfile.model_validate(json.loads(path.read_text()))
    except (ValueError, TypeError) as exc:
        raise DataError(f"invalid twin profile {path}: {exc}", fix="regenerate it with `harness twin calibrate`") from None


def profile_from_dict(data: dict) -> TwinProfile:
    return TwinProfile.model_validate(data)
