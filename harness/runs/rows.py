"""Rows: the row model (``harness.runs.row_model``, re-exported here), ids and indexes, error and pilot row builders, and the
run-folder store.

Run-folder files (``RowStore``): ``rows.jsonl`` (native rows) and ``dataset.jsonl`` (the published projection of the
same rows, line for line). Both are append-only and fsynced. A later row for the same cell (a retry that succeeded,
a resumed cell) is appended, never edited in place; readers resolve **the last row per cell id** (``rows.jsonl``) or
**the last row per index** (``dataset.jsonl``), keeping the position of the cell's first appearance.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable, Literal, Sequence

from harness.core.errors import DataError, MissingFileError
from harness.core.jsonl import JsonlAppender, read_jsonl, write_jsonl_atomic
from harness.gpu.clock_events import POWER_THERMAL_MASK
from harness.gpu.gpu_pass import GpuPass
from harness.grid import SpecConfig
from harness.runs.row_model import (
    EXTRA_KEYS,
    GRID_SPEED_SOURCES,
    NATIVE_KEYS,
    PILOT_ERROR_PREFIX,
    PILOT_NOTE,
    PILOT_SPEED_SOURCES,
    PUBLISHED_HARDWARE,
    PUBLISHED_KEYS,
    EngineInfo,
    Num,
    SpeedSource,
    SweepRow,
    from_native,
    from_published,
    key_order_problem,
    non_finite_fields,
    to_native,
    to_published,
)

__all__ = [
    "EXTRA_KEYS",
    "GRID_SPEED_SOURCES",
    "NATIVE_KEYS",
    "PILOT_ERROR_PREFIX",
    "PILOT_NOTE",
    "PILOT_SPEED_SOURCES",
    "PUBLISHED_HARDWARE",
    "PUBLISHED_KEYS",
    "EngineInfo",
    "Num",
    "SpeedSource",
    "SweepRow",
    "from_native",
    "from_published",
    "key_order_problem",
    "non_finite_fields",
    "to_native",
    "to_published",
    "PILOT_ROWS",
    "RowStore",
    "error_row",
    "grid_index",
    "hardware_label",
    "load_rows",
    "make_cell_id",
    "make_pilot_cell_id",
    "pass_of",
    "pilot_row",
    "resolve_latest",
    "resolve_latest_published",
    "throttling_flags",
]


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


def cpu_hardware_label(cpu_model: str | None) -> str:
    """The ``hardware`` value of a row measured on a CPU engine: ``cpu:<model>`` (``AMD EPYC 9654`` ->
    ``cpu:AMD_EPYC_9654``), so no CPU row is ever read as a GPU's."""
    name = re.sub(r"\((R|TM)\)", " ", cpu_model or "", flags=re.IGNORECASE).split("@")[0]
    words = [w for w in re.split(r"[^A-Za-z0-9.+-]+", name) if w and w.lower() not in ("cpu", "processor")]
    return "cpu:" + ("_".join(words) or "unknown")


def make_cell_id(repeat: int, batch_size: int, config: SpecConfig | Sequence[int]) -> str:
    """Filesystem-safe id of a grid cell, e.g. ``r0-bs16-s5k4d16``."""
    s, k, d = config.as_tuple() if isinstance(config, SpecConfig) else tuple(int(v) for v in config)
    return f"r{repeat}-bs{batch_size}-s{s}k{k}d{d}"


def pass_of(row: SweepRow) -> GpuPass:
    """The GPU settings of the sweep pass a native row ran in (a label None: that dimension not swept)."""
    return GpuPass.of_extras(row.extras)


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
        raise DataError(
            f"cell bs={batch_size} {config} is not in the planned grid", fix="plan the cell before indexing it"
        ) from None
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
        hardware=hardware,
        index=index,
        steps=config.steps,
        topk=config.topk,
        num_draft_tokens=config.draft_tokens,
        **data,
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
                raise DataError(
                    msg, fix="each cell needs its own cell_id / index; a replacement must describe the same cell"
                )
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


PILOT_ROWS = "dataset_rows.jsonl"
"""A pilot run folder's rows (published pilot semantics), written by the pilot runner, read by the dataset tools."""


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
        for row in native[len(published) :]:
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
                raise MissingFileError(
                    f"{p} holds no rows.jsonl or dataset.jsonl", fix="pass a run folder or a JSONL file"
                )
        else:
            return store.latest()
    rows = [from_native(rec, where=f"{p}:{i}") for i, rec in enumerate(read_jsonl(p), 1)]
    return resolve_latest(rows)
