"""The closed loop's utilization model from a sweep's rows (``harness serve --umodel RUN``): per (batch size, config)
the mean over repeats of utilization (avg power / the row's enforced cap, the reward's definition) and aggregate
tokens/s (wall-clock tokens/s of the batch). A sweep cell is a closed batch of that size, which is what the model
means (``umodel.py``)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from statistics import fmean
from typing import Iterable

from harness.core.errors import DataError
from harness.grid import SpecConfig
from harness.runs.rows import SweepRow
from harness.serve.utilization_model import UtilModel


def _usable(row: SweepRow) -> bool:
    return (
        row.error is None
        and row.pilot_suite is None
        and row.avg_power_watts is not None
        and (row.wall_clock_tok_s is not None or row.speed_tok_s is not None)
    )


def model_from_rows(rows: Iterable[SweepRow], fallback_cap_w: float = 80.0) -> UtilModel:
    """{batch size: {config: (mean utilization, mean tokens/s)}} over the successful sweep rows at one power cap and
    one SM clock (a model mixing caps would predict neither); a DataError names the problem and the fix otherwise."""
    usable = [r for r in rows if _usable(r)]
    if not usable:
        raise DataError(
            "no successful sweep rows with power and speed to build the utilization model from",
            fix="pass --umodel a sweep run folder (or its rows.jsonl) with measured cells",
        )
    passes = {(r.power_limit_w, r.sm_clock_locked_mhz) for r in usable}
    if len(passes) > 1:
        listed = ", ".join(f"cap {c or fallback_cap_w:g} W clock {m or 'unlocked'}" for c, m in sorted(passes, key=str))
        raise DataError(
            f"the rows span several power caps / SM clocks ({listed}); the model needs one",
            fix="pass a run swept at the cap and clock you serve at (or one pass's rows)",
        )
    cells: dict[tuple[int, SpecConfig], list[tuple[float, float]]] = defaultdict(list)
    for r in usable:
        cap = float(r.power_limit_w or fallback_cap_w)
        speed = r.wall_clock_tok_s if r.wall_clock_tok_s is not None else float(r.speed_tok_s or 0.0) * r.batch_size
        cells[(r.batch_size, r.config)].append((float(r.avg_power_watts or 0.0) / cap, float(speed)))
    model: dict[int, dict[SpecConfig, tuple[float, float]]] = defaultdict(dict)
    for (bs, cfg), vals in cells.items():
        model[bs][cfg] = (fmean(u for u, _ in vals), fmean(v for _, v in vals))
    return dict(model)


def load_model(path: str | Path) -> UtilModel:
    """The model of a run folder or rows file, read through the one dataset loader (its checks and exclusions)."""
    from harness.dataset import load

    return model_from_rows(load(path).rows)


def model_json(model: UtilModel) -> str:
    """The model as JSON (written next to switches.jsonl so a serve run records what its loop assumed)."""
    return json.dumps(
        {
            str(bs): {c.label: {"u": round(u, 4), "tok_s": round(v, 2)} for c, (u, v) in sorted(row.items())}
            for bs, row in sorted(model.items())
        },
        indent=1,
    )
