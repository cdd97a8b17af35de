"""The sample store: bounded ring, retention verdicts, resume with a gap record, torn-tail repair."""

from __future__ import annotations

from pathlib import Path

from harness.core.clocks import wall_ns
from harness.core.jsonl import read_jsonl
from harness.telemetry.store import SampleStore
from harness.telemetry.windows import GpuSample

BASE = 10**18


def _fill(store: SampleStore, n: int, t0: float = 0.0, run_id: str = "r", base: int = BASE) -> None:
    """``n`` samples 0.1 s apart from ``base + t0`` seconds: a device drawing 50 W (counter = 50 J/s since base)."""
    for i in range(n):
        t = t0 + i * 0.1
        ns = base + int(round(t * 1e9))
        store.append(GpuSample(run_id=run_id, seq=store.next_seq(), t_wall_ns=ns, t_mono_ns=ns, device_ns=ns, uuid="GPU-a",
                               energy_mj=50.0 * t * 1e3, power_w=50.0))  # fmt: skip


def test_ring_is_bounded_and_says_outside_retention():
    store = SampleStore(None, retention_s=1e9, max_records=100)
    store.open("r", {})
    _fill(store, 400)
    assert len(store) <= 113
    old = store.window(BASE + 1_000_000_000, BASE + 2_000_000_000, 0.1)
    assert not old.valid and "outside_retention" in old.reasons and "no_sample_before" in old.reasons
    recent = store.window(BASE + 35_000_000_000, BASE + 38_000_000_000, 0.1)
    assert recent.valid and abs(recent.energy_j - 150.0) < 1e-6


def test_resume_writes_gap_and_reloads_history(tmp_path: Path):
    base = wall_ns() - 60_000_000_000  # run a sampled a minute ago; run b samples from 10 s after the restart
    a = SampleStore(tmp_path, retention_s=1e12)
    a.open("run-a", {"probe": "x"})
    _fill(a, 30, run_id="run-a", base=base)
    a.close()
    # A torn final line, as left by a kill during a write.
    with open(tmp_path / "samples.jsonl", "ab") as f:
        f.write(b'{"kind":"sample","schema":1,"run_id":"run-a","seq":31,"t_wa')
    b = SampleStore(tmp_path, retention_s=1e12)
    b.open("run-b", {"probe": "x"})
    _fill(b, 30, t0=70.0, run_id="run-b", base=base)
    b.close()
    recs = read_jsonl(tmp_path / "samples.jsonl", allow_torn_tail=False)
    assert [r["seq"] for r in recs] == list(range(len(recs)))
    assert [r["kind"] for r in recs].count("gap") == 1
    gap = next(r for r in recs if r["kind"] == "gap")
    assert gap["detail"]["prev_run_id"] == "run-a" and gap["detail"]["prev_seq"] == 30
    assert b.previous_run == {"run_id": "run-a", "seq": 30, "t_wall_ns": recs[30]["t_wall_ns"]}
    # History from run a is queryable in run b; a window across the restart is invalid.
    early = b.window(base + 500_000_000, base + 2_500_000_000, 0.1)
    assert early.valid and abs(early.energy_j - 100.0) < 1e-6
    across = b.window(base + 2_000_000_000, base + 71_000_000_000, 0.1)
    assert {"gap_over_3_periods", "sampler_restart"} <= set(across.reasons)


def test_old_windows_are_read_back_from_the_log(tmp_path: Path):
    base = wall_ns() - 3_600_000_000_000  # an hour ago
    store = SampleStore(tmp_path, retention_s=1e12, max_records=200)
    store.open("r", {})
    _fill(store, 3000, base=base)  # 300 s at 10 Hz; the ring keeps the last ~200 records
    assert len(store) <= 226 and store.trimmed
    w = store.window(base + 12_340_000_000, base + 57_000_000_000, 0.1)
    assert w.valid, w.reasons
    assert abs(w.energy_j - 50.0 * (57.0 - 12.34)) < 1e-6 and w.sample_count >= 440
    recent = store.window(base + 295_000_000_000, base + 298_000_000_000, 0.1)
    assert recent.valid and abs(recent.energy_j - 150.0) < 1e-6
    store.close()
    none = SampleStore(None, retention_s=1e12, max_records=200)
    none.open("r", {})
    _fill(none, 300, base=base)
    assert "outside_retention" in none.window(base + 1_000_000_000, base + 2_000_000_000, 0.1).reasons
