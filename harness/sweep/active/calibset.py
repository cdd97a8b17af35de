"""The calibration set: the few cells measured first, chosen to pin the twin's parameters.

- the baseline at every batch size (the reward's reference speed; the target-only step time and power);
- at the smallest batch size, where acceptance and the draft's fixed costs dominate: the reference tree (3,4,8), the
  deepest tree (5,4,16) and a chain (3,1,4) (acceptance depth, width and the chain factor);
- at the largest batch size, where verification cost and power saturate: (3,4,8), the small tree (3,2,4) and the
  shallow wide (1,4,2) (per-token target cost and power, the power cap).

Configs not in the plan are replaced by the plan's spec configs with the fewest and the most draft tokens.
"""

from __future__ import annotations

from typing import Sequence

from harness.grid import SpecConfig

SMALL_BS_ANCHORS = ((3, 4, 8), (5, 4, 16), (3, 1, 4))
LARGE_BS_ANCHORS = ((3, 4, 8), (3, 2, 4), (1, 4, 2))


def _anchors(wanted: Sequence[tuple[int, int, int]], configs: Sequence[SpecConfig]) -> list[SpecConfig]:
    spec = [c for c in configs if not c.is_baseline]
    chosen = [c for c in spec if c.as_tuple() in wanted]
    if len(chosen) < 2 and spec:
        by_tokens = sorted(spec, key=lambda c: (c.draft_tokens, c.steps, c.topk))
        chosen += [c for c in (by_tokens[0], by_tokens[-1]) if c not in chosen]
    return chosen


def calibration_cells(configs: Sequence[SpecConfig], batch_sizes: Sequence[int]) -> list[tuple[int, SpecConfig]]:
    """(batch size, config) pairs, baselines first, in the plan's batch-size order."""
    sizes = list(batch_sizes)
    out: list[tuple[int, SpecConfig]] = [(bs, c) for bs in sizes for c in configs if c.is_baseline]
    lo, hi = min(sizes), max(sizes)
    out += [(lo, c) for c in _anchors(SMALL_BS_ANCHORS, configs)]
    if hi != lo:
        out += [(hi, c) for c in _anchors(LARGE_BS_ANCHORS, configs)]
    return out
