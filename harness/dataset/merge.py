"""Published merge: successful retries replace error rows at their index; pilot rows are appended after the grid."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from pydantic import BaseModel, Field

from harness.core.errors import DataError
from harness.core.jsonl import write_jsonl_atomic
from harness.dataset.validate import is_pilot
from harness.runs.rows import SweepRow, to_native, to_published


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
            raise DataError(
                f"grid rows share index {r.index}", fix="validate the grid file first (harness dataset validate)"
            )
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
            raise DataError(
                f"retry row index {r.index} is not in the grid (0..{len(grid) - 1})",
                fix="a retry row keeps the index of the row it replaces",
            )
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
        frac = (
            r.retry_mem_fraction if r.retry_mem_fraction is not None else (r.mem_fraction or default_retry_mem_fraction)
        )
        out[slot] = r.model_copy(update={"retry_mem_fraction": frac, "hardware": r.hardware})
        replaced += 1
    next_index = len(out)
    pil = list(pilots_in_grid) + list(pilot_rows)
    for r in pil:
        if not is_pilot(r):
            raise DataError(
                f"pilot input holds a non-pilot row (index {r.index}, speed_source {r.speed_source!r})",
                fix="pilot rows have speed_source terminalbench_pilot or swebench_pilot (build them with harness.runs.rows.pilot_row)",
            )
        out.append(r.model_copy(update={"index": next_index}))
        next_index += 1
    return MergeResult(
        rows=out, n_grid=len(grid), n_replaced=replaced, n_retry_ignored=ignored, n_pilots=len(pil), notes=notes
    )


def write_rows(path: str | Path, rows: Sequence[SweepRow], *, native: bool = False) -> None:
    """Write rows atomically (published layout unless ``native``)."""
    write_jsonl_atomic(path, [to_native(r) if native else to_published(r) for r in rows])
