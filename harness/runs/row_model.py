"""The row model: one measured (or failed) cell of a sweep, or one agentic pilot trial, and its two layouts.

A row carries the 26 published fields (``PUBLISHED_KEYS``, in published order, published types and null semantics)
plus native extras (run and cell ids, the measurement window, raw telemetry masks, pre-decision state, engine identity,
per-request statistics). ``to_published`` projects a row onto exactly the 26 keys; ``from_published`` reads one back;
``from_native`` / ``to_native`` are the full record. Import it through ``harness.runs.rows`` (which re-exports all of it).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from harness.core.errors import DataError
from harness.grid import SpecConfig

PUBLISHED_KEYS: tuple[str, ...] = (
    "hardware", "index", "repeat", "batch_size", "steps", "topk", "num_draft_tokens",
    "is_baseline", "error",
    "accept_length", "speed_tok_s", "speed_source", "step_time_s",
    "wall_clock_s", "wall_clock_tok_s", "total_output_tokens",
    "energy_joules", "avg_power_watts", "joules_per_token",
    "gpu_temp_c_before", "gpu_temp_c", "gpu_power_w", "gpu_util_pct",
    "gpu_mem_used_mb", "gpu_throttling", "retry_mem_fraction",
)  # fmt: skip
"""The 26 keys of the published dataset, in published order."""

PUBLISHED_HARDWARE = "RTX4060_Laptop"
PILOT_ERROR_PREFIX = "agentic_pilot_trace: "
PILOT_NOTE = (
    "agentic trial measured over whole-agent wall time (tool execution and retries included); "
    "not comparable with the synthetic grid, so it is kept out of baselines and reward training"
)
GRID_SPEED_SOURCES = ("step_time", "wall_clock")
PILOT_SPEED_SOURCES = {"terminalbench": "terminalbench_pilot", "swebench": "swebench_pilot"}
SpeedSource = Literal["step_time", "wall_clock", "terminalbench_pilot", "swebench_pilot"]

Num = StrictInt | StrictFloat
"""A number that keeps its JSON type (an int stays an int), so published rows round-trip exactly; bools rejected."""


class EngineInfo(BaseModel):
    """Which server produced a row: ``kind`` (``sglang`` | ``vllm`` | ``twin``), the engine API it speaks (``api``:
    sglang or vllm; the twin's is the engine it emulates), that API's version and identity (pid, argv, model ...)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["sglang", "vllm", "twin"]
    api: Literal["sglang", "vllm"] = "sglang"
    version: str | None = None
    identity: dict[str, Any] = Field(default_factory=dict)


class SweepRow(BaseModel):
    """One row: the 26 published fields (first, in order) plus native extras (all optional)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # --- published fields, in published order -------------------------------------------------------------------
    hardware: StrictStr
    index: StrictInt = Field(ge=0)
    repeat: StrictInt | None = Field(default=None, ge=0)
    batch_size: StrictInt = Field(ge=1)
    steps: StrictInt = Field(ge=0)
    topk: StrictInt = Field(ge=0)
    num_draft_tokens: StrictInt = Field(ge=0)
    is_baseline: StrictBool
    error: StrictStr | None = None
    accept_length: Num | None = None
    speed_tok_s: Num | None = None
    speed_source: SpeedSource | None = None
    step_time_s: Num | None = None
    wall_clock_s: Num | None = None
    wall_clock_tok_s: Num | None = None
    total_output_tokens: StrictInt | None = None
    energy_joules: Num | None = None
    avg_power_watts: Num | None = None
    joules_per_token: Num | None = None
    gpu_temp_c_before: Num | None = None
    gpu_temp_c: Num | None = None
    gpu_power_w: Num | None = None
    gpu_util_pct: Num | None = None
    gpu_mem_used_mb: Num | None = None
    gpu_throttling: StrictBool | None = None
    retry_mem_fraction: Num | None = None

    # --- native extras -------------------------------------------------------------------------------------------
    row_schema: StrictInt = 1
    run_id: str | None = None
    cell_id: str | None = None
    attempt: StrictInt | None = None  # 1 = first launch; 2.. = retry-ladder or resume attempts
    recorded_wall_ns: StrictInt | None = None  # UTC epoch ns when the row was written
    # measurement window (UTC epoch wall ns) and its verdict from the sampler
    window_start_ns: StrictInt | None = None
    window_end_ns: StrictInt | None = None
    window_duration_s: Num | None = None  # device clock (twin time on the twin)
    window_wall_duration_s: Num | None = None
    window_valid: StrictBool | None = None
    window_reasons: list[str] = Field(default_factory=list)
    window_sample_count: StrictInt | None = None
    window_coverage: Num | None = None
    window_avg_util_pct: Num | None = None
    window_max_temp_c: Num | None = None
    window_max_power_w: Num | None = None
    window_clock_event_reasons_or: StrictInt | None = None  # OR of the raw mask over the window's samples
    clock_event_reasons: StrictInt | None = (
        None  # raw NVML mask of the after-run snapshot (published gpu_throttling source)
    )
    gpu_throttling_power_thermal: StrictBool | None = None  # same snapshot, idle bit masked: power/thermal bits only
    energy_source: str | None = None  # counter | power_integration | None
    accept_length_source: str | None = None  # server_info | per_request | default
    # pre-decision state: read BEFORE the measured window (the published after-run columns are hindsight)
    pre_gpu_temp_c: Num | None = None
    pre_gpu_mem_used_mb: Num | None = None
    pre_gpu_util_pct: Num | None = None
    pre_gpu_power_w: Num | None = None
    # device and launch
    power_limit_w: Num | None = None
    sm_clock_locked_mhz: Num | None = None  # the pass's locked SM clock (--sm-clocks); null: unlocked or not swept
    gpu_name: str | None = None
    gpu_uuid: str | None = None
    mem_fraction: Num | None = None
    launch_s: Num | None = None
    cell_wall_s: Num | None = None  # whole cell on the wall clock: launch + warm-up + measurement + stop
    engine: EngineInfo | None = None
    sglang_version: str | None = None
    attention_backend: str | None = None  # the backend the server resolved (server info), not just the flag
    time_scale: Num | None = None
    # per-request statistics (from each response's meta_info, never from counters of an earlier batch)
    n_requests: StrictInt | None = None
    req_accept_length_mean: Num | None = None
    req_accept_length_p50: Num | None = None
    req_latency_mean_s: Num | None = None
    req_latency_p50_s: Num | None = None
    req_latency_p95_s: Num | None = None
    # energy windows: which one fed energy_joules / avg_power_watts / joules_per_token, and both of them
    energy_window: Literal["measured", "steady"] | None = None
    window_energy: dict[str, Any] = Field(default_factory=dict)  # kind -> harness.telemetry.steady.WindowEnergy fields
    # pilot rows only
    pilot_suite: Literal["terminalbench", "swebench"] | None = None
    pilot_task: str | None = None
    pilot_config_name: str | None = None
    pilot_server_batch_size: StrictInt | None = None
    pilot_success: StrictBool | None = None
    extras: dict[str, Any] = Field(default_factory=dict)  # anything else a producer wants to keep

    @model_validator(mode="after")
    def _finite(self) -> "SweepRow":
        """NaN and infinity are never measurements: a row holding one is rejected (JSON readers accept them)."""
        bad = non_finite_fields(self.model_dump())
        if bad:
            raise ValueError(f"non-finite number in {', '.join(bad)} (NaN or infinity is never a measurement)")
        return self

    @property
    def config(self) -> SpecConfig:
        return SpecConfig(self.steps, self.topk, self.num_draft_tokens)

    @property
    def is_pilot(self) -> bool:
        return self.speed_source in PILOT_SPEED_SOURCES.values() or (self.error or "").startswith(PILOT_ERROR_PREFIX)

    @property
    def is_error(self) -> bool:
        """True for a failed grid cell (pilot rows carry a non-null ``error`` by design and are not failures)."""
        return bool(self.error) and not self.is_pilot

    @property
    def key(self) -> str:
        """The identity later rows replace by: the cell id, or ``index:<n>`` for rows without one."""
        return self.cell_id or f"index:{self.index}"


def non_finite_fields(obj: Any, prefix: str = "") -> list[str]:
    """Dotted names of every NaN or infinite float inside ``obj`` (a record, nested dicts and lists included)."""
    if isinstance(obj, float):
        return [] if math.isfinite(obj) else [prefix or "(value)"]
    if isinstance(obj, dict):
        return [n for k, v in obj.items() for n in non_finite_fields(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(obj, (list, tuple)):
        return [n for i, v in enumerate(obj) for n in non_finite_fields(v, f"{prefix}[{i}]")]
    return []


NATIVE_KEYS: tuple[str, ...] = tuple(SweepRow.model_fields)
EXTRA_KEYS: tuple[str, ...] = tuple(k for k in NATIVE_KEYS if k not in PUBLISHED_KEYS)
assert NATIVE_KEYS[: len(PUBLISHED_KEYS)] == PUBLISHED_KEYS


# --- projections -------------------------------------------------------------------------------------------------


def to_published(row: SweepRow) -> dict[str, Any]:
    """Exactly the 26 published keys, in published order."""
    data = row.model_dump(include=set(PUBLISHED_KEYS))
    return {k: data[k] for k in PUBLISHED_KEYS}


def to_native(row: SweepRow) -> dict[str, Any]:
    """The full native record (published keys first, then extras) as written to ``rows.jsonl``."""
    return row.model_dump(mode="json")


def _validation_message(exc: ValidationError, where: str) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "(row)"
        parts.append(f"{loc}: {err['msg']}")
    more = f" (+{exc.error_count() - 5} more)" if exc.error_count() > 5 else ""
    return f"{where}: " + "; ".join(parts) + more


def from_published(record: dict[str, Any], *, where: str = "row") -> SweepRow:
    """Read a published-layout record. Every one of the 26 keys must be present and no other key; raises DataError."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}", fix="one JSON object per line")
    missing = [k for k in PUBLISHED_KEYS if k not in record]
    unknown = [k for k in record if k not in PUBLISHED_KEYS]
    if missing or unknown:
        detail = "; ".join(
            x for x in (f"missing keys {missing}" if missing else "", f"unknown keys {unknown}" if unknown else "") if x
        )
        raise DataError(
            f"{where}: not a published-layout row ({detail})",
            fix="a published row has exactly the 26 keys of harness.runs.rows.PUBLISHED_KEYS",
        )
    return from_native(record, where=where)


def from_native(record: dict[str, Any], *, where: str = "row") -> SweepRow:
    """Read a native (or published) record into a SweepRow; raises DataError naming the bad fields."""
    try:
        return SweepRow.model_validate(record)
    except ValidationError as exc:
        raise DataError(_validation_message(exc, where), fix="check the field types against docs/dataset.md") from None


def key_order_problem(record: dict[str, Any]) -> str | None:
    """Why a published record's keys are not exactly PUBLISHED_KEYS in order, or None when they are."""
    keys = list(record)
    if keys == list(PUBLISHED_KEYS):
        return None
    if set(keys) == set(PUBLISHED_KEYS):
        first = next(i for i, (a, b) in enumerate(zip(keys, PUBLISHED_KEYS)) if a != b)
        return f"keys out of order: position {first} is {keys[first]!r}, expected {PUBLISHED_KEYS[first]!r}"
    missing = [k for k in PUBLISHED_KEYS if k not in record]
    unknown = [k for k in keys if k not in PUBLISHED_KEYS]
    bits = ([f"missing {missing}"] if missing else []) + ([f"unknown {unknown}"] if unknown else [])
    return "keys differ from the published 26: " + ", ".join(bits)
