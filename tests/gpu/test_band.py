"""The band arithmetic (``harness.gpu.band``) and every cap it or the report suggests: inside the board's limits."""

from __future__ import annotations

import pytest

from harness.core.errors import UsageError
from harness.gpu.band import BAND, MAX_AUTO_CAPS, choose_caps, clamp_cap, in_band
from harness.gpu.power_cap import parse_power_caps
from harness.report.band import no_band_hint
from harness.report.sweep import CellSummary

H100 = (200.0, 700.0)
"""The H100 SXM's NVML power-limit constraints."""
H100_DRAWS = {1: [240.7, 242.8], 4: [245.2, 250.0], 16: [251.9, 265.7]}
"""The datacenter twin's steady draws at 700 W (the band probe's, baseline and (5,2,8))."""


def test_every_batch_size_gets_a_cap_inside_the_limits_that_puts_its_highest_draw_in_band() -> None:
    choice = choose_caps(H100_DRAWS, *H100)
    assert 1 <= len(choice.caps) <= MAX_AUTO_CAPS and not choice.uncovered
    assert all(H100[0] <= c <= H100[1] and c == int(c) for c in choice.caps)
    for bs, draws in H100_DRAWS.items():
        assert any(in_band(max(draws), cap) for cap in choice.caps if bs in choice.covers[cap]), bs


def test_batch_sizes_share_a_cap_only_with_half_a_band_of_room() -> None:
    # 241 and 243 W share [248.0, 253.7] W of caps (more than half of one band's ~8 W): one cap, not at either edge
    shared = choose_caps({1: [241.0], 4: [243.0]}, *H100)
    assert len(shared.caps) == 1 and shared.covers[shared.caps[0]] == (1, 4)
    # 242.8 and 250 W share only half a watt: two caps, each with room (one rounded cap would lose bs 4)
    apart = choose_caps({1: [242.8], 4: [250.0]}, *H100)
    assert len(apart.caps) == 2 and not apart.uncovered


def test_draws_below_the_lowest_limit_are_named_and_get_no_cap() -> None:
    choice = choose_caps({1: [120.0], 16: [260.0]}, *H100)
    assert choice.uncovered == (1,) and choice.covers == {choice.caps[0]: (16,)}
    assert choose_caps({1: [120.0]}, *H100).caps == ()
    assert choose_caps({1: [695.0]}, *H100).caps == ()  # above 0.98 of the highest limit: no cap brings it down


def test_at_most_three_caps_serve_the_most_batch_sizes() -> None:
    draws = {1: [300.0], 2: [320.0], 4: [340.0], 8: [360.0], 16: [380.0]}
    choice = choose_caps(draws, *H100)
    assert len(choice.caps) == MAX_AUTO_CAPS and len(choice.uncovered) == 2
    assert sum(len(b) for b in choice.covers.values()) == 3


def test_clamp_keeps_whole_watts_inside_the_constraints() -> None:
    assert clamp_cap(150.4, *H100) == 200.0 and clamp_cap(812.0, *H100) == 700.0 and clamp_cap(255.6, *H100) == 256.0


def test_power_caps_auto_is_alone_or_refused() -> None:
    assert parse_power_caps("auto") == ["auto"] and parse_power_caps(["AUTO"]) == ["auto"]
    with pytest.raises(UsageError, match="auto alone"):
        parse_power_caps("auto,250")


def _cell(config: tuple[int, int, int], watts: float, cap: float, speed: float) -> CellSummary:
    return CellSummary(
        batch_size=16, config=config, n_ok=1, n_error=0, speed_tok_s=speed, avg_power_watts=watts,
        utilization=watts / cap,
    )  # fmt: skip


def test_the_reports_hint_names_a_cap_inside_the_boards_limits() -> None:
    cells = [_cell((0, 0, 0), 252.0, 700.0, 640.0), _cell((3, 4, 8), 264.0, 700.0, 505.0)]
    hint = no_band_hint(cells, 700.0, 16, H100)
    assert hint is not None and "--power-caps 261 (inside this GPU's 200-700 W limits)" in hint
    assert in_band(252.0, 261.0) and BAND[0] <= 252.0 / 261.0 <= BAND[1]
    # a board drawing 120 W under a 200 W floor: the hint says no cap can, never a cap NVML would refuse
    low = no_band_hint([_cell((0, 0, 0), 120.0, 700.0, 640.0)], 700.0, 16, H100)
    assert low is not None and "no cap inside this GPU's 200-700 W limits puts it in the band" in low
    assert "--power-caps 1" not in low
