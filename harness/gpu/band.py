"""The energy band and the caps that put configs in it: pure arithmetic on measured draws and a board's limits.

A config is in the band when its window's average power is 0.95-0.98 of the enforced cap (the published rule). A cap
only binds above a board's draw, so on a board whose decode draws far below its limit (an H100 at 700 W draws
~0.3-0.45 of it) nothing is ever in the band; a lower cap moves the band down to the draws. A locked SM clock only
lowers power, so it never lifts a board into its band. ``choose_caps`` picks at most three caps, each inside the
board's constraints, so that every batch size has a measured config in the band under one of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

BAND = (0.95, 0.98)
BAND_MID = (BAND[0] + BAND[1]) / 2
MAX_AUTO_CAPS = 3


def in_band(watts: float, cap_w: float) -> bool:
    """Whether ``watts`` drawn under ``cap_w`` is inside the band."""
    return BAND[0] <= watts / cap_w <= BAND[1]


def clamp_cap(watts: float, lo: float | None, hi: float | None) -> float:
    """A cap in whole watts inside the board's constraints [lo, hi] (NVML refuses anything outside them)."""
    cap = float(round(watts))
    if lo is not None and cap < lo:
        cap = float(math.ceil(lo))
    if hi is not None and cap > hi:
        cap = float(math.floor(hi))
    return cap


def reachable(draws: Sequence[float], cap_w: float) -> bool:
    """Whether some draw reaches the band's low edge under ``cap_w`` (a draw above the cap is clipped to it)."""
    return any(min(w, cap_w) / cap_w >= BAND[0] for w in draws)


@dataclass(frozen=True)
class CapChoice:
    """Caps chosen for a board: which cap covers which batch sizes, and the batch sizes no allowed cap covers."""

    caps: tuple[float, ...]
    covers: Mapping[float, tuple[int, ...]]
    uncovered: tuple[int, ...]
    why: str


def _interval(draw: float) -> tuple[float, float]:
    """Caps under which ``draw`` sits in the band."""
    return draw / BAND[1], draw / BAND[0]


def choose_caps(
    draws_by_bs: Mapping[int, Sequence[float]], lo: float | None, hi: float | None, max_caps: int = MAX_AUTO_CAPS
) -> CapChoice:
    """At most ``max_caps`` caps in [lo, hi] such that each batch size's highest measured draw is in the band under one
    of them (the highest: a cap below a draw binds and throttles it; the lighter configs of the grid then fall below
    the band, so the band separates them). Batch sizes whose draws share a band-wide interval share a cap, set at the
    middle of what they share."""
    targets = {bs: max(ws) for bs, ws in draws_by_bs.items() if ws}
    shared = lambda group: (  # noqa: E731 - the caps every batch size of a group accepts
        max(_interval(targets[b])[0] for b in group),
        min(_interval(targets[b])[1] for b in group),
    )
    uncovered = [bs for bs, w in targets.items() if lo is not None and _interval(w)[1] < lo]
    groups: list[list[int]] = []
    for bs in sorted((b for b in targets if b not in uncovered), key=lambda b: _interval(targets[b])[1]):
        if groups and _robust(shared(groups[-1] + [bs]), _interval(targets[bs])):
            groups[-1].append(bs)  # interval stabbing, smallest right end first: the fewest caps
        else:
            groups.append([bs])
    if len(groups) > max_caps:  # more caps needed than allowed: the caps that serve the most batch sizes
        groups = sorted(sorted(groups, key=len, reverse=True)[:max_caps], key=lambda g: _interval(targets[g[0]])[1])
    covers: dict[float, set[int]] = {}
    for group in groups:
        left, right = shared(group)
        cap = clamp_cap((left + right) / 2, lo, hi)
        if not left <= cap <= right:  # whole watts moved it out: the nearest whole watt inside
            cap = clamp_cap(math.ceil(left) if math.ceil(left) <= right else left, lo, hi)
        covers.setdefault(cap, set()).update(b for b in group if in_band(min(targets[b], cap), cap))
    missed = sorted(set(targets) - set().union(*covers.values()))
    why = (
        f"each cap puts the highest measured draw of its batch sizes inside the band ({BAND[0]:g}-{BAND[1]:g} of "
        f"the cap; batch sizes share a cap when half a band fits them all), inside the board's limits "
        f"[{_w(lo)}, {_w(hi)}] W"
    )
    caps = tuple(sorted(c for c, hit in covers.items() if hit))  # a cap clamped away from every draw serves none
    return CapChoice(caps, {c: tuple(sorted(covers[c])) for c in caps}, tuple(missed), why)


MIN_SHARED = 0.5
"""Batch sizes share a cap only when the caps they share span half a band at least: a shared cap at one's band edge
would lose it to a percent of measurement noise."""


def _robust(shared: tuple[float, float], own: tuple[float, float]) -> bool:
    return shared[1] - shared[0] >= MIN_SHARED * (own[1] - own[0])


def _w(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"
