"""The bench's server-side window edges and the after-snapshot taken at or before the window end (pure functions, no servers:
the twin sweep tests exercise them end to end)."""

from __future__ import annotations

from harness.bench import SERVER_EDGE_TOLERANCE_NS, sample_at, server_window
from harness.engine.client import GenerateResult, parse_meta_info
from harness.telemetry.windows import GpuSample
from harness.timeutil import ScaledClock

ANCHOR = 1_700_000_000_000_000_000
CLOCK = ScaledClock(scale=20.0, anchor_wall_ns=ANCHOR, anchor_mono_ns=5_000)


def _twin(recv_dev: int, fin_dev: int) -> GenerateResult:
    return GenerateResult(**parse_meta_info({"completion_tokens": 8, "twin_received_ns": recv_dev, "twin_finish_ns": fin_dev}))


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
    return GpuSample(run_id="r", seq=seq, t_wall_ns=t, t_mono_ns=t, energy_mj=1.0 * seq, power_w=50.0, clock_event_reasons=mask)


class _Store:
    def __init__(self, recs):
        self.recs = recs

    def since(self, since_seq, limit):
        return [r for r in self.recs if r.seq > since_seq][:limit]


class _Source:
    """An InProcessSampler-shaped source: ``snapshot()`` is the newest sample (idle bit set: read late)."""

    def __init__(self, recs):
        self.core = type("Core", (), {"store": _Store(recs)})()
        self.recs = recs

    def snapshot(self):
        return self.recs[-1]


def test_sample_at_picks_the_sample_atest_the_window_end_not_the_newest():
    recs = [_sample(i, 1000 * i, 0x4 if i < 5 else 0x1) for i in range(10)]
    src = _Source(recs)
    assert sample_at(src, 4_400).seq == 4 and sample_at(src, 4_400).clock_event_reasons == 0x4
    assert sample_at(src, 10**9).seq == 9
    no_list = type("S", (), {"snapshot": lambda self: recs[-1]})()
    assert sample_at(no_list, 4_400).seq == 9  # a source that cannot list samples: the latest one
