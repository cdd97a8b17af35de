"""Known-answer tests of the window aggregation (pure function, synthetic samples)."""

from __future__ import annotations

import pytest
from _telemetry_helpers import mk_sample, ns

from harness.telemetry.windows import WindowStats, compute_window


def constant(p_w: float, t0: float, t1: float, period: float = 0.1, start_seq: int = 0, **kw):
    """Samples every ``period`` s of a device drawing ``p_w`` watts; counter = exact integral since t=0."""
    n = int(round((t1 - t0) / period))
    return [mk_sample(start_seq + i, t0 + i * period, p_w * (t0 + i * period), p_w, **kw) for i in range(n + 1)]


def test_constant_power_exact_at_unaligned_edges():
    s = constant(50.0, 0.0, 12.0)
    w = compute_window(s, ns(1.03), ns(11.07), 0.1)
    assert w.valid, w.reasons
    assert w.energy_method == "counter"
    assert w.energy_j == pytest.approx(50.0 * 10.04, rel=1e-9)
    assert w.duration_s == pytest.approx(10.04)
    assert w.avg_power_w == pytest.approx(50.0)
    assert w.coverage == 1.0


def test_zeus_edge_loss_regression():
    """Zeus integrates only samples inside the window: 0 J for a window with < 2 samples, lost edges otherwise."""
    s = constant(50.0, 0.0, 12.0, period=1.0)
    w = compute_window(s, ns(3.2), ns(3.9), 1.0)  # no sample inside at all
    assert w.energy_j == pytest.approx(35.0)
    assert w.sample_count == 0 and w.valid
    # A 50 -> 60 W step: the counter delta interpolated at the edges is exact when the step is on a sample.
    step = [
        mk_sample(i, float(i), (50.0 * i if i <= 100 else 5000.0 + 60.0 * (i - 100)), 50.0 if i < 100 else 60.0)
        for i in range(0, 112)
    ]
    w = compute_window(step, ns(99.0), ns(110.0), 1.0)
    assert w.energy_j == pytest.approx(50.0 + 600.0)


def test_edge_interpolation_uses_the_samples_just_outside():
    # Energy 0 -> 10 J between t=0 and t=1, then a jump in power: 10 -> 110 J between t=1 and t=2.
    s = [
        mk_sample(0, 0.0, 0.0, 10.0),
        mk_sample(1, 1.0, 10.0, 10.0),
        mk_sample(2, 2.0, 110.0, 100.0),
        mk_sample(3, 3.0, 210.0, 100.0),
    ]
    w = compute_window(s, ns(0.5), ns(2.5), 1.0)
    assert w.energy_j == pytest.approx((10.0 - 5.0) + 100.0 + 50.0)
    assert w.sample_count == 2


def test_power_integration_only_without_counter_and_clipped():
    s = [mk_sample(i, i * 0.1, None, 100.0) for i in range(0, 51)]
    w = compute_window(s, ns(0.25), ns(4.25), 0.1)
    assert w.energy_method == "power_integration"
    assert w.energy_j == pytest.approx(400.0)
    assert w.valid


def test_missing_bracket_samples_are_invalid_never_zero():
    s = constant(50.0, 1.0, 2.0)
    w = compute_window(s, ns(0.5), ns(1.5), 0.1)
    assert not w.valid and "no_sample_before" in w.reasons and w.energy_j is None
    w = compute_window(s, ns(1.5), ns(2.5), 0.1)
    assert not w.valid and "no_sample_after" in w.reasons and w.energy_j is None
    w = compute_window([], ns(0.0), ns(1.0), 0.1)
    assert set(w.reasons) >= {"no_sample_before", "no_sample_after"} and w.energy_j is None


def test_gap_and_coverage():
    s = constant(50.0, 0.0, 10.0)
    holed = [x for x in s if not (ns(4.0) < x.t_wall_ns < ns(4.5))]
    w = compute_window(holed, ns(1.0), ns(9.0), 0.1)
    assert "gap_over_3_periods" in w.reasons
    assert w.energy_j == pytest.approx(400.0)  # still computed, but the window is invalid
    assert not w.valid
    sparse = s[::2]  # every other sample: 5 Hz against a 10 Hz sampler
    w = compute_window(sparse, ns(1.0), ns(9.0), 0.1)
    assert "coverage_below_95pct" in w.reasons and "gap_over_3_periods" not in w.reasons
    assert 0.45 < w.coverage < 0.55


