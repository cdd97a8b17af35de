"""The band controller and the sglang-adaptive emulation as pure functions: state in, decision out."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core.errors import DataError, UsageError
from harness.grid import BASELINE, SpecConfig
from harness.serve import adaptive, controller, picks
from harness.serve import band_feedback as closed_loop
from harness.serve import utilization_model as umodel
from harness.serve.band_feedback import LoopParams
from harness.serve.controller import ControllerParams, ControllerState, Observation

A = SpecConfig(3, 4, 8)
B = SpecConfig(3, 2, 4)
TABLE = {1: BASELINE, 4: A, 16: B}
ALL = frozenset({BASELINE, A, B})
P = ControllerParams(dwell_ticks=3, min_hold_s=0.5)


def run(
    loads: list[int],
    *,
    util: float | None = 0.96,
    alive: frozenset[SpecConfig] = ALL,
    state: ControllerState | None = None,
    t0: float = 0.0,
    dt: float = 0.1,
) -> tuple[ControllerState, list[controller.Switch]]:
    s = state or ControllerState()
    switches = []
    for i, n in enumerate(loads):
        d = controller.step(s, Observation(t0 + i * dt, n, util, alive), TABLE, P)
        s = d.state
        if d.switch:
            switches.append(d.switch)
    return s, switches


def test_pick_for_nearest_on_log_scale() -> None:
    assert controller.pick_for(TABLE, 1) == (1, BASELINE)
    assert controller.pick_for(TABLE, 2) == (1, BASELINE)  # ties (log 2 between 1 and 4) go to the smaller
    assert controller.pick_for(TABLE, 3) == (4, A)
    assert controller.pick_for(TABLE, 9) == (16, B)
    assert controller.pick_for(TABLE, 0) == (1, BASELINE)


def test_load_step_switches_once_after_dwell() -> None:
    s, sw = run([1] * 10 + [16] * 40)
    assert [(x.reason, x.new) for x in sw] == [("start", BASELINE), ("load_change", B)]
    assert s.active == B and sw[1].detail["table_bs"] == 16 and sw[1].old == BASELINE


def test_flapping_load_does_not_flap() -> None:
    # alternating 1 / 3 each tick: the EMA crosses the 1|4 boundary (2) every tick, so no new pick holds the dwell
    s, sw = run([1] * 5 + [1, 3] * 30)
    assert [x.reason for x in sw] == ["start"]


def test_min_hold_blocks_a_second_switch_too_soon() -> None:
    p = ControllerParams(dwell_ticks=1, min_hold_s=10.0, bs_alpha=1.0)
    s = ControllerState()
    reasons = []
    for t, n in [(0.0, 1), (20.0, 16), (21.0, 1), (22.0, 1), (25.0, 1)]:
        d = controller.step(s, Observation(t, n, 0.9, ALL), TABLE, p)
        s = d.state
        reasons += [d.switch.reason] if d.switch else []
    assert reasons == ["start", "load_change"]  # back to 1 within 10 s of the last switch: held
    d = controller.step(s, Observation(30.0, 1, 0.9, ALL), TABLE, p)
    assert d.switch is not None and d.switch.new == BASELINE


def test_a_host_without_power_readings_routes_by_the_table() -> None:
    """A CPU engine on a host without RAPL never had telemetry: no fallback, picks follow the load (open loop)."""
    p = ControllerParams(dwell_ticks=3, min_hold_s=0.5, power_telemetry=False)
    s, reasons = ControllerState(), []
    for i, n in enumerate([1] * 5 + [16] * 10):
        d = controller.step(s, Observation(i * 0.1, n, None, ALL), TABLE, p)
        s = d.state
        reasons += [(d.switch.reason, d.switch.new)] if d.switch else []
    assert reasons == [("start", BASELINE), ("load_change", B)] and not s.fallback


def test_lost_telemetry_falls_back_at_once_and_restores_after_dwell() -> None:
    s, _ = run([16] * 20)
    assert s.active == B
    d = controller.step(s, Observation(5.0, 16, None, ALL), TABLE, P)
    assert d.switch is not None and (d.switch.new, d.switch.reason) == (BASELINE, "telemetry_lost") and d.state.fallback
    s, sw = run([16] * 3, state=d.state, util=0.96, t0=6.0)
    assert sw == [] and s.active == BASELINE  # restore_ticks (5) not reached yet
    s, sw = run([16] * 5, state=s, util=0.96, t0=7.0)
    assert [(x.reason, x.new) for x in sw] == [("telemetry_restored", B)]


def test_lost_instance_routes_to_fallback_then_any_alive() -> None:
    s, _ = run([16] * 20)
    d = controller.step(s, Observation(5.0, 16, 0.96, frozenset({BASELINE, A})), TABLE, P)
    assert d.switch is not None and (d.switch.old, d.switch.new, d.switch.reason) == (B, BASELINE, "instance_lost")
    d = controller.step(d.state, Observation(5.1, 16, 0.96, frozenset({A})), TABLE, P)
    assert d.switch is not None and (d.switch.new, d.switch.reason) == (A, "instance_lost")
    d = controller.step(d.state, Observation(5.2, 16, 0.96, frozenset()), TABLE, P)
    assert d.state.active is None and d.switch is None


def test_adaptive_tiers_move_on_accept_length_with_dwell() -> None:
    tiers = frozenset(adaptive.tier_config(s) for s in (0, 1, 3, 5, 7))
    p = adaptive.AdaptiveParams(dwell_ticks=2, alpha=1.0)
    s = adaptive.AdaptiveState()
    moves = []
    for acc in [None, 1.9, 1.9, 1.9, 1.9, 1.3, 1.3, 1.3]:
        d = adaptive.step(s, Observation(0.0, 1, None, tiers, accept_length=acc), p)
        s = d.state
        moves += [(d.switch.reason, d.switch.new.steps)] if d.switch else []
    # bs 1 tiers (1,3,5,7): start at 1; accept 1.9 (gain 0.9 >= 0.6 * 1) -> 3; at 3, 1.9 is neither; 1.3 (0.3 <= 0.9) -> 1
    assert moves == [("start", 1), ("accept_length", 3), ("accept_length", 1)]
    at5 = adaptive.AdaptiveState(active=adaptive.tier_config(5), ticks=3)
    d = adaptive.step(at5, Observation(0.0, 16, None, tiers), adaptive.AdaptiveParams(dwell_ticks=1, bs_alpha=1.0))
    assert d.switch is not None and (d.switch.reason, d.switch.new) == (
        "load_change",
        SpecConfig(3, 1, 4),
    )  # bs 8 tiers (0,1,3)


def test_pick_sources(tmp_path) -> None:
    assert picks.parse_table("1=0:0:0, 16=3:2:4") == {1: BASELINE, 16: B}
    with pytest.raises(UsageError, match="BS=s:k:d"):
        picks.parse_table("16:3:2:4")
    (tmp_path / "recipe.json").write_text('{"1": {"config": [3,4,8], "confidence": 0.9}, "16": {"config": [3,2,4]}}')
    assert picks.from_recipe(tmp_path) == {1: A, 16: B}
    (tmp_path / "bad.json").write_text('{"1": {"cfg": [3,4,8]}}')
    with pytest.raises(DataError, match="not a recipe"):
        picks.from_recipe(tmp_path / "bad.json")
    with pytest.raises(UsageError, match="exactly one"):
        picks.resolve("1=0:0:0", tmp_path, None, None)


def test_closed_loop_bias_moves_the_pick_to_the_config_the_traffic_puts_in_band() -> None:
    c = SpecConfig(5, 4, 4)
    model = {16: {A: (1.02, 300.0), B: (0.97, 250.0), c: (0.92, 200.0)}}
    p = ControllerParams(dwell_ticks=3, min_hold_s=0.0, model=model, loop=LoopParams(bias_tau_s=0.2, open_loop=False))
    s, alive = ControllerState(), frozenset({BASELINE, A, B, c})
    log = []
    for i in range(30):  # the traffic draws 0.05 less than the closed-loop model says, whatever the config
        u = {A: 0.97, B: 0.92, c: 0.87}.get(s.active, 0.5) if s.active else 0.5
        d = controller.step(s, Observation(i * 0.1, 16, u, alive, clean_s=5.0), {16: B}, p)
        s = d.state
        log += [(d.switch.reason, d.switch.new)] if d.switch else []
    assert log[-1] == ("load_change", A) and s.active == A and abs(s.loop.bias + 0.05) < 0.01
    assert umodel.model_pick(model[16], 0.0, (0.95, 0.98), alive) == B  # at bias 0: the recipe rule
    assert umodel.model_pick(model[16], -0.2, (0.95, 0.98), alive) == A  # none inside: the closest


def test_samples_of_idle_gaps_or_a_drain_do_not_move_the_integrator() -> None:
    model = {16: {A: (1.02, 300.0), B: (0.965, 250.0)}}
    p = ControllerParams(dwell_ticks=1, min_hold_s=0.0, model=model, loop=LoopParams(bias_tau_s=0.2, open_loop=False))
    s = controller.step(ControllerState(), Observation(0.0, 16, 0.96, ALL, clean_s=0.0), {16: B}, p).state
    for i in range(1, 40):  # a gap (u at idle) and a drain (u at the cap): not clean, nothing learnt, no switch
        d = controller.step(s, Observation(i * 0.1, 16, 0.2 if i % 2 else 1.02, ALL, clean_s=0.5), {16: B}, p)
        s = d.state
        assert d.switch is None
    assert s.active == B and s.loop.bias == 0.0
    d = controller.step(s, Observation(4.0, 16, 0.80, ALL, clean_s=1.0), {16: B}, p)  # one clean window: it counts
    assert d.state.loop.bias < -0.05


def test_utilization_model_interpolates_in_log_batch_size_and_open_loop_reads_each_config_at_its_own_batch() -> None:
    model = {4: {BASELINE: (1.0, 400.0), A: (0.93, 560.0)}, 16: {BASELINE: (1.02, 1450.0), A: (0.99, 1800.0)}}
    assert umodel.predict(model, A, 8) == pytest.approx((0.96, 1180.0))  # log-midpoint of 4 and 16
    assert umodel.predict(model, A, 1) == (0.93, 560.0) and umodel.predict(model, A, 64) == (0.99, 1800.0)
    assert umodel.predict(model, B, 8) is None
    # Poisson traffic served by no_spec at bs 8 (925 tok/s): A serves that at bs ~6, where it draws 0.948, not 0.96
    rate = umodel.predict(model, BASELINE, 8)[1]  # type: ignore[index]
    assert rate == pytest.approx(925.0) and closed_loop.bs_for_rate(model, A, rate) == pytest.approx(6.0, rel=0.01)
    open_row = closed_loop.predictions(model, BASELINE, 8, open_loop=True)
    assert open_row[A][0] == pytest.approx(0.9477, abs=1e-3) and open_row[BASELINE][0] == pytest.approx(1.01)
    assert closed_loop.predictions(model, BASELINE, 8, open_loop=False)[A][0] == pytest.approx(0.96)


def test_hysteresis_keeps_the_routed_config_for_a_marginal_gain() -> None:
    model = {8: {A: (0.945, 500.0), B: (0.95, 500.0), BASELINE: (1.02, 400.0)}}
    lp = LoopParams(open_loop=False)  # expected in-band share (sigma 0.02): A 0.36, B 0.43: a gain below 0.1
    obs = Observation(0.0, 8, 0.945, ALL, clean_s=0.0)
    assert closed_loop.closed_loop_step(closed_loop.LoopState(), obs, model, lp, (0.95, 0.98), A)[0] == A
    assert closed_loop.closed_loop_step(closed_loop.LoopState(), obs, model, lp, (0.95, 0.98), None)[0] == B
    assert umodel.band_share(0.945, (0.95, 0.98), 0.02, 0.995) == pytest.approx(0.361, abs=0.002)
    assert umodel.band_share(0.999, (0.95, 0.98), 0.02, 0.995) == 0.0  # at the cap: never down in the band
    far = {8: {**model[8], A: (0.90, 500.0)}}
    assert closed_loop.closed_loop_step(closed_loop.LoopState(), obs, far, lp, (0.95, 0.98), A)[0] == B


def test_open_loop_pick_follows_the_offered_load_not_the_in_flight_count() -> None:
    model = {
        4: {BASELINE: (1.0, 400.0), A: (0.93, 560.0), B: (0.90, 520.0)},
        16: {BASELINE: (1.02, 1450.0), A: (1.02, 1800.0), B: (0.97, 1700.0)},
    }
    picks = {}
    for in_flight in (6, 12):  # 12: a drain after a switch doubles the count; the offered load is the same
        st, pick = closed_loop.LoopState(), None
        for i in range(150):  # 10 requests/s of 90 tokens each: 900 tok/s
            obs = Observation(i * 0.1, in_flight, None, ALL, arrivals=1, tokens=90.0)
            pick, st = closed_loop.closed_loop_step(st, obs, model, LoopParams(), (0.95, 0.98), None)
        assert st.offered() == pytest.approx(900.0, rel=0.02)
        picks[in_flight] = pick
    assert picks == {6: A, 12: A}  # A serves 900 tok/s at bs ~5.9 (u 0.955); B at bs ~6.3 (0.923)
    by_count = closed_loop.predictions(model, None, 12, open_loop=False)  # read at the in-flight count instead:
    assert umodel.share_pick(by_count, 0.0, (0.95, 0.98), ALL, 0.02, 0.995) == B  # A at bs 12 would be at the cap


def test_utilization_model_from_a_sweeps_rows(tmp_path) -> None:
    """``--umodel``: the committed twin grid's rows become {bs: {config: (mean u, mean tok/s)}}; rows at two caps
    are refused (a model mixing caps predicts neither)."""
    import json as _json

    from harness.serve.utilization_rows import load_model

    grid = Path(__file__).parents[1] / "fixtures" / "twin_grid_3rep.jsonl"
    model = load_model(grid)
    rows = [_json.loads(line) for line in grid.read_text().splitlines()]
    cell = [
        r
        for r in rows
        if r["batch_size"] == 16 and (r["steps"], r["topk"], r["num_draft_tokens"]) == (3, 2, 4) and r["error"] is None
    ]
    u, v = model[16][B]
    assert u == pytest.approx(sum(r["avg_power_watts"] / r["power_limit_w"] for r in cell) / len(cell))
    assert v == pytest.approx(sum(r["wall_clock_tok_s"] for r in cell) / len(cell))
    assert sorted(model) == [1, 4, 8, 16] and len(model[1]) == 19
    mixed = tmp_path / "mixed.jsonl"
    rows[0]["power_limit_w"] = 60.0
    mixed.write_text("".join(_json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match="several power caps"):
        load_model(mixed)
