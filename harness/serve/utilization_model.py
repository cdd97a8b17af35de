"""The band controller's utilization model, pure: per measured batch size, each config's (utilization, speed);
between measured batch sizes linear in log(batch size), outside them the nearest; and the band pick over it.

Utilization here is avg power / enforced cap while the GPU serves that batch size closed-loop (a sweep's cell, or the
serving benchmark's calibration). On the twin (and on a GPU near its cap) power rises with the batch size for a
speculative config and sits at the cap for no_spec, so which config is in the band depends on the batch size: the
model is read at the current batch size, not at the nearest table entry."""

from __future__ import annotations

import math
from typing import Mapping

from harness.grid import SpecConfig

UtilModel = Mapping[int, Mapping[SpecConfig, tuple[float, float]]]
"""{batch size: {config: (utilization, tokens/s)}}."""


def predict(model: UtilModel, cfg: SpecConfig, batch_size: float) -> tuple[float, float] | None:
    """(utilization, tokens/s) of ``cfg`` at ``batch_size`` (None when the model never measured ``cfg``)."""
    pts = sorted((bs, row[cfg]) for bs, row in model.items() if cfg in row)
    if not pts:
        return None
    x = math.log(max(batch_size, 1.0))
    if x <= math.log(pts[0][0]):
        return pts[0][1]
    for (b0, (u0, v0)), (b1, (u1, v1)) in zip(pts, pts[1:]):
        if x <= math.log(b1):
            w = (x - math.log(b0)) / (math.log(b1) - math.log(b0))
            return u0 + w * (u1 - u0), v0 + w * (v1 - v0)
    return pts[-1][1]


def band_distance(u: float, band: tuple[float, float], margin: float = 0.0) -> float:
    """How far ``u`` lies outside ``band`` shrunk by ``margin`` on each side (0 inside)."""
    return max(band[0] + margin - u, u - band[1] + margin, 0.0)


def model_pick(
    row: Mapping[SpecConfig, tuple[float, float]],
    bias: float,
    band: tuple[float, float],
    alive: frozenset[SpecConfig],
    margin: float = 0.0,
) -> SpecConfig | None:
    """The recipe rule on one row of predictions: the fastest live config whose utilization + ``bias`` is inside
    ``band`` (shrunk by ``margin``), else the one closest to it (ties: the faster, then the smaller config)."""
    rows = [(c, band_distance(u + bias, band, margin), v) for c, (u, v) in row.items() if c in alive]
    if not rows:
        return None
    return min(rows, key=lambda r: (round(r[1], 6), -r[2], r[0]))[0]


def band_share(u: float, band: tuple[float, float], sigma: float, cap_u: float, trim: bool = False) -> float:
    """The share of sampler windows expected inside ``band`` for a config predicted at ``u``: a normal spread of
    ``sigma`` (the one-second swings of the batch size under Poisson traffic), and 0 at or above ``cap_u``: there the
    power limit holds the power at the cap (clocks drop), so load swings do not bring it down into the band.
    ``trim``: a locked SM clock lowers power into the band from anywhere above it, so the share is of windows at or
    above the band's low edge (1 at the cap)."""
    cdf = lambda x: 0.5 * (1.0 + math.erf((x - u) / (sigma * math.sqrt(2.0))))  # noqa: E731
    if trim:
        return 1.0 if u >= cap_u else 1.0 - cdf(band[0])
    if u >= cap_u:
        return 0.0
    return cdf(band[1]) - cdf(band[0])


def share_pick(
    row: Mapping[SpecConfig, tuple[float, float]],
    bias: float,
    band: tuple[float, float],
    alive: frozenset[SpecConfig],
    sigma: float,
    cap_u: float,
    trim: bool = False,
) -> SpecConfig | None:
    """The live config with the largest expected share in ``band`` (``band_share`` of prediction + ``bias``, with
    the clock ``trim`` or without); a share within 0.01 (0.1 trimmed) of the best is a tie, won by the faster (then
    the smaller) config."""
    rows = [(c, band_share(u + bias, band, sigma, cap_u, trim), v) for c, (u, v) in row.items() if c in alive]
    if not rows:
        return None
    best = max(r[1] for r in rows)
    tie = 0.1 if trim else 0.01  # trimmed, a config a little less sure to reach the band's low edge still serves faster
    return min((r for r in rows if r[1] >= best - tie), key=lambda r: (-r[2], r[0]))[0]


def row_at(model: UtilModel, batch_size: float) -> dict[SpecConfig, tuple[float, float]]:
    """Every modelled config's prediction at ``batch_size``."""
    cfgs = {c for row in model.values() for c in row}
    return {c: p for c in cfgs if (p := predict(model, c, batch_size)) is not None}
