"""The row model: one measured (or failed) cell of a sweep, or one agentic pilot trial.

A row carries the 26 published fields (``PUBLISHED_KEYS``, in published order, published types and null semantics)
plus native extras (run and cell ids, the measurement window, raw telemetry masks, pre-decision state, engine identity,
per-request statistics). ``to_published`` projects a row onto exactly the 26 keys; ``from_published`` reads one back.

Run-folder files (``RowStore``): ``rows.jsonl`` (native rows) and ``dataset.jsonl`` (the published projection of the
same rows, line for line). Both are append-only and fsynced. A later row for the same cell (a retry that succeeded,
a resumed cell) is appended, never edited in place; readers resolve **the last row per cell id** (``rows.jsonl``) or
**the last row per index** (``dataset.jsonl``), keeping the position of the cell's first appearance.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable, Literal, Sequence

import math

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError, model_validator

from harness.clock_events import POWER_THERMAL_MASK
from harness.errors import DataError, MissingFileError
from harness.grid import SpecConfig
from harness.jsonl import JsonlAppender, read_jsonl, write_jsonl_atomic

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
    """Which server produced a row: ``kind`` (``sglang`` | ``twin``), its version and identity (pid, argv, model ...)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["sglang", "twin"]
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
    clock_event_reasons: StrictInt | None = None  # raw NVML mask of the after-run snapshot (published gpu_throttling source)
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
        raise DataError(f"{where}: not a published-layout row ({detail})", fix="a published row has exactly the 26 keys of harness.rows.PUBLISHED_KEYS")
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


# --- labels, ids, indexes ----------------------------------------------------------------------------------------

_VENDOR_WORDS = {"nvidia", "geforce", "gpu", "corporation", "tesla", "quadro"}


def hardware_label(gpu_name: str | None, twin_profile: str | None = None) -> str:
    """The ``hardware`` value of a row: ``twin:<profile>`` on the twin, else a compact label of the GPU name.

    ``NVIDIA GeForce RTX 4060 Laptop GPU`` -> ``RTX4060_Laptop`` (the published value); ``NVIDIA H200`` -> ``H200``.
    """
    if twin_profile:
        return f"twin:{twin_profile}"
    if not gpu_name or not gpu_name.strip():
        return "unknown_gpu"
    words = [w for w in re.split(r"[^A-Za-z0-9]+", gpu_name) if w and w.lower() not in _VENDOR_WORDS]
    out: list[str] = []
    for w in words:
        # "RTX 4060" -> "RTX4060": a series prefix (letters only) glued to the model number that follows it.
        if out and out[-1].isalpha() and out[-1].isupper() and len(out[-1]) <= 4 and w[:1].isdigit():
            out[-1] = out[-1] + w
        else:
            out.append(w)
    return "_".join(out) or "unknown_gpu"


def make_cell_id(repeat: int, batch_size: int, config: SpecConfig | Sequence[int]) -> str:
    """Filesystem-safe id of a grid cell, e.g. ``r0-bs16-s5k4d16``."""
    s, k, d = config.as_tuple() if isinstance(config, SpecConfig) else tuple(int(v) for v in config)
    return f"r{repeat}-bs{batch_size}-s{s}k{k}d{d}"


def make_pilot_cell_id(suite: str, config_name: str, task: str, trial: int | str = 0) -> str:
    """Filesystem-safe id of a pilot trial, e.g. ``pilot-terminalbench-chosen-regex-log-0``."""
    raw = f"pilot-{suite}-{config_name}-{task}-{trial}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", raw)


def grid_index(
    repeat: int, batch_size: int, config: SpecConfig, batch_sizes: Sequence[int], configs: Sequence[SpecConfig]
) -> int:
    """Published index of a grid cell: whole passes per repeat, then batch sizes, then configs (in their order)."""
    try:
        b = list(batch_sizes).index(batch_size)
        c = list(configs).index(config)
    except ValueError:
        raise DataError(f"cell bs={batch_size} {config} is not in the planned grid", fix="plan the cell before indexing it") from None
    return repeat * len(batch_sizes) * len(configs) + b * len(configs) + c


