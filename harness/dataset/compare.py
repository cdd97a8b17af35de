"""Compare two datasets cell by cell against the repeat-noise band, and their config rankings per batch size."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from typing import Sequence

from pydantic import BaseModel

from harness.core.errors import UsageError
from harness.core.extras import needs
from harness.dataset.validate import is_pilot
from harness.grid import ACTIONS, SpecConfig
from harness.runs.rows import SweepRow

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
    with needs("comparing datasets (the rank agreement)"):
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
                CellDiff(
                    batch_size=bs,
                    config=cfg.as_tuple(),
                    metric=m,
                    a_mean=ma,
                    b_mean=mb,
                    a_n=len(xa),
                    b_n=len(xb),
                    rel_diff=rel,
                    band=band,
                    within=abs(rel) <= band,
                )
            )
    ranks: list[RankAgreement] = []
    for bs in sorted({c[0] for c in common}):
        cfgs = [c for (b, c) in common if b == bs]
        for m, higher_better in (("speed_tok_s", True), ("joules_per_token", False)):
            pairs = [
                (c, statistics.fmean(ca[(bs, c)][m]), statistics.fmean(cb[(bs, c)][m]))
                for c in cfgs
                if ca[(bs, c)].get(m) and cb[(bs, c)].get(m)
            ]
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
            ranks.append(
                RankAgreement(
                    batch_size=bs,
                    metric=m,
                    n_configs=len(pairs),
                    spearman=spearman,
                    kendall=kendall,
                    top_a=top_a,
                    top_b=top_b,
                    agrees=kendall is not None and kendall >= min_tau,
                )
            )
    within = sum(1 for c in cells if c.within)
    return CompareResult(
        a=a_name,
        b=b_name,
        k=k,
        min_band=min_band,
        noise_cv=noise,
        noise_source=source,
        cells=cells,
        ranks=ranks,
        only_a=[_cell_label(c) for c in sorted(set(ca) - set(cb), key=lambda c: (c[0], c[1].as_tuple()))],
        only_b=[_cell_label(c) for c in sorted(set(cb) - set(ca), key=lambda c: (c[0], c[1].as_tuple()))],
        cell_agreement=(within / len(cells)) if cells else 0.0,
        min_cell_agreement=min_cell_agreement,
        min_tau=min_tau,
    )
