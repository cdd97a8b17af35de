"""Validation: the dataset rules (schema, key order, configs, completeness, baselines, pilot rows) and a run folder's
rows against the grid its manifest planned. Rules are documented in docs/dataset.md."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Sequence

from pydantic import BaseModel, Field

from harness.core.errors import DataError, HarnessError
from harness.core.jsonl import read_jsonl
from harness.dataset.source import (
    PILOT_SOURCES,
    Layout,
    ReadRows,
    config_problem,
    detect_layout,
    invalid_window,
    resolve_input,
    window_summary,
)
from harness.gpu.gpu_pass import GpuPass
from harness.grid import ACTIONS, SpecConfig
from harness.runs.rows import (
    GRID_SPEED_SOURCES,
    NATIVE_KEYS,
    PILOT_ERROR_PREFIX,
    PUBLISHED_KEYS,
    RowStore,
    SweepRow,
    from_native,
    key_order_problem,
    non_finite_fields,
    pass_of,
    resolve_latest,
    to_published,
)


class Issue(BaseModel):
    code: str
    message: str
    where: str | None = None


class ValidationReport(BaseModel):
    """What ``validate`` found. ``ok`` is False when any error was found (warnings never fail)."""

    path: str
    layout: Layout
    n_records: int
    n_rows: int
    n_superseded: int
    n_grid: int = 0
    n_pilot: int = 0
    n_error_rows: int = 0
    repeats: list[int] = Field(default_factory=list)
    batch_sizes: list[int] = Field(default_factory=list)
    configs_per_group: dict[str, int] = Field(default_factory=dict)
    hardware: list[str] = Field(default_factory=list)
    errors: list[Issue] = Field(default_factory=list)
    warnings: list[Issue] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def error(self, code: str, message: str, where: str | None = None) -> None:
        self.errors.append(Issue(code=code, message=message, where=where))

    def warn(self, code: str, message: str, where: str | None = None) -> None:
        self.warnings.append(Issue(code=code, message=message, where=where))


def is_pilot(row: SweepRow) -> bool:
    """A pilot row (pilot speed source or the ``agentic_pilot_trace: `` marker), as ``SweepRow.is_pilot``."""
    return row.is_pilot


class Inspection(ReadRows):
    """What ``inspect`` read (records, every parsed row, the resolved rows) and its validation report."""

    report: ValidationReport


def validate_file(path: str | Path, *, subset: bool = False, strict: bool = False) -> ValidationReport:
    """Validate a dataset file or run folder. Unreadable input raises DataError; rule violations go in the report."""
    return inspect(path, subset=subset, strict=strict).report


def inspect(path: str | Path, *, subset: bool = False, strict: bool = False) -> Inspection:
    """Read and check a dataset file or run folder (a run folder against its manifest's planned grid).

    A torn or malformed line, an empty file or a missing path raises DataError; everything else is in the report.
    """
    p = resolve_input(path)
    records = read_jsonl(p, allow_torn_tail=False)
    if not records:
        raise DataError(f"{p} holds no rows", fix="point at a dataset with at least one row")
    layout = detect_layout(records)
    report = ValidationReport(path=str(p), layout=layout, n_records=len(records), n_rows=0, n_superseded=0)
    rows: list[SweepRow] = []
    numbers: list[int] = []  # each parsed row's record number
    for i, rec in enumerate(records, 1):
        where = f"record {i}"
        problem = key_order_problem(rec) if layout == "published" else _native_order_problem(rec)
        if problem:
            report.error("key_order", problem, where)
        bad = non_finite_fields(rec)
        if bad:
            report.error("non_finite", f"NaN or infinity in {', '.join(bad)}", where)
            continue
        try:
            rows.append(from_native(rec, where=where))
            numbers.append(i)
        except DataError as exc:
            report.error("schema", exc.message)
    plan = None
    if Path(path).is_dir() and p.name == RowStore.ROWS:  # a sweep run folder (a pilot run holds dataset_rows.jsonl)
        plan = _planned_grid(Path(path), report)
    if report.errors and not rows:
        return Inspection(path=p, report=report, records=records, all_rows=rows, rows=[])
    conflicts: list[str] = []
    resolved = resolve_latest(rows, conflicts=conflicts)
    for msg in conflicts:
        report.error("index_duplicate", msg)
    _check_measured_twice(rows, numbers, report)
    report.n_rows, report.n_superseded = len(resolved), len(rows) - len(resolved)
    if report.n_superseded:
        msg = f"{report.n_superseded} superseded rows (append-only replacements); the last row per cell is used"
        (report.error if strict else report.warn)("superseded", msg)
    check_rows(resolved, report, subset=subset, plan=plan)
    invalid = [r for r in resolved if invalid_window(r)]
    if invalid:
        msg = (
            f"{len(invalid)} successful rows have an invalid measurement window ({window_summary(invalid)}); "
            "consumers exclude them unless --invalid-windows keep"
        )
        (report.error if strict else report.warn)("invalid_window", msg)
    if Path(path).is_dir() and p.name == RowStore.ROWS:
        _check_run_folder_pair(Path(path), rows, report)
    return Inspection(path=p, report=report, records=records, all_rows=rows, rows=resolved)


def _check_measured_twice(rows: Sequence[SweepRow], numbers: Sequence[int], report: ValidationReport) -> None:
    """A later row may replace only an error row of its cell (a ``--retry-errors`` re-run); a measured row twice
    (a file concatenated or edited by hand) would let the last copy win silently."""
    seen: dict[str, tuple[SweepRow, int]] = {}
    for row, n in zip(rows, numbers):
        prev = seen.get(row.key)
        if prev is not None and not prev[0].error:
            records, cell = f"records {prev[1]} and {n}", f", cell {row.cell_id}" if row.cell_id else ""
            twice = (
                f"index {row.index} appears twice ({records}{cell})"
                if prev[0].index == row.index
                else f"cell {row.cell_id} appears twice (indexes {prev[0].index} and {row.index}, {records})"
            )
            report.error(
                "index_duplicate",
                f"{twice}: a measured row is never replaced, only an error row (by a --retry-errors re-run); "
                "keep one of the two records",
                f"record {n}",
            )
        seen[row.key] = (row, n)


class Plan(BaseModel):
    """The grid a sweep planned (from its manifest): configs, batch sizes, repeats and the cells' indexes."""

    configs: list[SpecConfig]
    batch_sizes: list[int]
    repeats: int
    indexes: dict[str, int]  # cell id -> planned index
    cells: dict[str, tuple[int, int, SpecConfig]] = Field(default_factory=dict)  # cell id -> (repeat, bs, config)
    active: bool = False  # --strategy active: the run measures only the cells that can change the recipe

    model_config = {"arbitrary_types_allowed": True}


def _planned_grid(run_dir: Path, report: ValidationReport) -> Plan | None:
    """The run's planned grid from ``manifest.json``; a missing manifest is none, an unusable one a report error."""
    from harness.runs.manifest import MANIFEST, read_options
    from harness.runs.plan import plan_cells

    if not (run_dir / MANIFEST).is_file():
        return None
    try:
        opts = read_options(run_dir)
    except HarnessError as exc:
        source = getattr(exc, "source", None)
        where = f" (from {source})" if source else ""
        report.error("manifest", f"{exc.message}{where}; the grid is judged without the run's plan")
        return None
    cells = plan_cells(opts)
    return Plan(
        configs=opts.spec_configs,
        batch_sizes=list(opts.batch_sizes),
        repeats=opts.repeats,
        indexes={c.cell_id: c.index for c in cells},
        cells={c.cell_id: (c.repeat, c.batch_size, c.config) for c in cells},
        active=opts.strategy == "active",
    )


def _check_run_folder_pair(run_dir: Path, native: Sequence[SweepRow], report: ValidationReport) -> None:
    """In a run folder, dataset.jsonl must be the published projection of rows.jsonl, line for line."""
    published_path = run_dir / RowStore.DATASET
    if not published_path.is_file():
        report.warn("dataset_missing", f"{published_path} is missing (reopening the run rebuilds it)")
        return
    try:
        published = read_jsonl(published_path, allow_torn_tail=False)
    except DataError as exc:
        report.error("dataset_unreadable", exc.message)
        return
    if len(published) != len(native):
        report.error("dataset_mismatch", f"dataset.jsonl has {len(published)} lines, rows.jsonl {len(native)}")
        return
    bad = [i for i, (pub, row) in enumerate(zip(published, native), 1) if pub != to_published(row)]
    if bad:
        report.error("dataset_mismatch", f"dataset.jsonl differs from the projection of rows.jsonl at lines {bad[:10]}")


def _check_plan_coverage(grid: Sequence[SweepRow], plan: Plan, report: ValidationReport) -> None:
    """Rows outside the plan; planned (repeat, batch size) groups with no row at all (groups with some rows are
    checked per config). An active sweep's unmeasured cells are the strategy's choice (docs/active.md), not gaps."""
    ids = {r.cell_id for r in grid if r.cell_id}
    stray = sorted({r.cell_id for r in grid if r.cell_id and plan.cells and r.cell_id not in plan.cells})
    if stray:
        report.error("unplanned_cell", f"rows for cells the run did not plan: {', '.join(stray[:6])}")
    if plan.active:
        report.warn(
            "active_subset",
            f"--strategy active: {len(ids & set(plan.cells))} of {len(plan.cells)} planned "
            "cells measured (the others could not change the recipe)",
        )
        return
    seen = {(r.repeat, r.batch_size) for r in grid}
    empty = [(rep, bs) for rep in range(plan.repeats) for bs in plan.batch_sizes if (rep, bs) not in seen]
    if empty:
        shown = ", ".join(f"repeat {rep} bs {bs}" for rep, bs in empty[:6]) + (" ..." if len(empty) > 6 else "")
        report.error("unplanned_missing", f"{len(empty)} planned (repeat, batch size) groups have no row: {shown}")
    # per cell: a config present in its group under another power cap still leaves this cap's cell missing
    present = {(r.repeat, r.batch_size, r.config) for r in grid}
    lacking = [cid for cid, key in plan.cells.items() if cid not in ids and key in present]
    if lacking:
        shown = ", ".join(lacking[:6]) + (" ..." if len(lacking) > 6 else "")
        report.error("config_missing", f"{len(lacking)} planned cells have no row: {shown}")


def _native_order_problem(rec: dict[str, Any]) -> str | None:
    """A native record: the 26 published keys first, in order, then only known extras."""
    keys = list(rec)
    if tuple(keys[: len(PUBLISHED_KEYS)]) != PUBLISHED_KEYS:
        return key_order_problem({k: rec[k] for k in keys if k in PUBLISHED_KEYS}) or (
            "native row: the 26 published keys must come first, in published order"
        )
    unknown = [k for k in keys if k not in NATIVE_KEYS]
    return f"unknown keys {unknown}" if unknown else None


def check_rows(
    rows: Sequence[SweepRow], report: ValidationReport, *, subset: bool = False, plan: Plan | None = None
) -> None:
    """The dataset rules (schema aside): configs, baselines, completeness, pilot rules, index contiguity.

    With a ``plan`` (a run folder's manifest) completeness is judged against the planned grid: every planned cell
    present, no row outside the plan, each at its planned index; no ``--subset`` needed for a subset sweep.
    """
    grid = [r for r in rows if not is_pilot(r)]
    pilots = [r for r in rows if is_pilot(r)]
    report.n_grid, report.n_pilot = len(grid), len(pilots)
    report.n_error_rows = sum(1 for r in grid if r.error)
    report.hardware = sorted({r.hardware for r in rows})
    if len(report.hardware) > 1:
        report.warn("hardware_mixed", f"rows from several hardware labels: {report.hardware}")

    # indexes: unique, contiguous from 0, ascending in file order
    indexes = [r.index for r in rows]
    dup = sorted(i for i, c in Counter(indexes).items() if c > 1)
    if dup:
        report.error("index_duplicate", f"indexes used by more than one cell: {dup[:10]}")
    if sorted(set(indexes)) != list(range(len(set(indexes)))) and not (plan is not None and plan.active):
        missing = sorted(set(range(max(indexes) + 1)) - set(indexes))
        report.error(
            "index_gap",
            f"indexes are not contiguous from 0: missing {missing[:10]}{' ...' if len(missing) > 10 else ''}",
        )
    if indexes != sorted(indexes):
        report.warn("index_order", "rows are not in ascending index order")

    # grid rows
    for r in grid:
        where = f"index {r.index}"
        cfg = r.config
        if config_problem(cfg, published_only=False):
            report.error("invalid_config", config_problem(cfg, published_only=False) or "", where)
        elif plan is not None:
            if cfg not in plan.configs or r.batch_size not in plan.batch_sizes or (r.repeat or 0) >= plan.repeats:
                report.error(
                    "unplanned_cell",
                    f"bs={r.batch_size} {cfg} repeat {r.repeat} is not in the run's planned grid",
                    where,
                )
            elif r.cell_id and plan.indexes.get(r.cell_id, r.index) != r.index:
                report.error(
                    "index_mismatch",
                    f"{r.cell_id} has index {r.index}; the plan gives {plan.indexes[r.cell_id]}",
                    where,
                )
        elif cfg not in ACTIONS:
            # a custom grid (--steps/--topk/--draft-tokens) may hold valid configs outside the published 19
            (report.warn if subset else report.error)(
                "unknown_config", config_problem(cfg, published_only=True) or "", where
            )
        if r.is_baseline != cfg.is_baseline:
            report.error("is_baseline", f"is_baseline is {r.is_baseline} for config {cfg}", where)
        if r.repeat is None:
            report.error("repeat_missing", "a grid row needs a repeat number", where)
        if r.error:
            if r.speed_tok_s is not None:
                report.warn("error_with_speed", "an error row carries a speed", where)
            continue
        if r.speed_source not in GRID_SPEED_SOURCES:
            report.error(
                "speed_source",
                f"grid row speed_source is {r.speed_source!r}; expected one of {GRID_SPEED_SOURCES}",
                where,
            )
        needed = ("accept_length", "speed_tok_s", "wall_clock_s", "total_output_tokens")
        missing_vals = [k for k in needed if getattr(r, k) is None]
        if missing_vals:
            report.error("measurement_missing", f"successful row lacks {missing_vals}", where)
        if r.speed_source == "step_time" and r.step_time_s is None:
            report.error("step_time_missing", "speed_source is step_time but step_time_s is null", where)
        if r.energy_joules is None:
            report.warn("energy_missing", "successful row without energy_joules", where)
        if r.retry_mem_fraction is not None and not 0 < r.retry_mem_fraction < 1:
            report.error("retry_mem_fraction", f"retry_mem_fraction {r.retry_mem_fraction} outside (0, 1)", where)

    # completeness: each (repeat, batch size) has every config exactly once
    groups: dict[tuple[int, int], list[SpecConfig]] = defaultdict(list)
    per_cap: dict[tuple[int, int], list[tuple[SpecConfig, GpuPass]]] = defaultdict(
        list
    )  # a config once per cap and clock
    for r in grid:
        if r.repeat is not None:
            groups[(r.repeat, r.batch_size)].append(r.config)
            per_cap[(r.repeat, r.batch_size)].append((r.config, pass_of(r)))
    report.repeats = sorted({k[0] for k in groups})
    report.batch_sizes = sorted({k[1] for k in groups})
    report.configs_per_group = {f"r{rep}/bs{bs}": len(cfgs) for (rep, bs), cfgs in sorted(groups.items())}
    union = {c for cfgs in groups.values() for c in cfgs}
    expected = set(plan.configs) if plan is not None else union if subset else set(ACTIONS)
    if plan is not None:
        _check_plan_coverage(grid, plan, report)
    partial = plan is not None and plan.active  # an active sweep measures a chosen subset of its plan
    for (rep, bs), cfgs in sorted(groups.items()):
        where = f"repeat {rep}, batch size {bs}"
        twice = sorted({c for (c, _cap), n in Counter(per_cap[(rep, bs)]).items() if n > 1})
        if twice:
            hint = (
                ""
                if any(p.swept for _c, p in per_cap[(rep, bs)])
                else " (a sweep over several power caps or SM clocks? The published layout has no cap or clock column: "
                "load the run folder or its rows.jsonl)"
            )
            report.error(
                "config_duplicate", f"configs appear more than once: {', '.join(map(str, twice))}{hint}", where
            )
        lacking = [c for c in (plan.configs if plan is not None else ACTIONS) if c in expected and c not in cfgs]
        if lacking and not partial:
            report.error(
                "config_missing",
                f"{len(set(cfgs))} of {len(expected)} configs; missing {', '.join(map(str, lacking))}",
                where,
            )
    for rep in report.repeats:
        bss = {bs for (r_, bs) in groups if r_ == rep}
        if bss != set(report.batch_sizes) and not partial:
            report.error(
                "batch_size_missing", f"repeat {rep} lacks batch sizes {sorted(set(report.batch_sizes) - bss)}"
            )

    # baselines: every batch size needs at least one successful baseline; each group should have one
    for bs in report.batch_sizes:
        base = [r for r in grid if r.batch_size == bs and r.config.is_baseline]
        if not base:
            report.error("baseline_missing", "no baseline (0,0,0) row", f"batch size {bs}")
        elif all(r.error for r in base):
            report.error("baseline_failed", "every baseline (0,0,0) row is an error row", f"batch size {bs}")
        elif any(r.error for r in base):
            report.warn("baseline_error", "a baseline row is an error row", f"batch size {bs}")

    # pilot rows
    last_grid = max((r.index for r in grid), default=-1)
    for r in pilots:
        where = f"index {r.index}"
        if r.is_baseline:
            report.error("pilot_is_baseline", "a pilot row must have is_baseline false", where)
        if not (r.error or "").startswith(PILOT_ERROR_PREFIX):
            report.error("pilot_error", f"a pilot row's error must start with {PILOT_ERROR_PREFIX!r}", where)
        if r.speed_source not in PILOT_SOURCES:
            report.error(
                "pilot_speed_source",
                f"pilot speed_source is {r.speed_source!r}; expected one of {sorted(PILOT_SOURCES)}",
                where,
            )
        if r.batch_size != 1:
            report.error(
                "pilot_batch_size", f"a pilot row has batch_size 1 (the real concurrency), got {r.batch_size}", where
            )
        if r.repeat is not None or r.step_time_s is not None:
            report.error("pilot_nulls", "a pilot row has null repeat and step_time_s", where)
        if r.speed_source == "terminalbench_pilot":
            set_ = [k for k in ("gpu_temp_c_before", "gpu_mem_used_mb", "gpu_throttling") if getattr(r, k) is not None]
            if set_:
                report.error("pilot_terminalbench_nulls", f"Terminal-Bench rows have null {set_}", where)
        if r.config not in ACTIONS:
            report.error("unknown_config", f"pilot config {r.config} is not one of the published actions", where)
        if r.index <= last_grid:
            report.error(
                "pilot_position", "pilot rows come after every grid row (their index continues the grid's)", where
            )
