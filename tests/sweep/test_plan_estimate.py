"""A plan before any GPU time (issue 48 item 4): ``harness sweep --plan`` prints cells, launches, GPU time per phase,
wall time on N GPUs and the models' disk, and exits without a folder; the estimate's closed form tracks the twin's
own simulation; the published grid is the yardstick in the same accounting."""

from __future__ import annotations

import pytest
from _engine_helpers import run_harness

from harness.grid import SpecConfig
from harness.runs.gpu_time import PHASES
from harness.runs.options import SweepOptions
from harness.sweep.plan_estimate import estimate_plan, wave_seconds
from harness.twin.model import simulate_cell
from harness.twin.profile import load_profile
from harness.world.bench import load_prompts


def test_the_closed_form_wave_tracks_the_twin_simulation() -> None:
    profile = load_profile("h100-sxm")
    prompts = list(load_prompts())
    for cfg, bs in ((SpecConfig(0, 0, 0), 1), (SpecConfig(3, 1, 4), 4), (SpecConfig(5, 4, 16), 16)):
        sim = simulate_cell(profile, cfg, bs, prompts, max_new_tokens=512, num_requests=bs, seed=0, nominal_launch=True)
        closed = wave_seconds(profile, cfg, bs, 512, 60)
        assert closed == pytest.approx(sim.wall_s, rel=0.2), (cfg, bs, closed, sim.wall_s)


def test_the_published_grid_is_the_yardstick_and_config_launches_cost_less() -> None:
    profile = load_profile("h100-sxm")
    published = SweepOptions(repeats=3)  # the 19 actions x bs 1,4,8,16 x 3 repeats, a launch per cell
    est = estimate_plan(published, profile=profile)
    assert est.cells == 228 and est.launches == 228
    assert est.total_s == pytest.approx(est.published_grid_s) and est.record()["fraction_of_published_grid"] == 1.0
    assert set(est.seconds) == set(PHASES) and est.seconds["launch"] > est.seconds["measured"] > 0
    parts = est.record()["launch_phases"]
    assert set(parts) == {"imports", "weights", "cuda_graphs"}
    assert sum(parts.values()) == pytest.approx(est.seconds["launch"], abs=0.5)  # the launch by its own phases
    per_config = estimate_plan(published.model_copy(update={"launch_per": "config"}), profile=profile)
    assert per_config.launches == 57 and per_config.seconds["measured"] == pytest.approx(est.seconds["measured"])
    assert per_config.total_s < 0.6 * est.total_s  # launches are most of the published protocol's GPU time
    eight = estimate_plan(published.model_copy(update={"executor": "ray", "twin_gpus": 8}), gpus=8, profile=profile)
    assert eight.record()["wall_s"] == pytest.approx(eight.total_s / 8, rel=1e-3)


@pytest.mark.integration
def test_sweep_plan_prints_the_plan_and_writes_nothing(tmp_path) -> None:
    out = tmp_path / "run"
    r = run_harness("sweep", "--twin-profile", "h100-sxm", "--repeats", "3", "--plan", "--out", str(out))
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert "plan: 228 cells, 228 launches; twin model h100-sxm" in text and "measured share" in text, text
    assert "100.0 % of it" in text and "models: " in text and "GB free under" in text
    assert "plan: launches = imports " in text and "cuda graphs" in text
    assert not out.exists()
    bad = run_harness("sweep", "--plan", "--repeats", "0")
    assert bad.returncode == 2 and "--repeats" in bad.stderr and "Traceback" not in bad.stderr
