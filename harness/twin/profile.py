"""Twin profiles: every physical parameter of the twin GPU and of the performance/power model, in one JSON file.

A profile is loaded by name from ``harness/twin/profiles/<name>.json`` (or from a path). The device serves it at
``GET /v1/profile`` so engines use exactly the device's parameters. ``harness twin calibrate`` rewrites the fitted
``perf``/``power`` parameters of the committed profile.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from harness.core.errors import DataError, MissingFileError
from harness.engine.twin_profiles import DEFAULT_PROFILE, PROFILES_DIR, known_profiles


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DeviceParams(_Strict):
    """The GPU board: identity, limits, thermal and clock behaviour."""

    name: str = "NVIDIA GeForce RTX 4060 Laptop GPU (twin)"
    driver_version: str = "twin-1.0"
    compute_capability: tuple[int, int] = Field(
        (8, 9),
        description="CUDA compute capability (sm89 = Ada): decides "
        "sglang's default attention backend and which backends it accepts",
    )
    power_limit_w: float = 80.0
    power_management_limit_w: float = 80.0
    power_limit_min_w: float = Field(35.0, description="lowest limit the board accepts (NVML constraints min)")
    power_limit_max_w: float = Field(80.0, description="highest limit the board accepts (NVML constraints max)")
    cap_overshoot_frac: float = Field(0.005, description="steady overshoot of the power-cap controller above the limit")
    memory_total_mb: int = 8192
    memory_reserved_mb: int = 160
    memory_base_used_mb: int = 90
    idle_power_w: float = 4.0
    engine_loaded_power_w: float = Field(9.0, description="extra power while an engine holds the GPU (higher P-state)")
    power_noise_w: float = Field(0.35, description="std of the per-tick power jitter")
    dvfs_exponent: float = Field(2.2, description="dynamic power ~ clock_factor ** dvfs_exponent")
    min_clock_factor: float = 0.35
    max_sm_clock_mhz: int = 2370
    min_sm_clock_mhz: int = Field(
        840,
        description="lowest SM clock a lock accepts (nvmlDeviceGetSupportedGraphicsClocks "
        "lists max down to this in sm_clock_step_mhz steps)",
    )
    sm_clock_step_mhz: int = Field(15, description="step between supported SM clocks")
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
    util_avg_s: float = Field(
        0.5,
        description="time constant (twin s) of the trailing average NVML reports as utilization "
        "(NVML: share of the last 1/6-1 s sample period with a kernel running)",
    )
    tick_ms: float = Field(20.0, description="wall ms between physics ticks")


class PerfParams(_Strict):
    """Speculative decoding performance: acceptance, step time (ms at full clocks), prefill, launch."""

    accept_first: float = Field(0.593, description="P(draft top-1 is the target token) at depth 1, prompt quality 1")
    accept_decay: float = Field(0.87, description="per-depth decay of the top-1 acceptance")
    accept_decay_power: float = Field(1.0, description="a_d = accept_first * accept_decay ** ((d-1) ** power)")
    rank_share: float = Field(0.45, description="geometric share of the remaining mass taken by each lower rank")
    chain_depth_factor: float = Field(
        1.0,
        description="topk == 1 (sglang's chain drafting): multiplier on the top-1 "
        "acceptance at depth >= 2, fitted to the published (3,1,4) accept length",
    )
    long_context_tokens: int = Field(2048, description="the draft head's training context")
    long_context_floor: float = Field(0.3, description="quality multiplier far beyond the training context")
    long_context_scale_tokens: float = 1500.0
    prompt_quality_spread: float = Field(
        0.12, description="+- spread of per-prompt draft quality (content predictability)"
    )
    target_mem_ms: float = 9.6
    target_ms_per_token: float = 0.03
    target_knee_tokens: float = 48.0
    target_ms_per_token_above_knee: float = 0.05
    baseline_overhead_ms: float = 0.6
    spec_overhead_ms: float = 1.4
    spec_overhead_ms_per_req: float = 0.05
    draft_step_ms: float = 1.0
    tree_ms_per_candidate: float = Field(
        0.002, description="tree build/select cost per request per candidate node (topk + (steps-1) topk^2)"
    )
    draft_ms_per_token: float = 0.04
    stretch_target: float = Field(0.5, description="share of target time that slows with the SM clock")
    stretch_draft: float = Field(0.6, description="share of draft time that slows with the SM clock")
    step_jitter: float = Field(0.03, description="lognormal sigma of one iteration's duration")
    launch_spread: float = Field(0.012, description="sigma of a per-launch step-time factor (run-to-run spread)")
    prefill_fixed_ms: float = 4.0
    prefill_ms_per_token: float = 0.02
    request_overhead_ms: float = Field(12.0, description="tokenize/detokenize/HTTP latency per request (twin ms)")
    launch_import_s: float = 14.0
    launch_weights_s: float = 4.0
    launch_graph_s_per_bs: float = 0.35
    launch_draft_graph_s_per_node: float = 0.4


class PowerParams(_Strict):
    """Dynamic power demand (watts above idle + loaded, at full clocks) of each phase of a decode iteration."""

    target_w: float = 62.0
    target_w_per_token: float = 0.08
    target_w_token_sat: float = Field(
        128.0, description="verified tokens at which the target's extra power saturates (1 - exp(-T/sat))"
    )
    draft_w: float = 40.0
    overhead_w: float = 18.0
    prefill_w: float = 55.0
    util_target: float = Field(
        1.0, description="share of a target-verify phase with a kernel running (NVML utilization)"
    )
    util_draft: float = Field(1.0, description="the same for drafting (CUDA graphs: kernels back to back)")
    util_overhead: float = Field(
        0.99, description="the same for the per-step overhead (EAGLE's tree and sampling kernels)"
    )
    power_spread: float = Field(0.01, description="sigma of a per-launch power factor")


class MemoryParams(_Strict):
    """Memory footprint of an engine: the static pool (mem fraction x total) plus buffers outside it."""

    weights_mb: float = Field(2700.0, description="target + draft weights (inside the static pool)")
    min_kv_mb: float = Field(256.0, description="smallest KV cache sglang starts with")
    context_mb: float = Field(500.0, description="CUDA context, allocator, torch workspace")
    graph_mb_per_bs: float = Field(25.0, description="CUDA-graph activations per captured batch size")
    spec_slot_mb: float = Field(
        0.5,
        description="draft/verify logits kept while serving, per (bs x (draft tokens + steps x topk)): one fp32 row over a 128k vocabulary",
    )
    capture_slot_mb: float = Field(2.5, description="per-slot graph-capture workspace, released after capture")
    tree_node_mb: float = Field(
        0.3, description="tree masks and scores per (bs x draft tokens x steps x topk), released after capture"
    )


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
        known = ", ".join(known_profiles()) or "none"
        raise MissingFileError(
            f"twin profile not found: {path}", fix=f"use one of: {known}, or a path to a profile JSON"
        )
    try:
        return TwinProfile.model_validate(json.loads(path.read_text()))
    except (ValueError, TypeError) as exc:
        raise DataError(
            f"invalid twin profile {path}: {exc}", fix="regenerate it with `harness twin calibrate`"
        ) from None


def profile_from_dict(data: dict) -> TwinProfile:
    return TwinProfile.model_validate(data)
