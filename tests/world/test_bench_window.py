"""The bench's server-side window edges and the after-snapshot taken at or before the window end (pure functions, and
``TelemetrySource.sample_at`` on both real sources; the twin sweep tests exercise them end to end)."""

from __future__ import annotations

import time

from _telemetry_helpers import ScriptedProbe

from harness.core.clocks import ScaledClock
from harness.engine.sglang_client import GenerateResult, parse_meta_info
from harness.telemetry.client import TelemetryClient, TelemetrySource
from harness.telemetry.sampler import InProcessSampler, SamplerCore
from harness.telemetry.server import start_server
from harness.telemetry.windows import GpuSample, sample_near
from harness.world.bench import SERVER_EDGE_TOLERANCE_NS, server_window

ANCHOR = 1_700_000_000_000_000_000
CLOCK = ScaledClock(scale=20.0, anchor_wall_ns=ANCHOR, anchor_mono_ns=5_000)


def _twin(recv_dev: int, fin_dev: int) -> GenerateResult:
    return GenerateResult(
        **parse_meta_info({"completion_tokens": 8, "twin_received_ns": recv_dev, "twin_finish_ns": fin_dev})
    )


def test_meta_info_stamps_twin_and_sglang():
    m = parse_meta_info({"twin_received_ns": 10, "twin_finish_ns": 20})
    assert (m["server_received_ns"], m["server_finish_ns"], m["server_clock"]) == (10, 20, "twin_device")
    m = parse_meta_info({"request_received_ts": 1.5, "request_finished_ts": 2.25})
    assert (m["server_received_ns"], m["server_finish_ns"], m["server_clock"]) == (1_500_000_000, 2_250_000_000, "wall")
    assert parse_meta_info({"e2e_latency": 1.0})["server_clock"] is None


def test_server_window_maps_device_ns_to_wall_and_keeps_twin_seconds():
    # device time runs 20x: 2 twin s after the anchor is 0.1 wall s after it
    dev0, dev1 = ANCHOR + 2_000_000_000, ANCHOR + 7_000_000_000
    res = [_twin(dev0 + 300_000_000, dev1), _twin(dev0, dev1 - 1_000_000_000)]
    client_start, client_end = ANCHOR + 90_000_000, ANCHOR + 360_000_000
    start, end, elapsed = server_window(res, CLOCK, client_start, client_end)
    assert start == ANCHOR + 100_000_000 and end == ANCHOR + 350_000_000
    assert elapsed == 5.0  # twin seconds straight from the device clock, no scaling error


def test_server_window_falls_back_when_any_stamp_is_missing_or_implausible():
    dev0, dev1 = ANCHOR + 2_000_000_000, ANCHOR + 7_000_000_000
    ok = _twin(dev0, dev1)
    assert server_window([ok, GenerateResult(completion_tokens=8)], CLOCK, ANCHOR, ANCHOR + 10**9) is None
    # edges far outside the client's own window: the clocks disagree, distrust the server
    assert server_window([ok], CLOCK, ANCHOR + 100_000_000 + 2 * SERVER_EDGE_TOLERANCE_NS, ANCHOR + 10**10) is None
    wall = GenerateResult(**parse_meta_info({"request_received_ts": 100.0, "request_finished_ts": 101.0}))
    assert server_window([ok, wall], CLOCK, 0, 10**12) is None  # mixed clocks


def _sample(seq: int, t: int, mask: int) -> GpuSample:
    return GpuSample(
        run_id="r", seq=seq, t_wall_ns=t, t_mono_ns=t, energy_mj=1.0 * seq, power_w=50.0, clock_event_reasons=mask
    )


def test_sample_at_picks_the_sample_atest_the_window_end_not_the_newest():
    recs = [_sample(i, 1000 * i, 0x4 if i < 5 else 0x1) for i in range(10)]
    assert sample_near(recs, 4_400).seq == 4 and sample_near(recs, 4_400).clock_event_reasons == 0x4
    assert sample_near(recs, 10**9).seq == 9
    assert sample_near([], 4_400) is None  # nothing usable listed: the source answers its latest snapshot


def test_both_telemetry_sources_answer_sample_at_from_their_recent_samples():
    """The in-process sampler and the sidecar client (real sampler thread and HTTP server) pick the same sample."""
    core = SamplerCore(ScriptedProbe(), rate_hz=50.0).start()
    srv, _ = start_server(core, "127.0.0.1", 0)
    inproc = InProcessSampler(ScriptedProbe(), rate_hz=50.0)
    try:
        time.sleep(0.4)
        with TelemetryClient(f"http://127.0.0.1:{srv.server_address[1]}") as client:
            for source in (client, inproc):
                assert isinstance(source, TelemetrySource)
                latest = source.snapshot()
                assert latest is not None and latest.seq >= 5
                mid = latest.t_wall_ns - 100_000_000
                picked = source.sample_at(mid)
                assert picked is not None and mid - 200_000_000 < picked.t_wall_ns <= mid
                assert source.sample_at(latest.t_wall_ns + 10**12).seq >= latest.seq  # the newest one
    finally:
        inproc.close()
        srv.shutdown()
        srv.server_close()
        core.stop()
