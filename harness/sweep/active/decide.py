"""From cell estimates to the recipe and the next cells worth measuring.

Per batch size the leader is the cell with the highest estimate. A rival is *open* when the chance that its true
mean reward beats the leader's, under independent normal errors, is above ``P_OPEN``. What is worth measuring:

1. the leader itself while it has no row (the recipe must rest on measured rows);
2. a low-step corner cell (``corner.py``: the fitted draft head is weaker or slower than the start profile's, so the
   fewest-step configs are measured, not extrapolated);
3. an open rival without a row (its estimate is only the model's);
4. an open rival with rows (a near tie on measured rows): the next repeat of whichever of the two has fewer rows
   (the leader on equal rows: the recipe's own rows first), while the plan has repeats left; a tie that survives every repeat is settled as a tie (either is within noise).

A batch size with nothing worth measuring is settled; its confidence is the product over rivals of the chance that
the rival does not beat the leader.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from harness.sweep.active.estimate import CellEstimate

P_OPEN = 0.05
"""A rival with more than this chance of beating the leader can still change the recipe."""


def p_beats(rival: CellEstimate, leader: CellEstimate) -> float:
    """P(rival's true mean > leader's) for independent normal errors."""
    gap = leader.reward - rival.reward
    sd = math.hypot(leader.sigma, rival.sigma)
    if sd <= 0:
        return 0.0 if gap > 0 else 1.0
    return 0.5 * math.erfc(gap / (sd * math.sqrt(2)))


@dataclass(frozen=True)
class Action:
    """Measure ``repeat`` of cell (batch size, config); ``score`` orders actions (higher first)."""

    batch_size: int
    config: tuple[int, int, int]
    repeat: int
    reason: str
    score: float


@dataclass(frozen=True)
class Pick:
    batch_size: int
    leader: CellEstimate
    confidence: float
    open_rivals: tuple[CellEstimate, ...]


def picks(cells: Sequence[CellEstimate], measured_only: bool = False) -> dict[int, Pick]:
    """Per batch size: the leader, its confidence, the rivals still open. ``measured_only``: the leader among the
    cells with rows (the recipe: a run stopped by its budget may not have measured the model's leader), still
    compared with every rival."""
    out: dict[int, Pick] = {}
    for bs in sorted({c.batch_size for c in cells}):
        group = [c for c in cells if c.batch_size == bs and c.config != (0, 0, 0)] or [
            c for c in cells if c.batch_size == bs
        ]
        pool = [c for c in group if c.measured] if measured_only else group
        leader = max(pool or group, key=lambda c: (c.reward, c.measured))
        rivals = [c for c in group if c is not leader]
        conf = math.prod(1.0 - p_beats(c, leader) for c in rivals)
        out[bs] = Pick(bs, leader, conf, tuple(c for c in rivals if p_beats(c, leader) > P_OPEN))
    return out


def next_actions(
    cells: Sequence[CellEstimate], repeats: int, corner: Sequence[CellEstimate] = (), corner_reason: str = ""
) -> list[Action]:
    """Everything worth measuring now, best first (one action per cell); ``corner``: low-step cells to measure."""
    actions: dict[tuple[int, tuple[int, int, int]], Action] = {}

    def add(c: CellEstimate, reason: str, score: float) -> None:
        key = (c.batch_size, c.config)
        if c.measured < repeats and (key not in actions or actions[key].score < score):
            actions[key] = Action(c.batch_size, c.config, c.measured, reason, score)

    for c in corner:
        add(c, f"low-step corner ({corner_reason})", 1.0)
    for pick in picks(cells).values():
        leader = pick.leader
        if not leader.measured:
            add(leader, "leader without a row", 1.0 + leader.reward)
        for rival in pick.open_rivals:
            p = p_beats(rival, leader)
            if not rival.measured:
                add(rival, f"may beat the leader {leader.config} (p {p:.2f})", p)
            elif leader.measured:
                fewer = leader if leader.measured <= rival.measured else rival  # the recipe's own rows first
                if fewer.measured >= repeats:
                    fewer = leader if fewer is rival else rival
                add(fewer, f"near tie {rival.config} vs {leader.config} (p {p:.2f}): repeat", 0.5 * p)
    return sorted(actions.values(), key=lambda a: -a.score)