def test_counter_reset_and_uuid_change():
    s = constant(50.0, 0.0, 5.0)
    reset = s[:20] + [mk_sample(x.seq, (x.t_wall_ns - 10**18) / 1e9, 0.001 * x.seq, 50.0) for x in s[20:]]
    w = compute_window(reset, ns(1.0), ns(4.0), 0.1)
    assert "counter_reset" in w.reasons and w.energy_j is None and not w.valid
    swapped = s[:20] + [x.model_copy(update={"uuid": "GPU-b"}) for x in s[20:]]
    w = compute_window(swapped, ns(1.0), ns(4.0), 0.1)
    assert "uuid_change" in w.reasons and w.energy_j is None
    w = compute_window(swapped, ns(2.5), ns(4.0), 0.1)  # entirely after the change: fine
    assert w.valid and w.gpu_uuid == "GPU-b"


def test_clock_disagreement_probe_errors_slow_probe_restart():
    s = constant(50.0, 0.0, 5.0)
    stepped = s[:20] + [x.model_copy(update={"t_mono_ns": x.t_mono_ns - 500_000_000}) for x in s[20:]]
    assert "clock_disagreement" in compute_window(stepped, ns(1.0), ns(4.0), 0.1).reasons
    bad = list(s)
    bad[25] = bad[25].model_copy(update={"energy_mj": None, "power_w": None, "errors": ["nvml energy: Unknown Error"]})
    w = compute_window(bad, ns(1.0), ns(4.0), 0.1)
    assert "probe_errors" in w.reasons and w.energy_j == pytest.approx(150.0)
    slow = list(s)
    slow[25] = slow[25].model_copy(update={"probe_latency_ms": 350.0})
    assert "slow_probe" in compute_window(slow, ns(1.0), ns(4.0), 0.1).reasons
    assert "sampler_restart" in compute_window(s, ns(1.0), ns(4.0), 0.1, restarts_ns=[ns(2.0)]).reasons
    assert compute_window(s, ns(1.0), ns(4.0), 0.1, restarts_ns=[ns(4.5)]).valid


def test_clock_event_flags_ignore_idle():
    s = constant(50.0, 0.0, 5.0, clock_event_reasons=0x1)
    w = compute_window(s, ns(1.0), ns(4.0), 0.1)
    assert w.power_capped is False and w.thermal is False and w.clock_event_reasons_or == 0x1
    s[20] = s[20].model_copy(update={"clock_event_reasons": 0x4})
    s[30] = s[30].model_copy(update={"clock_event_reasons": 0x40})
    w = compute_window(s, ns(1.0), ns(4.0), 0.1)
    assert w.power_capped and w.thermal and w.clock_event_reasons_or == 0x45


def test_device_clock_duration_scaled():
    # A twin running 20x: device time advances 2 s per wall period of 0.1 s; power 10 W on the device clock.
    s = []
    for i in range(31):
        t = i * 0.1
        s.append(mk_sample(i, t, 10.0 * 20 * t, 10.0, device_ns=10**18 + int(round(20 * t * 1e9))))
    w = compute_window(s, ns(1.0), ns(2.0), 0.1)
    assert w.duration_s == pytest.approx(20.0) and w.wall_duration_s == pytest.approx(1.0)
    assert w.energy_j == pytest.approx(200.0) and w.avg_power_w == pytest.approx(10.0)


def test_bad_window_and_invalid_constructor():
    w = compute_window(constant(1.0, 0, 1), ns(0.5), ns(0.5), 0.1)
    assert w.reasons == ["bad_window"] and w.energy_j is None
    inv = WindowStats.invalid(1, 2, "sampler_unreachable")
    assert not inv.valid and inv.energy_j is None and inv.energy_method is None


def test_step_edge_model_recovers_a_load_step_between_samples():
    # 10 W until t = 1.3 s, then 100 W; samples once a second carry the counter and the instant power.
    def e(t: float) -> float:
        return 10.0 * min(t, 1.3) + 100.0 * max(0.0, t - 1.3)

    s = [mk_sample(i, float(i), e(i), 10.0 if i <= 1 else 100.0) for i in range(5)]
    w = compute_window(s, ns(1.3), ns(3.5), 1.0)
    assert w.edge_model == "step" and w.energy_j == pytest.approx(220.0)
    lin = compute_window(s, ns(1.3), ns(3.5), 1.0, edge_model="linear")
    assert lin.energy_j == pytest.approx(233.0 - (10.0 + 0.3 * 73.0))  # linear books 30 % of the step interval early


def test_edge_sample_without_counter_uses_the_next_counter_reading():
    s = constant(50.0, 0.0, 5.0)
    s[10] = s[10].model_copy(update={"energy_mj": None, "errors": ["nvml energy: GPU is lost"]})  # the sample at 1.0 s
    w = compute_window(s, ns(1.05), ns(3.0), 0.1)
    assert w.energy_j == pytest.approx(50.0 * 1.95) and w.energy_method == "counter"
    assert "probe_errors" in w.reasons
