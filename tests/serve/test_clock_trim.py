"""The clock trim's decisions (pure ``clock_step``) and the trimmed share the config pick reads."""

from __future__ import annotations

import pytest

from harness.grid import BASELINE, SpecConfig
from harness.serve.clock_trim import ClockParams, ClockState, clock_step
from harness.serve.utilization_model import band_share, share_pick

SUP = list(range(2370, 839, -15))
BAND = (0.95, 0.98)


def step(state: ClockState, t: float, u: float | None, running: float | None = 2370, clean: bool = True, **kw):  # type: ignore[no-untyped-def]
    return clock_step(state, t_s=t, utilization=u, running_mhz=running, clean=clean, supported=SUP, band=BAND, **kw)


def test_above_band_locks_below_the_running_clock_and_inside_the_band_holds() -> None:
    s, ch = step(ClockState(), 10.0, 1.02, running=2200)
    assert ch is not None and ch.reason == "above_band" and ch.old_mhz is None
    assert ch.new_mhz in SUP and ch.new_mhz < 2200  # trimmed from the clock the cap held, not from the maximum
    assert s.locked_mhz == ch.new_mhz and s.last_change_s == 10.0
    s2, ch2 = step(s, 20.0, 0.965)
    assert ch2 is None and s2 == s  # the band is the dead band


def test_settle_rate_limit_and_unclean_samples_hold() -> None:
    s, _ = step(ClockState(), 10.0, 1.02)
    assert step(s, 10.5, 1.02)[1] is None  # the 1-s average still holds power from before the change
    assert step(s, 11.5, 1.02, sample_age_s=0.5)[1] is None  # the sample's window ends before settle_s
    assert step(s, 12.0, 1.02, clean=False)[1] is None  # idle gap or drain: says nothing about the clock
    _, ch = step(s, 12.0, 1.5)
    assert ch is not None and ch.new_mhz is not None and s.locked_mhz is not None
    assert ch.new_mhz >= s.locked_mhz * (1 - ClockParams().max_step) - 15  # one change moves at most max_step


def test_below_band_gives_clock_back_then_unlocks_and_unlocked_below_band_holds() -> None:
    s = ClockState(locked_mhz=1800, last_change_s=0.0)
    s, ch = step(s, 5.0, 0.90, running=1800)
    assert ch is not None and ch.reason == "below_band" and ch.new_mhz is not None and ch.new_mhz > 1800
    s, ch = step(ClockState(locked_mhz=2355, last_change_s=0.0), 5.0, 0.80, running=2355)
    assert ch is not None and ch.reason == "unlock" and ch.new_mhz is None and s.locked_mhz is None
    assert step(ClockState(), 5.0, 0.80)[1] is None  # a lock cannot raise power: the config must


def test_lost_telemetry_unlocks_at_once_and_bad_input_is_refused() -> None:
    s, ch = step(ClockState(locked_mhz=1500, last_change_s=9.9), 10.0, None, running=None)
    assert ch is not None and ch.reason == "telemetry_lost" and ch.new_mhz is None and s.locked_mhz is None
    assert step(ClockState(), 10.0, None)[1] is None
    with pytest.raises(ValueError, match="no supported SM clocks"):
        clock_step(ClockState(), t_s=0, utilization=1.0, running_mhz=None, clean=True, supported=[], band=BAND)


def test_no_oscillation_on_a_plant_with_the_twin_law() -> None:
    """Closed loop on u = 0.2 + 0.85 (f / 2370) ** 2.2 (the twin's DVFS law, demand above the cap): it settles in the
    band within 3 changes and stays there without another change."""
    s, t, changes = ClockState(), 0.0, []
    for _ in range(60):
        f = s.locked_mhz or 2370
        u = min(1.0, 0.2 + 0.85 * (f / 2370) ** 2.2)
        s, ch = step(s, t, u, running=f)
        if ch is not None:
            changes.append((t, ch.new_mhz))
        t += 0.25
    f = s.locked_mhz or 2370
    assert BAND[0] <= 0.2 + 0.85 * (f / 2370) ** 2.2 <= BAND[1]
    assert 1 <= len(changes) <= 3 and changes[-1][0] <= 3.0, changes


def test_trimmed_share_counts_the_cap_and_picks_the_fastest_that_reaches_the_band() -> None:
    assert band_share(1.0, BAND, 0.02, 0.995) == 0.0 and band_share(1.0, BAND, 0.02, 0.995, trim=True) == 1.0
    assert band_share(0.85, BAND, 0.02, 0.995, trim=True) < 0.01
    fast, row = SpecConfig(3, 2, 4), {BASELINE: (1.01, 30.0), SpecConfig(3, 2, 4): (0.99, 60.0)}
    alive = frozenset(row)
    assert share_pick(row, 0.0, BAND, alive, 0.02, 0.995) == fast  # untrimmed: no_spec at the cap has no share
    assert share_pick(row, 0.0, BAND, alive, 0.02, 0.995, trim=True) == fast  # trimmed: both reach, the faster
    row_bs1 = {BASELINE: (1.0, 30.0), fast: (0.86, 60.0)}
    assert share_pick(row_bs1, 0.0, BAND, alive, 0.02, 0.995, trim=True) == BASELINE  # speculation cannot reach it


def test_trimmed_loop_keeps_a_config_that_reaches_the_band_unless_the_gain_is_large() -> None:
    from harness.serve.band_feedback import LoopParams, LoopState, closed_loop_step
    from harness.serve.controller import Observation

    fast = SpecConfig(5, 2, 8)
    model = {bs: {BASELINE: (0.97, 30.0 * bs), fast: (0.99, 45.0 * bs)} for bs in (1, 16)}
    obs = Observation(t_s=1.0, in_flight=8, utilization=0.96, alive=frozenset({BASELINE, fast}), clock_active=True)
    trim = LoopParams(open_loop=False)
    pick, _ = closed_loop_step(LoopState(), obs, model, trim, BAND, BASELINE)
    assert pick == BASELINE  # share 0.93 -> 1.0 is below the trimmed hysteresis: no switch, no drain
    pick, _ = closed_loop_step(
        LoopState(), obs, model, LoopParams(open_loop=False, trim_hysteresis=0.05), BAND, BASELINE
    )
    assert pick == fast
    off = Observation(t_s=1.0, in_flight=8, utilization=0.96, alive=obs.alive, clock_active=False)
    pick, _ = closed_loop_step(LoopState(), off, model, trim, BAND, fast)
    assert pick == BASELINE  # the trim refused: (5,2,8) at 0.99 is out of the band, no_spec at 0.97 in it
