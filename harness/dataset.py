"""Dataset tools: load, validate, merge, compare and export sweep datasets (published or native layout).

Inputs are a run folder (``RUN_DIR/rows.jsonl``, else ``RUN_DIR/dataset.jsonl``) or a JSONL file. Records are read
strictly (a torn or malformed line is an error here: these tools judge finished data) and resolved like the run-folder
store: the last record per cell id (native) or per index (published) wins. Rules are documented in docs/dataset.md.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import tempfile
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Iterable, Literal, Sequence

from pydantic import BaseModel, Field

from harness.errors import DataError, HarnessError, MissingFileError, OutputError, UsageError
from harness.extras import needs
from harness.grid import ACTIONS, SpecConfig, violated_rule
from harness.jsonl import read_jsonl, write_jsonl_atomic
from harness.rows import (
    GRID_SPEED_SOURCES,
    NATIVE_KEYS,
    PILOT_ERROR_PREFIX,
    PILOT_SPEED_SOURCES,
    PUBLISHED_KEYS,
    RowStore,
    SweepRow,
    from_native,
    key_order_problem,
    non_finite_fields,
    resolve_latest,
    to_native,
    to_published,
)

Layout = Literal["published", "native"]
PILOT_SOURCES = set(PILOT_SPEED_SOURCES.values())
PILOT_ROWS = "dataset_rows.jsonl"  # a pilot run folder's rows (pilots/common.py)


# --- loading -----------------------------------------------------------------------------------------------------


def resolve_input(path: str | Path) -> Path:
    """A run folder -> its rows.jsonl (else dataset.jsonl; a pilot run's dataset_rows.jsonl); a file -> itself."""
    p = Path(path)
    if p.is_dir():
        for name in (RowStore.ROWS, RowStore.DATASET, PILOT_ROWS):
            if (p / name).is_file():
                return p / name
        raise MissingFileError(
            f"{p} is a folder without rows.jsonl, dataset.jsonl or {PILOT_ROWS}", fix="pass a run folder or a JSONL file"
        )
    if not p.exists():
        raise MissingFileError(f"file not found: {p}", fix="check the path (a run folder holds rows.jsonl and dataset.jsonl)")
    return p


WindowRule = Literal["exclude", "keep", "fail"]
"""What consumers do with successful rows whose measurement window is invalid (``window_valid`` false)."""

WINDOW_RULE_HELP = "rows whose measurement window is invalid: exclude (default), keep (use them as measured) or fail"

CONSUMER_SOFT_CODES = frozenset({
    "config_missing", "batch_size_missing", "index_gap", "baseline_missing", "baseline_failed", "unplanned_missing",
    "dataset_missing", "dataset_mismatch", "dataset_unreadable", "manifest",
})
"""Validation errors a consumer may proceed past (as warnings): an unfinished run, a stale derived dataset.jsonl, an
unreadable manifest. Every other validation error (schema, non-finite numbers, key order, duplicate cells, index
conflicts, invalid configs) stops every consumer."""


class Loaded(BaseModel):
    """A dataset read by the one loader: all records, the resolved rows it hands to consumers, what it set aside."""

    model_config = {"arbitrary_types_allowed": True}

    path: Path
    layout: Layout
    records: list[dict[str, Any]]
    all_rows: list[SweepRow]
    rows: list[SweepRow]
    excluded: list[SweepRow] = Field(default_factory=list)  # invalid-window rows left out (``windows="exclude"``)
    flagged: list[SweepRow] = Field(default_factory=list)  # invalid-window rows kept (``windows="keep"``)
    warnings: list[str] = Field(default_factory=list)

    @property
    def n_superseded(self) -> int:
        return len(self.all_rows) - len(self.rows) - len(self.excluded)

    def notes(self) -> list[str]:
        """One line per thing a consumer should tell the user (exclusions, kept invalid windows, warnings)."""
        out = [f"{w}" for w in self.warnings]
        if self.excluded:
            out.append(f"{len(self.excluded)} rows with an invalid measurement window excluded ({_window_summary(self.excluded)}); "
                       "--invalid-windows keep uses them")
        if self.flagged:
            out.append(f"{len(self.flagged)} rows with an invalid measurement window kept by --invalid-windows keep "
                       f"({_window_summary(self.flagged)})")
        return out


def _window_summary(rows: Sequence[SweepRow], limit: int = 5) -> str:
    reasons = Counter(reason for r in rows for reason in (r.window_reasons or ["invalid"]))
    idx = ", ".join(str(r.index) for r in rows[:limit]) + (" ..." if len(rows) > limit else "")
    return f"indexes {idx}; reasons " + ", ".join(f"{k} x{n}" for k, n in reasons.most_common())


def invalid_window(row: SweepRow) -> bool:
    """A successful row whose measurement window the sampler judged invalid (published rows carry no verdict)."""
    return not row.error and row.window_valid is False


def print_notes(loaded: Loaded) -> None:
    """Print the loader's notes to stderr (yellow), for every consumer command."""
    from rich.console import Console

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    for note in loaded.notes():
        console.print("[yellow]note:[/] ", end="")
        console.print(note, markup=False)


def detect_layout(records: Sequence[dict[str, Any]]) -> Layout:
    """``published`` when no record carries a key beyond the 26, else ``native``."""
    published = set(PUBLISHED_KEYS)
    return "published" if all(set(r) <= published for r in records) else "native"


def config_problem(cfg: SpecConfig, *, published_only: bool) -> str | None:
    """Why a row's config is unacceptable: it breaks sglang's rules, or (``published_only``) is not one of the 19."""
    rule = violated_rule(*cfg.as_tuple())
    if rule is not None:
        return f"config breaks sglang's rules: {rule}"
    if cfg.topk == 1 and cfg.draft_tokens != cfg.steps + 1:
        return f"config {cfg} is not rewritten (topk 1 runs with num_draft_tokens = steps + 1)"
    if published_only and cfg not in ACTIONS:
        return f"config {cfg} is not one of the {len(ACTIONS)} published actions"
    return None


def load(path: str | Path, *, published_only: bool = False, windows: WindowRule = "exclude") -> Loaded:
    """The one loader every consumer uses (train, evaluate, report, merge, export, compare).

    It runs ``validate``'s checks (a run folder against the grid its manifest planned) and raises one DataError
    listing the problems unless all of them are in ``CONSUMER_SOFT_CODES`` (those become warnings). A torn last line,
    NaN or infinity, duplicate cells and conflicting indexes always stop it. ``published_only`` requires configs from
    the 19 published actions. ``windows`` decides the fate of successful rows with an invalid measurement window.
    """
    if windows not in ("exclude", "keep", "fail"):
        raise UsageError(f"--invalid-windows must be exclude, keep or fail, got {windows!r}", fix=WINDOW_RULE_HELP)
    insp = inspect(path, subset=not published_only)
    report = insp.report
    fatal = [i for i in report.errors if i.code not in CONSUMER_SOFT_CODES]
    if fatal:
        listed = "; ".join(f"{i.code}{f' at {i.where}' if i.where else ''}: {i.message}" for i in fatal[:4])
        more = f" (+{len(fatal) - 4} more)" if len(fatal) > 4 else ""
        raise DataError(f"{insp.path} cannot be used: {listed}{more}",
                        fix=f"harness dataset validate {path} lists every problem; fix or remove those rows")
    warnings = [f"{i.code}: {i.message}" + (f" ({i.where})" if i.where else "")
                for i in report.errors if i.code in CONSUMER_SOFT_CODES][:5]
    bad = [r for r in insp.rows if invalid_window(r)]
    if bad and windows == "fail":
        raise DataError(f"{insp.path}: {len(bad)} rows have an invalid measurement window ({_window_summary(bad)})",
                        fix="--invalid-windows exclude leaves them out, --invalid-windows keep uses them as measured")
    rows = [r for r in insp.rows if not (windows == "exclude" and invalid_window(r))]
    return Loaded(path=insp.path, layout=report.layout, records=insp.records, all_rows=insp.all_rows, rows=rows,
                  excluded=bad if windows == "exclude" else [], flagged=bad if windows == "keep" else [], warnings=warnings)


def load_many(paths: Iterable[str | Path], *, published_only: bool = False, windows: WindowRule = "exclude") -> list[SweepRow]:
    out: list[SweepRow] = []
    for p in paths:
        loaded = load(p, published_only=published_only, windows=windows)
        print_notes(loaded)
        out.extend(loaded.rows)
    return out


# --- validation --------------------------------------------------------------------------------------------------


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


class Inspection(BaseModel):
    """What ``inspect`` read: the report, the records, every parsed row and the resolved rows."""

    model_config = {"arbitrary_types_allowed": True}

    path: Path
    report: ValidationReport
    records: list[dict[str, Any]]
    all_rows: list[SweepRow]
    rows: list[SweepRow]


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
    report.n_rows, report.n_superseded = len(resolved), len(rows) - len(resolved)
    if report.n_superseded:
        msg = f"{report.n_superseded} superseded rows (append-only replacements); the last row per cell is used"
        (report.error if strict else report.warn)("superseded", msg)
    check_rows(resolved, report, subset=subset, plan=plan)
    invalid = [r for r in resolved if invalid_window(r)]
    if invalid:
        msg = (f"{len(invalid)} successful rows have an invalid measurement window ({_window_summary(invalid)}); "
               "consumers exclude them unless --invalid-windows keep")
        (report.error if strict else report.warn)("invalid_window", msg)
    if Path(path).is_dir() and p.name == RowStore.ROWS:
        _check_run_folder_pair(Path(path), rows, report)
    return Inspection(path=p, report=report, records=records, all_rows=rows, rows=resolved)


class Plan(BaseModel):
    """The grid a sweep planned (from its manifest): configs, batch sizes, repeats and the cells' indexes."""

    configs: list[SpecConfig]
    batch_sizes: list[int]
    repeats: int
    indexes: dict[str, int]  # cell id -> planned index
    cells: dict[str, tuple[int, int, SpecConfig]] = Field(default_factory=dict)  # cell id -> (repeat, bs, config)

    model_config = {"arbitrary_types_allowed": True}


def _planned_grid(run_dir: Path, report: ValidationReport) -> Plan | None:
    """The run's planned grid from ``manifest.json``; a missing manifest is none, an unusable one a report error."""
    from harness.manifest import MANIFEST, read_options
    from harness.sweep import plan_cells

    if not (run_dir / MANIFEST).is_file():
        return None
    try:
        opts = read_options(run_dir)
    except HarnessError as exc:
        report.error("manifest", f"{exc.message}; the grid is judged without the run's plan")
        return None
    cells = plan_cells(opts)
    return Plan(configs=opts.spec_configs, batch_sizes=list(opts.batch_sizes), repeats=opts.repeats,
                indexes={c.cell_id: c.index for c in cells},
                cells={c.cell_id: (c.repeat, c.batch_size, c.config) for c in cells})


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
    """Planned (repeat, batch size) groups with no row at all (groups with some rows are checked per config)."""
    seen = {(r.repeat, r.batch_size) for r in grid}
    empty = [(rep, bs) for rep in range(plan.repeats) for bs in plan.batch_sizes if (rep, bs) not in seen]
    if empty:
        shown = ", ".join(f"repeat {rep} bs {bs}" for rep, bs in empty[:6]) + (" ..." if len(empty) > 6 else "")
        report.error("unplanned_missing", f"{len(empty)} planned (repeat, batch size) groups have no row: {shown}")
    # per cell: a config present in its group under another power cap still leaves this cap's cell missing
    ids = {r.cell_id for r in grid if r.cell_id}
    present = {(r.repeat, r.batch_size, r.config) for r in grid}
    lacking = [cid for cid, key in plan.cells.items() if cid not in ids and key in present]
    if lacking:
        shown = ", ".join(lacking[:6]) + (" ..." if len(lacking) > 6 else "")
        report.error("config_missing", f"{len(lacking)} planned cells have no row: {shown}")
    stray = sorted({r.cell_id for r in grid if r.cell_id and plan.cells and r.cell_id not in plan.cells})
    if stray:
        report.error("unplanned_cell", f"rows for cells the run did not plan: {', '.join(stray[:6])}")


def _native_order_problem(rec: dict[str, Any]) -> str | None:
    """A native record: the 26 published keys first, in order, then only known extras."""
    keys = list(rec)
    if tuple(keys[: len(PUBLISHED_KEYS)]) != PUBLISHED_KEYS:
        return key_order_problem({k: rec[k] for k in keys if k in PUBLISHED_KEYS}) or (
            "native row: the 26 published keys must come first, in published order"
        )
    unknown = [k for k in keys if k not in NATIVE_KEYS]
    return f"unknown keys {unknown}" if unknown else None


def check_rows(rows: Sequence[SweepRow], report: ValidationReport, *, subset: bool = False, plan: Plan | None = None) -> None:
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
    if sorted(set(indexes)) != list(range(len(set(indexes)))):
        missing = sorted(set(range(max(indexes) + 1)) - set(indexes))
        report.error("index_gap", f"indexes are not contiguous from 0: missing {missing[:10]}{' ...' if len(missing) > 10 else ''}")
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
                report.error("unplanned_cell", f"bs={r.batch_size} {cfg} repeat {r.repeat} is not in the run's planned grid", where)
            elif r.cell_id and plan.indexes.get(r.cell_id, r.index) != r.index:
                report.error("index_mismatch", f"{r.cell_id} has index {r.index}; the plan gives {plan.indexes[r.cell_id]}", where)
        elif cfg not in ACTIONS:
            # a custom grid (--steps/--topk/--draft-tokens) may hold valid configs outside the published 19
            (report.warn if subset else report.error)("unknown_config", config_problem(cfg, published_only=True) or "", where)
        if r.is_baseline != cfg.is_baseline:
            report.error("is_baseline", f"is_baseline is {r.is_baseline} for config {cfg}", where)
        if r.repeat is None:
            report.error("repeat_missing", "a grid row needs a repeat number", where)
        if r.error:
            if r.speed_tok_s is not None:
                report.warn("error_with_speed", "an error row carries a speed", where)
            continue
        if r.speed_source not in GRID_SPEED_SOURCES:
            report.error("speed_source", f"grid row speed_source is {r.speed_source!r}; expected one of {GRID_SPEED_SOURCES}", where)
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
    per_cap: dict[tuple[int, int], list[tuple[SpecConfig, Any]]] = defaultdict(list)  # a config once per power cap
    for r in grid:
        if r.repeat is not None:
            groups[(r.repeat, r.batch_size)].append(r.config)
            per_cap[(r.repeat, r.batch_size)].append((r.config, (r.extras.get("power_cap") or {}).get("label")))
    report.repeats = sorted({k[0] for k in groups})
    report.batch_sizes = sorted({k[1] for k in groups})
    report.configs_per_group = {f"r{rep}/bs{bs}": len(cfgs) for (rep, bs), cfgs in sorted(groups.items())}
    union = {c for cfgs in groups.values() for c in cfgs}
    expected = set(plan.configs) if plan is not None else union if subset else set(ACTIONS)
    if plan is not None:
        _check_plan_coverage(grid, plan, report)
    for (rep, bs), cfgs in sorted(groups.items()):
        where = f"repeat {rep}, batch size {bs}"
        twice = sorted({c for (c, _cap), n in Counter(per_cap[(rep, bs)]).items() if n > 1})
        if twice:
            hint = ("" if any(cap for _c, cap in per_cap[(rep, bs)]) else
                    " (a sweep over several power caps? The published layout has no cap column: load the run folder or its rows.jsonl)")
            report.error("config_duplicate", f"configs appear more than once: {', '.join(map(str, twice))}{hint}", where)
        lacking = [c for c in (plan.configs if plan is not None else ACTIONS) if c in expected and c not in cfgs]
        if lacking:
            report.error("config_missing", f"{len(set(cfgs))} of {len(expected)} configs; missing {', '.join(map(str, lacking))}", where)
    for rep in report.repeats:
        bss = {bs for (r_, bs) in groups if r_ == rep}
        if bss != set(report.batch_sizes):
            report.error("batch_size_missing", f"repeat {rep} lacks batch sizes {sorted(set(report.batch_sizes) - bss)}")

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
            report.error("pilot_speed_source", f"pilot speed_source is {r.speed_source!r}; expected one of {sorted(PILOT_SOURCES)}", where)
        if r.batch_size != 1:
            report.error("pilot_batch_size", f"a pilot row has batch_size 1 (the real concurrency), got {r.batch_size}", where)
        if r.repeat is not None or r.step_time_s is not None:
            report.error("pilot_nulls", "a pilot row has null repeat and step_time_s", where)
        if r.speed_source == "terminalbench_pilot":
            set_ = [k for k in ("gpu_temp_c_before", "gpu_mem_used_mb", "gpu_throttling") if getattr(r, k) is not None]
            if set_:
                report.error("pilot_terminalbench_nulls", f"Terminal-Bench rows have null {set_}", where)
        if r.config not in ACTIONS:
            report.error("unknown_config", f"pilot config {r.config} is not one of the published actions", where)
        if r.index <= last_grid:
            report.error("pilot_position", "pilot rows come after every grid row (their index continues the grid's)", where)


# --- merge -------------------------------------------------------------------------------------------------------


class MergeResult(BaseModel):
    rows: list[SweepRow]
    n_grid: int
    n_replaced: int
    n_retry_ignored: int
    n_pilots: int
    notes: list[str] = Field(default_factory=list)


def merge(
    grid_rows: Sequence[SweepRow],
    retry_rows: Sequence[SweepRow] = (),
    pilot_rows: Sequence[SweepRow] = (),
    *,
    default_retry_mem_fraction: float = 0.55,
) -> MergeResult:
    """Published merge: successful retries replace error rows at the same index; pilots appended with new indexes.

    A retry matches the grid row with its index and must describe the same cell (repeat, batch size, config). A
    retry replaces only an error row and only when it succeeded; it then carries ``retry_mem_fraction`` (its own,
    else its ``mem_fraction``, else ``default_retry_mem_fraction``). Failed retries and retries of successful rows are
    ignored (the grid row stays). Pilot rows keep their order and are re-indexed after the last grid row.
    """
    grid = [r for r in grid_rows if not is_pilot(r)]
    pilots_in_grid = [r for r in grid_rows if is_pilot(r)]
    if not grid:
        raise DataError("the grid input holds no grid rows", fix="pass the sweep's rows.jsonl or dataset.jsonl first")
    by_index: dict[int, int] = {}
    for pos, r in enumerate(grid):
        if r.index in by_index:
            raise DataError(f"grid rows share index {r.index}", fix="validate the grid file first (harness dataset validate)")
        by_index[r.index] = pos
    if sorted(by_index) != list(range(len(grid))):
        raise DataError(
            f"grid indexes are not contiguous from 0 ({len(grid)} rows, max index {max(by_index)})",
            fix="merge a complete grid; run harness dataset validate on it",
        )
    out = list(grid)
    replaced = ignored = 0
    notes: list[str] = []
    for r in retry_rows:
        if is_pilot(r):
            raise DataError(f"retry input holds a pilot row (index {r.index})", fix="pass pilot rows with --pilots")
        slot = by_index.get(r.index)
        if slot is None:
            raise DataError(f"retry row index {r.index} is not in the grid (0..{len(grid) - 1})", fix="a retry row keeps the index of the row it replaces")
        target = out[slot]
        if (target.repeat, target.batch_size, target.config) != (r.repeat, r.batch_size, r.config):
            raise DataError(
                f"retry row index {r.index} is bs={r.batch_size} {r.config} repeat {r.repeat}, but the grid row at that "
                f"index is bs={target.batch_size} {target.config} repeat {target.repeat}",
                fix="a retry row must describe the same cell as the grid row it replaces",
            )
        if not target.error:
            ignored += 1
            notes.append(f"index {r.index}: grid row succeeded; retry ignored")
            continue
        if r.error:
            ignored += 1
            notes.append(f"index {r.index}: retry failed too ({r.error[:80]}); error row kept")
            continue
        frac = r.retry_mem_fraction if r.retry_mem_fraction is not None else (r.mem_fraction or default_retry_mem_fraction)
        out[slot] = r.model_copy(update={"retry_mem_fraction": frac, "hardware": r.hardware})
        replaced += 1
    next_index = len(out)
    pil = list(pilots_in_grid) + list(pilot_rows)
    for r in pil:
        if not is_pilot(r):
            raise DataError(
                f"pilot input holds a non-pilot row (index {r.index}, speed_source {r.speed_source!r})",
                fix="pilot rows have speed_source terminalbench_pilot or swebench_pilot (build them with harness.rows.pilot_row)",
            )
        out.append(r.model_copy(update={"index": next_index}))
        next_index += 1
    return MergeResult(rows=out, n_grid=len(grid), n_replaced=replaced, n_retry_ignored=ignored, n_pilots=len(pil), notes=notes)


def write_rows(path: str | Path, rows: Sequence[SweepRow], *, native: bool = False) -> None:
    """Write rows atomically (published layout unless ``native``)."""
    write_jsonl_atomic(path, [to_native(r) if native else to_published(r) for r in rows])


# --- compare -----------------------------------------------------------------------------------------------------

METRICS: tuple[str, ...] = ("speed_tok_s", "joules_per_token", "avg_power_watts")


class CellDiff(BaseModel):
    batch_size: int
    config: tuple[int, int, int]
    metric: str
    a_mean: float
    b_mean: float
    a_n: int
    b_n: int
    rel_diff: float  # (b - a) / a
    band: float  # relative noise band the difference is judged against
    within: bool


class RankAgreement(BaseModel):
    batch_size: int
    metric: str
    n_configs: int
    spearman: float | None
    kendall: float | None
    top_a: tuple[int, int, int] | None
    top_b: tuple[int, int, int] | None
    agrees: bool


class CompareResult(BaseModel):
    a: str
    b: str
    k: float
    min_band: float
    noise_cv: dict[str, float]  # pooled repeat coefficient of variation per metric
    noise_source: dict[str, str]
    cells: list[CellDiff]
    ranks: list[RankAgreement]
    only_a: list[str]
    only_b: list[str]
    cell_agreement: float  # fraction of (cell, metric) pairs within the band
    min_cell_agreement: float
    min_tau: float

    @property
    def agrees(self) -> bool:
        return bool(self.cells) and self.cell_agreement >= self.min_cell_agreement and all(r.agrees for r in self.ranks)


def _cell_values(rows: Sequence[SweepRow]) -> dict[tuple[int, SpecConfig], dict[str, list[float]]]:
    out: dict[tuple[int, SpecConfig], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if is_pilot(r) or r.error:
            continue
        for m in METRICS:
            v = getattr(r, m)
            if v is not None and math.isfinite(v):
                out[(r.batch_size, r.config)][m].append(float(v))
    return out


def pooled_cv(cells: dict[tuple[int, SpecConfig], dict[str, list[float]]], metric: str) -> tuple[float | None, int]:
    """Root-mean-square of per-cell repeat CVs (sample stdev / mean) over cells with >= 2 repeats."""
    cvs = []
    for vals in cells.values():
        xs = vals.get(metric, [])
        if len(xs) >= 2 and statistics.fmean(xs) != 0:
            cvs.append(statistics.stdev(xs) / abs(statistics.fmean(xs)))
    if not cvs:
        return None, 0
    return math.sqrt(statistics.fmean(c * c for c in cvs)), len(cvs)


def _cell_label(cell: tuple[int, SpecConfig]) -> str:
    return f"bs{cell[0]} {cell[1]}"


def compare(
    a_rows: Sequence[SweepRow],
    b_rows: Sequence[SweepRow],
    *,
    a_name: str = "A",
    b_name: str = "B",
    k: float = 3.0,
    min_band: float = 0.02,
    min_cell_agreement: float = 0.9,
    min_tau: float = 0.6,
) -> CompareResult:
    """Compare two datasets cell by cell against the repeat-noise band, and config rankings per batch size.

    Noise: per metric, the pooled repeat CV of each dataset (RMS of per-cell CVs over cells with >= 2 repeats);
    a dataset without repeats borrows the other's. The band of a cell's relative difference of means is
    ``max(min_band, k * sqrt(cv_a^2 / n_a + cv_b^2 / n_b))``. Ranks: Spearman and Kendall of the per-config means over
    the configs both datasets measured at that batch size; a batch size agrees when Kendall tau >= ``min_tau``.
    """
    from scipy.stats import kendalltau, spearmanr

    if k <= 0 or min_band < 0 or not 0 <= min_cell_agreement <= 1 or not -1 <= min_tau <= 1:
        raise UsageError(
            f"bad compare thresholds (k={k}, min_band={min_band}, min_cell_agreement={min_cell_agreement}, min_tau={min_tau})",
            fix="k > 0, min band >= 0, min cell agreement in [0, 1], min tau in [-1, 1]",
        )
    ca, cb = _cell_values(a_rows), _cell_values(b_rows)
    common = sorted(set(ca) & set(cb), key=lambda c: (c[0], ACTIONS.index(c[1]) if c[1] in ACTIONS else 99))
    noise: dict[str, float] = {}
    source: dict[str, str] = {}
    per_side: dict[str, tuple[float, float]] = {}
    for m in METRICS:
        cva, na = pooled_cv(ca, m)
        cvb, nb = pooled_cv(cb, m)
        if cva is None and cvb is None:
            cva = cvb = 0.0
            source[m] = "no repeats in either dataset: min band only"
        elif cva is None:
            cva = cvb
            source[m] = f"{b_name} repeats only ({nb} cells)"
        elif cvb is None:
            cvb = cva
            source[m] = f"{a_name} repeats only ({na} cells)"
        else:
            source[m] = f"both ({na} + {nb} cells)"
        cv_a, cv_b = float(cva or 0.0), float(cvb or 0.0)  # both set by now: each side falls back on the other
        per_side[m] = (cv_a, cv_b)
        noise[m] = math.sqrt((cv_a**2 + cv_b**2) / 2)
    cells: list[CellDiff] = []
    for key in common:
        bs, cfg = key
        for m in METRICS:
            xa, xb = ca[key].get(m, []), cb[key].get(m, [])
            if not xa or not xb:
                continue
            ma, mb = statistics.fmean(xa), statistics.fmean(xb)
            if ma == 0:
                continue
            cva, cvb = per_side[m]
            band = max(min_band, k * math.sqrt(cva**2 / len(xa) + cvb**2 / len(xb)))
            rel = (mb - ma) / abs(ma)
            cells.append(
                CellDiff(batch_size=bs, config=cfg.as_tuple(), metric=m, a_mean=ma, b_mean=mb, a_n=len(xa), b_n=len(xb),
                         rel_diff=rel, band=band, within=abs(rel) <= band)
            )
    ranks: list[RankAgreement] = []
    for bs in sorted({c[0] for c in common}):
        cfgs = [c for (b, c) in common if b == bs]
        for m, higher_better in (("speed_tok_s", True), ("joules_per_token", False)):
            pairs = [(c, statistics.fmean(ca[(bs, c)][m]), statistics.fmean(cb[(bs, c)][m])) for c in cfgs
                     if ca[(bs, c)].get(m) and cb[(bs, c)].get(m)]
            if len(pairs) < 2:
                continue
            va, vb = [p[1] for p in pairs], [p[2] for p in pairs]
            pick = max if higher_better else min
            top_a = pick(pairs, key=lambda p: p[1])[0].as_tuple()
            top_b = pick(pairs, key=lambda p: p[2])[0].as_tuple()
            if len(pairs) >= 3:
                rho = float(spearmanr(va, vb).statistic)
                tau = float(kendalltau(va, vb).statistic)
            else:
                same = (va[0] - va[1]) * (vb[0] - vb[1]) > 0
                rho = tau = 1.0 if same else -1.0
            spearman = None if math.isnan(rho) else rho
            kendall = None if math.isnan(tau) else tau
            ranks.append(RankAgreement(batch_size=bs, metric=m, n_configs=len(pairs), spearman=spearman, kendall=kendall,
                                       top_a=top_a, top_b=top_b, agrees=kendall is not None and kendall >= min_tau))
    within = sum(1 for c in cells if c.within)
    return CompareResult(
        a=a_name, b=b_name, k=k, min_band=min_band, noise_cv=noise, noise_source=source, cells=cells, ranks=ranks,
        only_a=[_cell_label(c) for c in sorted(set(ca) - set(cb), key=lambda c: (c[0], c[1].as_tuple()))],
        only_b=[_cell_label(c) for c in sorted(set(cb) - set(ca), key=lambda c: (c[0], c[1].as_tuple()))],
        cell_agreement=(within / len(cells)) if cells else 0.0, min_cell_agreement=min_cell_agreement, min_tau=min_tau,
    )


# --- export ------------------------------------------------------------------------------------------------------

ExportFormat = Literal["hf", "parquet", "jsonl"]


def _arrow_schema(columns: Sequence[str]) -> Any:
    import pyarrow as pa

    ints = {"index", "repeat", "batch_size", "steps", "topk", "num_draft_tokens", "total_output_tokens", "row_schema",
            "attempt", "recorded_wall_ns", "window_start_ns", "window_end_ns", "window_sample_count",
            "window_clock_event_reasons_or", "clock_event_reasons", "n_requests", "pilot_server_batch_size"}
    bools = {"is_baseline", "gpu_throttling", "window_valid", "gpu_throttling_power_thermal", "pilot_success"}
    strings = {"hardware", "error", "speed_source", "run_id", "cell_id", "energy_source", "accept_length_source",
               "gpu_name", "gpu_uuid", "sglang_version", "attention_backend", "pilot_suite", "pilot_task", "pilot_config_name",
               "engine", "extras", "energy_window", "window_energy"}
    fields = []
    for c in columns:
        if c in ints:
            t = pa.int64()
        elif c in bools:
            t = pa.bool_()
        elif c in strings:
            t = pa.string()
        elif c == "window_reasons":
            t = pa.list_(pa.string())
        else:
            t = pa.float64()
        fields.append(pa.field(c, t, nullable=True))
    return pa.schema(fields)


def to_arrow(rows: Sequence[SweepRow], *, native: bool = False) -> Any:
    """An Arrow table with fixed column types (null-only columns keep their type). Nested extras become JSON text."""
    import json

    import pyarrow as pa

    columns = list(NATIVE_KEYS) if native else list(PUBLISHED_KEYS)
    data: dict[str, list[Any]] = {c: [] for c in columns}
    for r in rows:
        rec = to_native(r) if native else to_published(r)
        for c in columns:
            v = rec[c]
            if c in ("engine", "extras", "window_energy") and v is not None:
                v = json.dumps(v, sort_keys=True) if v else None
            data[c].append(v)
    return pa.Table.from_pydict(data, schema=_arrow_schema(columns))


def export(rows: Sequence[SweepRow], fmt: ExportFormat, out_dir: str | Path, *, native: bool = False,
           name: str = "eagle3_energy_sweep", force: bool = False) -> Path:
    """Export to ``out_dir``: ``hf`` (a folder ``datasets.load_from_disk`` opens), ``parquet`` or ``jsonl`` file.

    Written to a temporary sibling folder and renamed into place, so a failure leaves nothing behind. An existing
    non-empty ``out_dir`` is refused unless ``force``.
    """
    out = Path(out_dir)
    if fmt not in ("hf", "parquet", "jsonl"):
        raise UsageError(f"unknown export format {fmt!r}", fix="use --format hf, parquet or jsonl")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not force:
            raise OutputError(f"{out} already exists and is not empty", fix="choose a new --out folder or pass --force")
    if fmt != "jsonl":  # before anything is written
        with needs(f"export --format {fmt}"):
            import pyarrow  # noqa: F401 - imported only to fail early, before anything is written

            if fmt == "hf":
                import datasets
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as exc:
        raise OutputError(f"cannot write {out}: {exc.strerror}", fix="choose a writable --out folder") from None
    try:
        if fmt == "jsonl":
            write_rows(tmp / f"{name}.jsonl", rows, native=native)
        else:
            table = to_arrow(rows, native=native)
            if fmt == "parquet":
                import pyarrow.parquet as pq

                pq.write_table(table, tmp / f"{name}.parquet")
            else:
                import datasets

                datasets.disable_progress_bars()
                datasets.Dataset(table).save_to_disk(str(tmp))
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        os.replace(tmp, out)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise OutputError(f"cannot write {out}: {exc.strerror or exc}", fix="choose a writable --out folder") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
