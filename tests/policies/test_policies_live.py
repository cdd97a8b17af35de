"""Live A/B on the twin: real twin GPU, sampler and engine processes started by ``harness evaluate --live``."""

from __future__ import annotations

import json

import pytest
from _engine_helpers import run_harness as harness

from harness.grid import ACTIONS


@pytest.mark.slow
def test_live_ab_on_the_twin(synthetic_files, tmp_path):
    models = tmp_path / "models"
    r = harness(
        "train", "--dataset", str(synthetic_files["dataset"]), "--out", str(models), "--algos", "lookup_table,gbt"
    )
    assert r.returncode == 0, r.stderr
    r = harness("evaluate", "--live", "--engine", "twin", "--models", str(models), "--trials", "2", "--batch-sizes", "1",
                "--output-tokens", "48", "--time-scale", "50", "--json", timeout=400)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "[1/" in r.stderr and "trial" in r.stderr  # one progress line per cell on stderr
    live = json.loads(r.stdout)
    assert live == json.loads((models / "live.json").read_text())
    picks = json.loads((models / "picks.json").read_text())
    arms = {(0, 0, 0), (3, 4, 8), *(tuple(p["1"]) for p in picks.values())}
    cells = live["cells"]
    assert len(cells) == 2 * len(arms) and {tuple(c["config"]) for c in cells} == arms
    assert [c["trial"] for c in cells] != sorted(c["trial"] for c in cells) or len(arms) == 1  # randomised order
    for c in cells:
        assert c["error"] is None and c["speed_tok_s"] > 0 and c["avg_power_watts"] > 0 and 0 <= c["reward"] <= 1
        if c["config"] == [0, 0, 0]:
            assert c["reward"] == 0.0  # scored against its own trial's baseline: throughput 0 by construction
    assert set(live["per_algo"]) == {"baseline", "reference", "lookup_table", "gbt"}
    ref = live["per_algo"]["reference"]
    assert ref["delta_reference"] == 0.0 and ref["avg_ci"][0] <= ref["avg_reward"] <= ref["avg_ci"][1]
    assert "twin" in live["hardware"] and all(
        tuple(a["config"]) in {x.as_tuple() for x in ACTIONS} for a in live["per_bs"]
    )
    r = harness("report", "policies", str(models))
    assert r.returncode == 0 and "live A/B on twin" in r.stdout
    assert (models / "figures" / "live_reward.png").read_bytes()[:4] == b"\x89PNG"