def throttling_flags(mask: int | None) -> tuple[bool | None, bool | None]:
    """(published ``gpu_throttling`` = any bit set, idle included; power/thermal-only flag) for a raw NVML mask."""
    if mask is None:
        return None, None
    return mask != 0, (mask & POWER_THERMAL_MASK) != 0


# --- builders ----------------------------------------------------------------------------------------------------


def error_row(
    *,
    hardware: str,
    index: int,
    repeat: int | None,
    batch_size: int,
    config: SpecConfig,
    error: str,
    **extras: Any,
) -> SweepRow:
    """A failed grid cell: published identity fields and the error message; every measurement null."""
    if not error:
        raise ValueError("an error row needs a non-empty error message")
    return SweepRow(
        hardware=hardware,
        index=index,
        repeat=repeat,
        batch_size=batch_size,
        steps=config.steps,
        topk=config.topk,
        num_draft_tokens=config.draft_tokens,
        is_baseline=config.is_baseline,
        error=error,
        **extras,
    )


def pilot_row(
    *,
    suite: Literal["terminalbench", "swebench"],
    hardware: str,
    index: int,
    config: SpecConfig,
    note: str = PILOT_NOTE,
    **fields: Any,
) -> SweepRow:
    """An agentic pilot trial with the published pilot semantics enforced.

    ``is_baseline`` false (even for no_spec), ``error`` = ``agentic_pilot_trace: <note>``, ``batch_size`` 1 (the real
    concurrency; pass the launch batch size as ``pilot_server_batch_size``), ``repeat`` and ``step_time_s`` null,
    ``speed_source`` ``<suite>_pilot``. Terminal-Bench rows also null ``gpu_temp_c_before``, ``gpu_mem_used_mb`` and
    ``gpu_throttling`` (their telemetry is window-averaged; keep pre-state in the ``pre_gpu_*`` extras if wanted).
    """
    if suite not in PILOT_SPEED_SOURCES:
        raise ValueError(f"unknown pilot suite {suite!r}; expected one of {sorted(PILOT_SPEED_SOURCES)}")
    forced: dict[str, Any] = {
        "is_baseline": False,
        "error": PILOT_ERROR_PREFIX + note,
        "batch_size": 1,
        "repeat": None,
        "step_time_s": None,
        "speed_source": PILOT_SPEED_SOURCES[suite],
        "retry_mem_fraction": None,
        "pilot_suite": suite,
    }
    if suite == "terminalbench":
        forced.update(gpu_temp_c_before=None, gpu_mem_used_mb=None, gpu_throttling=None)
    data = {**fields, **forced}
    return SweepRow(
        hardware=hardware, index=index, steps=config.steps, topk=config.topk, num_draft_tokens=config.draft_tokens, **data
    )


# --- resolution and the run-folder store ---------------------------------------------------------------------------


def _cell_identity(row: SweepRow) -> tuple[Any, ...]:
    return (row.repeat, row.batch_size, row.steps, row.topk, row.num_draft_tokens, row.is_pilot)


def resolve_latest(rows: Iterable[SweepRow], *, conflicts: list[str] | None = None) -> list[SweepRow]:
    """Last row per cell (``SweepRow.key``) wins, placed where the cell first appeared.

    A later row only replaces an earlier one that describes the same cell (repeat, batch size, config). Two
    different cells under one key are a conflict: a DataError, or, when a ``conflicts`` list is given, a message
    appended to it with both rows kept.
    """
    latest: dict[str, SweepRow] = {}
    for n, row in enumerate(rows):
        key = row.key
        prev = latest.get(key)
        if prev is not None and _cell_identity(prev) != _cell_identity(row):
            msg = (
                f"{key} is used by two different cells: bs={prev.batch_size} {prev.config} repeat {prev.repeat} "
                f"and bs={row.batch_size} {row.config} repeat {row.repeat}"
            )
            if conflicts is None:
                raise DataError(msg, fix="each cell needs its own cell_id / index; a replacement must describe the same cell")
            conflicts.append(msg)
            key = f"{key}#conflict{n}"
        latest[key] = row  # dict keeps first-insertion order; assignment replaces the value only
    return list(latest.values())


