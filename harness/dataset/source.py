"""Dataset input: which file a path means, its layout, and the per-row facts every dataset tool shares."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Literal, Sequence

from pydantic import BaseModel

from harness.core.errors import MissingFileError
from harness.grid import ACTIONS, SpecConfig, violated_rule
from harness.runs.rows import PILOT_ROWS, PILOT_SPEED_SOURCES, PUBLISHED_KEYS, RowStore, SweepRow

Layout = Literal["published", "native"]
PILOT_SOURCES = set(PILOT_SPEED_SOURCES.values())


def resolve_input(path: str | Path) -> Path:
    """A run folder -> its rows.jsonl (else dataset.jsonl; a pilot run's dataset_rows.jsonl); a file -> itself."""
    p = Path(path)
    if p.is_dir():
        for name in (RowStore.ROWS, RowStore.DATASET, PILOT_ROWS):
            if (p / name).is_file():
                return p / name
        raise MissingFileError(
            f"{p} is a folder without rows.jsonl, dataset.jsonl or {PILOT_ROWS}",
            fix="pass a run folder or a JSONL file",
        )
    if not p.exists():
        raise MissingFileError(
            f"file not found: {p}", fix="check the path (a run folder holds rows.jsonl and dataset.jsonl)"
        )
    return p


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


def invalid_window(row: SweepRow) -> bool:
    """A successful row whose measurement window the sampler judged invalid (published rows carry no verdict)."""
    return not row.error and row.window_valid is False


def window_summary(rows: Sequence[SweepRow], limit: int = 5) -> str:
    """Indexes and reason counts of invalid-window rows, for messages."""
    reasons = Counter(reason for r in rows for reason in (r.window_reasons or ["invalid"]))
    idx = ", ".join(str(r.index) for r in rows[:limit]) + (" ..." if len(rows) > limit else "")
    return f"indexes {idx}; reasons " + ", ".join(f"{k} x{n}" for k, n in reasons.most_common())


class ReadRows(BaseModel):
    """Rows read from one input: its records, every parsed row and the resolved rows (the last per cell)."""

    model_config = {"arbitrary_types_allowed": True}

    path: Path
    records: list[dict[str, Any]]
    all_rows: list[SweepRow]
    rows: list[SweepRow]
