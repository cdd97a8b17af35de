"""Engines side by side: per batch size and dataset, which engine (kind, API, version) measured it, its baseline and
its recipe (the lowest J/token config, and the fastest), so an sglang grid and a vLLM grid read in one table."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Sequence

from pydantic import BaseModel

from harness.dataset.validate import is_pilot
from harness.runs.rows import SweepRow


class EngineSide(BaseModel):
    """One dataset at one batch size."""

    dataset: str
    engine: str
    batch_size: int
    configs: int
    baseline_tok_s: float | None
    baseline_j_per_token: float | None
    recipe: tuple[int, int, int] | None
    """The config with the lowest mean J/token."""
    recipe_tok_s: float | None
    recipe_j_per_token: float | None
    fastest: tuple[int, int, int] | None
    fastest_tok_s: float | None


def engine_label(rows: Sequence[SweepRow]) -> str:
    """``twin(vllm 0.34.0)``, ``sglang 0.5.23`` ...: the engines of the rows, from their ``engine`` column."""
    labels = set()
    for r in rows:
        e = r.engine
        if e is None:
            labels.add(f"sglang {r.sglang_version}" if r.sglang_version else "unknown engine")
        elif e.kind == "twin":
            labels.add(f"twin({e.api} {e.version})")
        else:
            labels.add(f"{e.kind} {e.version}")
    return ", ".join(sorted(labels))


def _means(rows: Sequence[SweepRow], bs: int) -> dict[tuple[int, int, int], tuple[float | None, float | None]]:
    vals: dict[tuple[int, int, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.batch_size != bs or r.error or is_pilot(r):
            continue
        for m in ("speed_tok_s", "joules_per_token"):
            v = getattr(r, m)
            if v is not None and math.isfinite(v):
                vals[r.config.as_tuple()][m].append(float(v))

    def mean(xs: list[float]) -> float | None:
        return statistics.fmean(xs) if xs else None

    return {c: (mean(v["speed_tok_s"]), mean(v["joules_per_token"])) for c, v in vals.items()}


def engine_sides(datasets: Sequence[tuple[str, Sequence[SweepRow]]]) -> list[EngineSide]:
    """Every (batch size, dataset) pair, batch size first."""
    sizes = sorted({r.batch_size for _, rows in datasets for r in rows if not is_pilot(r)})
    out = []
    for bs in sizes:
        for name, rows in datasets:
            means = _means(rows, bs)
            if not means:
                continue
            base = means.get((0, 0, 0), (None, None))
            with_j = [c for c, (_, j) in means.items() if j is not None]
            with_s = [c for c, (s, _) in means.items() if s is not None]
            recipe = min(with_j, key=lambda c: means[c][1] or 0.0) if with_j else None
            fastest = max(with_s, key=lambda c: means[c][0] or 0.0) if with_s else None
            out.append(
                EngineSide(
                    dataset=name,
                    engine=engine_label([r for r in rows if r.batch_size == bs]),
                    batch_size=bs,
                    configs=len(means),
                    baseline_tok_s=base[0],
                    baseline_j_per_token=base[1],
                    recipe=recipe,
                    recipe_tok_s=means[recipe][0] if recipe else None,
                    recipe_j_per_token=means[recipe][1] if recipe else None,
                    fastest=fastest,
                    fastest_tok_s=means[fastest][0] if fastest else None,
                )
            )
    return out