def resolve_latest_published(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Published records: last record per ``index`` wins, placed where that index first appeared."""
    latest: dict[Any, dict[str, Any]] = {}
    for rec in records:
        latest[rec.get("index")] = rec
    return list(latest.values())


class RowStore:
    """The rows of one run folder: ``rows.jsonl`` (native) and ``dataset.jsonl`` (published), append-only.

    ``append`` writes the native row, then its published projection, each fsynced. Opening the store repairs a torn
    tail and re-appends any published lines missing after a crash between the two writes, so line *n* of
    ``dataset.jsonl`` is always the projection of line *n* of ``rows.jsonl``. A replacement (retry, resumed cell) is
    a new line; ``latest()`` resolves the last row per cell id.
    """

    ROWS = "rows.jsonl"
    DATASET = "dataset.jsonl"

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.rows_path = self.run_dir / self.ROWS
        self.dataset_path = self.run_dir / self.DATASET
        self._rows: JsonlAppender | None = None
        self._dataset: JsonlAppender | None = None

    # writing
    def open(self) -> "RowStore":
        if self._rows is None:
            self._rows = JsonlAppender(self.rows_path)
            self._dataset = JsonlAppender(self.dataset_path)
            self._sync_dataset()
        return self

    def _sync_dataset(self) -> None:
        native = self.read_all() if self.rows_path.exists() else []
        published = read_jsonl(self.dataset_path) if self.dataset_path.exists() else []
        if len(published) > len(native):
            raise DataError(
                f"{self.dataset_path} has {len(published)} rows but {self.rows_path} only {len(native)}",
                fix="dataset.jsonl is derived from rows.jsonl; delete dataset.jsonl and reopen the run to rebuild it",
            )
        for row in native[len(published):]:
            assert self._dataset is not None
            self._dataset.append(to_published(row))

    def append(self, row: SweepRow) -> None:
        """Append one row to both files (fsynced)."""
        self.open()
        assert self._rows is not None and self._dataset is not None
        self._rows.append(to_native(row))
        self._dataset.append(to_published(row))

    def close(self) -> None:
        for f in (self._rows, self._dataset):
            if f is not None:
                f.close()
        self._rows = self._dataset = None

    def __enter__(self) -> "RowStore":
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # reading
    def read_all(self) -> list[SweepRow]:
        """Every native row in file order, superseded ones included."""
        return [from_native(rec, where=f"{self.rows_path}:{i}") for i, rec in enumerate(read_jsonl(self.rows_path), 1)]

    def latest(self) -> list[SweepRow]:
        """The current row of every cell (last one per cell id), in first-appearance order."""
        if not self.rows_path.exists():
            return []
        return resolve_latest(self.read_all())

    def latest_by_cell(self) -> dict[str, SweepRow]:
        return {r.key: r for r in self.latest()}

    def done_cells(self, *, include_errors: bool = True) -> set[str]:
        """Cell ids that already have a row (optionally only successful ones), for ``--resume``."""
        return {r.key for r in self.latest() if include_errors or not r.is_error}

    def published(self) -> list[dict[str, Any]]:
        """The resolved dataset in the published layout (one record per index, latest wins)."""
        return [to_published(r) for r in self.latest()]

    def write_published(self, path: str | Path) -> int:
        """Write the resolved published dataset to ``path`` atomically; return the row count."""
        records = self.published()
        write_jsonl_atomic(path, records)
        return len(records)


def load_rows(path: str | Path) -> list[SweepRow]:
    """Rows from a run folder (its resolved ``rows.jsonl``) or a JSONL file (native or published records).

    A file's records are resolved like the store's: last row per cell id, or per index when no cell id is present.
    """
    p = Path(path)
    if p.is_dir():
        store = RowStore(p)
        if not store.rows_path.exists():
            if store.dataset_path.exists():
                p = store.dataset_path
            else:
                raise MissingFileError(f"{p} holds no rows.jsonl or dataset.jsonl", fix="pass a run folder or a JSONL file")
        else:
            return store.latest()
    rows = [from_native(rec, where=f"{p}:{i}") for i, rec in enumerate(read_jsonl(p), 1)]
    return resolve_latest(rows)
