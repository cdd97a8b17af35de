"""Steady-state windows: edges, tokens and energy against a hand-computed trace; real twin sweeps choosing which
window feeds energy_joules (the other kept in native rows), checked against the twin device's exact energy."""

from __future__ import annotations

import httpx
import pytest
from _engine_helpers import FAST, read_lines, run_harness
from _telemetry_helpers import mk_sample, ns
from _twin_helpers import twin_gpu

from harness.telemetry.steady import RequestSpan, min_requests, steady_edges, tokens_in, window_energy
from harness.telemetry.windows import compute_window


def test_steady_window_against_a_hand_computed_trace():
    # N = 6 requests at batch size B = 2: first tokens at 0.1, 1.5, 2.0, 3.5, 4.0, 4.5 s (given out of order).
    # The window runs from the 2nd first token (1.5 s) to the (6-2) = 4th first token (3.5 s).
    spans = [
        RequestSpan(first_token_ns=ns(a), finish_ns=ns(z), tokens=k)
        for a, z, k in [(2.0, 5.0, 30), (0.1, 2.5, 24), (1.5, 3.5, 40), (4.5, 7.0, 20), (3.5, 6.0, 25), (4.0, 6.5, 25)]
    ]
    start, end = steady_edges([s.first_token_ns for s in spans], 2)
    assert (start, end) == (ns(1.5), ns(3.5))
    # tokens inside [1.5, 3.5]: 24 x 1.0/2.4 = 10 (0.1-2.5), 40 whole (1.5-3.5), 30 x 1.5/3 = 15 (2-5), 0 for the rest
    assert tokens_in(spans, start, end) == pytest.approx(65.0)
    # the device: 100 W until 2 s, then 200 W; counter = exact integral; 10 Hz samples
    samples = [
        mk_sample(
            i, i * 0.1, (100.0 * i * 0.1 if i <= 20 else 200.0 + 200.0 * (i * 0.1 - 2.0)), 100.0 if i < 20 else 200.0
        )
        for i in range(0, 61)
    ]
    w = compute_window(samples, start, end, 0.1)
    assert w.valid and w.energy_j == pytest.approx(0.5 * 100 + 1.5 * 200)  # 350 J by hand
    e = window_energy("steady", w, tokens_in(spans, start, end), start, end)
    assert e.duration_s == pytest.approx(2.0) and e.avg_power_w == pytest.approx(175.0)
    assert e.joules_per_token == pytest.approx(350.0 / 65.0)


def test_empty_windows_and_the_request_count_they_need():
    assert min_requests(1) == 3 and min_requests(16) == 33
    assert steady_edges([ns(x) for x in range(32)], 16) is None  # N = 2B: empty
    assert steady_edges([ns(x) for x in range(33)], 16) == (ns(15), ns(16))
    assert steady_edges([ns(1.0)] * 5, 2) is None  # all first tokens at one instant: zero length


SWEEP = ["--engine", "twin", "--configs", "0:0:0,3:4:8", "--batch-sizes", "1,4", "--num-prompts", "12"]


def test_sweep_steady_window_feeds_energy_and_matches_the_twins_exact_energy(tmp_path):
    run = tmp_path / "run"
    with twin_gpu() as gpu:
        r = run_harness("sweep", *SWEEP, "--energy-window", "steady", "--twin-gpu", gpu.url, "--out", str(run), *FAST)
        assert r.returncode == 0, r.stdout + r.stderr
        rows = read_lines(run / "rows.jsonl")
        assert len(rows) == 4
        for x in rows:
            st, me = x["window_energy"]["steady"], x["window_energy"]["measured"]
            assert x["error"] is None and x["energy_window"] == "steady" and st["valid"] and me["valid"]
            assert x["energy_joules"] == st["energy_j"] and x["joules_per_token"] == st["joules_per_token"]
            assert x["avg_power_watts"] == pytest.approx(st["energy_j"] / st["duration_s"])
            assert me["start_ns"] <= st["start_ns"] < st["end_ns"] <= me["end_ns"] and me["energy_j"] > st["energy_j"]
            assert st["source"] == "server" and 0 < st["tokens"] < me["tokens"] == x["total_output_tokens"]
            truth = httpx.get(
                gpu.url + "/truth/energy", params={"start_ns": st["start_ns"], "end_ns": st["end_ns"]}, timeout=10
            ).json()
            assert st["energy_j"] == pytest.approx(truth["energy_j"], rel=0.03)
    published = read_lines(run / "dataset.jsonl")
    assert [p["energy_joules"] for p in published] == [x["energy_joules"] for x in rows]


def test_default_measured_window_keeps_the_steady_one_in_native_rows(tmp_path):
    run = tmp_path / "run"
    r = run_harness("sweep", *SWEEP[:5], "1", "--num-prompts", "4", "--out", str(run), *FAST)
    assert r.returncode == 0, r.stdout + r.stderr
    for x in read_lines(run / "rows.jsonl"):
        assert x["energy_window"] == "measured" and x["energy_joules"] == x["window_energy"]["measured"]["energy_j"]
        assert x["window_energy"]["steady"]["energy_j"] > 0
    bad = run_harness("sweep", *SWEEP[:5], "1,16", "--energy-window", "steady", "--out", str(tmp_path / "x"), *FAST)
    assert bad.returncode == 2 and "--num-prompts 33" in bad.stdout + bad.stderr
