"""Export rows as a Hugging Face dataset folder, a Parquet file or a JSONL file, atomically."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal, Sequence

from harness.core.errors import OutputError, UsageError
from harness.core.extras import needs
from harness.dataset.merge import write_rows
from harness.runs.rows import NATIVE_KEYS, PUBLISHED_KEYS, SweepRow, to_native, to_published

ExportFormat = Literal["hf", "parquet", "jsonl"]


def _arrow_schema(columns: Sequence[str]) -> Any:
    import pyarrow as pa

    ints = {
        "index",
        "repeat",
        "batch_size",
        "steps",
        "topk",
        "num_draft_tokens",
        "total_output_tokens",
        "row_schema",
        "attempt",
        "recorded_wall_ns",
        "window_start_ns",
        "window_end_ns",
        "window_sample_count",
        "window_clock_event_reasons_or",
        "clock_event_reasons",
        "n_requests",
        "pilot_server_batch_size",
    }
    bools = {"is_baseline", "gpu_throttling", "window_valid", "gpu_throttling_power_thermal", "pilot_success"}
    strings = {
        "hardware",
        "error",
        "speed_source",
        "run_id",
        "cell_id",
        "energy_source",
        "accept_length_source",
        "gpu_name",
        "gpu_uuid",
        "sglang_version",
        "attention_backend",
        "pilot_suite",
        "pilot_task",
        "pilot_config_name",
        "engine",
        "extras",
        "energy_window",
        "window_energy",
    }
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


def export(
    rows: Sequence[SweepRow],
    fmt: ExportFormat,
    out_dir: str | Path,
    *,
    native: bool = False,
    name: str = "eagle3_energy_sweep",
    force: bool = False,
) -> Path:
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
