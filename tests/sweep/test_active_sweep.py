"""``harness sweep --strategy active`` on real twin worlds: interrupted and resumed it continues its plan, stays in its
budget and writes recipe.json and a fitted profile; the decision rule repeats near ties; bad budgets are refused."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import Counter

import pytest
from _engine_helpers import ROOT, harness_cmd, read_lines, run_harness

from harness.grid import SpecConfig
from harness.runs.options import SweepOptions
from harness.runs.rows import PUBLISHED_KEYS
from harness.sweep.active.calibset import calibration_cells
from harness.sweep.active.cost import CellCost, CostModel, fit_line
from harness.sweep.active.decide import next_actions, picks
from harness.sweep.active.estimate import CellEstimate, Prediction
from harness.sweep.active.options import budget_of
from harness.twin.profile import TwinProfile

GRID = ["--configs", "0:0:0,3:4:8,3:2:4,1:4:2,3:1:4,5:4:16", "--batch-sizes", "1,16", "--repeats", "3"]
TWIN = [
    "--time-scale",
    "50",
    "--output-tokens",
    "128",
    "--settle",
    "0",
    "--plain",
    "--engine-arg=--twin-launch-scale",
    "--engine-arg=0.2",
]


@pytest.mark.slow
def test_interrupted_active_sweep_resumes_its_plan_within_budget(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        harness_cmd(
            "sweep", "--engine", "twin", "--strategy", "active", "--budget", "0.35", *GRID, "--out", str(run), *TWIN
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and (
            not (run / "rows.jsonl").exists() or len(read_lines(run / "rows.jsonl")) < 3
        ):
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    first = {r["cell_id"]: r["recorded_wall_ns"] for r in read_lines(run / "rows.jsonl")}
    assert 3 <= len(first) < 8 and not (run / "recipe.json").exists()

    r = run_harness("sweep", "--resume", str(run), "--plain", timeout=400)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = read_lines(run / "rows.jsonl")
    counts = Counter(row["cell_id"] for row in rows)
    assert set(counts.values()) == {1}, counts  # nothing measured twice
    by_id = {x["cell_id"]: x for x in rows}
    assert all(by_id[c]["recorded_wall_ns"] == ns for c, ns in first.items())  # the first session's rows are kept
    manifest = json.loads((run / "manifest.json").read_text())
    active = manifest["active"]
    assert manifest["status"] == "complete" and len(manifest["sessions"]) == 2
    calib = {
        f"r0-bs{bs}-s{c.steps}k{c.topk}d{c.draft_tokens}"
        for bs, c in calibration_cells([SpecConfig(*t) for t in manifest["options"]["configs"]], [1, 16])
    }
    assert set(active["calibration_cells"]) == calib and calib <= set(counts)
    # every measured cell is an ordinary planned row in the published layout; repeats are the cell's repeat index
    assert all(list(rec) == list(PUBLISHED_KEYS) for rec in read_lines(run / "dataset.jsonl"))
    assert len(rows) < manifest["cells_planned"] == 36
    for c in {(row["batch_size"], row["steps"], row["topk"], row["num_draft_tokens"]) for row in rows}:
        reps = sorted(
            row["repeat"]
            for row in rows
            if (row["batch_size"], row["steps"], row["topk"], row["num_draft_tokens"]) == c
        )
        assert reps == list(range(len(reps)))
    # budget: GPU-seconds spent (launch + measure) within the fraction of the predicted full grid
    spent = active["gpu_seconds"]
    assert spent["total"] == pytest.approx(spent["launch"] + spent["measure"], abs=0.05) and spent["launch"] > 0
    assert 0.03 <= active["budget_headroom"] <= 0.15  # the cost model's error, within its bounds
    assert 0 < active["flag_model"]["rows"] <= len(rows) and 0.5 <= active["flag_model"]["ceiling"] <= 1.0
    assert active["budget_s"] == pytest.approx(
        0.35 * active["budget_from_full_grid_predicted_s"] / (1 + active["budget_headroom"]), rel=1e-3
    )
    assert spent["total"] <= active["budget_s"]
    assert active["fraction_of_full_grid"] == pytest.approx(spent["total"] / active["full_grid_predicted_s"], abs=1e-3)
    # the one yardstick: everything spent (manifest.gpu_time.total) against the published protocol's full grid
    assert active["published_grid_gpu_s"] == manifest["plan"]["published_grid_gpu_s"] > 0
    assert active["gpu_time_total_s"] >= spent["total"] * 0.5 and active["fraction_of_published_grid"] == pytest.approx(
        active["gpu_time_total_s"] / active["published_grid_gpu_s"], abs=1e-3
    )
    assert "% of the published protocol's grid" in r.stderr + r.stdout
    assert active["stop_reason"] in ("settled", "budget") and active["rounds"]
    assert "GPU-seconds" in r.stderr + r.stdout and "of a predicted full grid" in r.stderr + r.stdout
    # recipe.json schema
    recipe = json.loads((run / "recipe.json").read_text())
    assert set(recipe) == {"1", "16"}
    planned = {tuple(c) for c in manifest["options"]["configs"]}
    for entry in recipe.values():
        assert tuple(entry["config"]) in planned and tuple(entry["config"]) != (0, 0, 0)
        assert 0.0 <= entry["confidence"] <= 1.0
        assert set(entry["predicted"]) == {"reward", "speed_tok_s", "utilization", "joules_per_token", "accept_length"}
        assert entry["measured"]["rows"] >= 1  # the recipe rests on measured rows
        assert entry["settled"] == (entry["open_rivals"] == [])
    prof = TwinProfile.model_validate_json((run / "twin_profile.json").read_text())
    assert prof.name.startswith("fitted-") and prof.calibration["rows"]
    # the unmeasured cells are the strategy's choice: validate warns (active_subset), it does not fail the run
    v = run_harness("dataset", "validate", str(run))
    assert v.returncode == 0 and "active_subset" in v.stdout + v.stderr, v.stdout + v.stderr
    st = run_harness("status", str(run))
    assert st.returncode == 0 and "planned measured (--strategy active" in st.stdout, st.stdout + st.stderr


def _cell(bs: int, cfg: tuple[int, int, int], reward: float, sigma: float, rows: int) -> CellEstimate:
    pred = Prediction(100.0, 0.9, 0.5, 2.0, 0.0, -0.1, True, 30.0, 10.0)
    rs = tuple([reward] * rows)
    return CellEstimate(bs, cfg, pred, reward, rs, reward, sigma, CellCost(30.0, 10.0))


def test_near_tie_gets_repeats_clear_winner_settles():
    tie = [
        _cell(1, (0, 0, 0), 0.0, 0.003, 1),
        _cell(1, (3, 4, 8), 0.530, 0.01, 1),
        _cell(1, (5, 4, 16), 0.526, 0.01, 1),
    ]
    actions = next_actions(tie, repeats=3)  # equal rows: the leader (the recipe's own rows) is repeated first
    assert [(a.config, a.repeat) for a in actions] == [((3, 4, 8), 1)] and "near tie" in actions[0].reason
    # after the leader's repeat the rival has fewer rows: it is repeated next
    tie[1] = _cell(1, (3, 4, 8), 0.530, 0.007, 2)
    assert [(a.config, a.repeat) for a in next_actions(tie, repeats=3)] == [((5, 4, 16), 1)]
    # every repeat used: a tie is settled as a tie
    assert next_actions([tie[0], _cell(1, (3, 4, 8), 0.530, 0.006, 3), _cell(1, (5, 4, 16), 0.526, 0.006, 3)], 3) == []
    clear = [tie[0], _cell(1, (3, 4, 8), 0.530, 0.005, 1), _cell(1, (5, 4, 16), 0.40, 0.005, 1)]
    assert next_actions(clear, repeats=3) == [] and picks(clear)[1].confidence > 0.99


def test_unmeasured_leader_first_then_open_rivals():
    cells = [
        _cell(16, (0, 0, 0), 0.0, 0.003, 1),
        _cell(16, (3, 2, 4), 0.40, 0.02, 0),
        _cell(16, (1, 4, 4), 0.39, 0.02, 0),
        _cell(16, (5, 4, 8), 0.10, 0.02, 0),
    ]
    actions = next_actions(cells, repeats=2)
    assert [a.config for a in actions] == [(3, 2, 4), (1, 4, 4)] and all(a.repeat == 0 for a in actions)


def test_cost_line_fit():
    assert fit_line([10.0, 20.0, 30.0], [15.0, 25.0, 35.0]).a == pytest.approx(5.0)
    one = fit_line([10.0], [40.0])
    assert one.a == 0.0 and one(20.0) == pytest.approx(80.0)


def test_budget_fraction_keeps_headroom_for_the_cost_model_error():
    """``--budget F`` is F of the predicted full grid less the cost model's error (3-15 %): the fraction must hold
    against the real grid, which the prediction misses by about that much; ``--budget-s`` is taken as given."""
    exact = CostModel.fit([(10.0, 5.0 * k, CellCost(20.0, 10.0 * k)) for k in (1, 2, 3, 4)])
    assert exact.rel_error == pytest.approx(0.0, abs=1e-9)
    noisy = CostModel.fit(
        [(10.0, 5.0 * k, CellCost(20.0, 10.0 * k * f)) for k, f in ((1, 1.2), (2, 0.8), (3, 1.1), (4, 0.9))]
    )
    assert 0.03 < noisy.rel_error < 0.2
    fraction, seconds = SweepOptions(strategy="active", budget=0.2), SweepOptions(strategy="active", budget_s=500.0)
    assert budget_of(fraction, 1000.0, exact.rel_error) == pytest.approx((200.0 / 1.03, 0.03))  # never less than 3 %
    assert budget_of(fraction, 1000.0, 0.08) == pytest.approx((200.0 / 1.08, 0.08))
    assert budget_of(fraction, 1000.0, 0.9) == pytest.approx((200.0 / 1.15, 0.15))  # never more than 15 %
    assert budget_of(seconds, 1000.0, 0.08) == (500.0, None)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--budget", "0.2"], "only apply to --strategy active"),
        (["--strategy", "active", "--budget", "1.5"], "--budget"),
        (["--strategy", "active", "--budget", "0.2", "--budget-s", "100"], "pass one of them"),
        (["--strategy", "active", "--launch-per", "config"], "--launch-per config"),
        (["--strategy", "active", "--configs", "3:4:8,3:2:4"], "baseline"),
        (["--strategy", "sometimes"], "unknown --strategy"),
    ],
)
def test_bad_active_options_are_refused_before_anything_is_written(tmp_path, args, needle):
    run = tmp_path / "run"
    r = run_harness("sweep", "--engine", "twin", *args, "--out", str(run), "--plain")
    assert r.returncode != 0 and needle in r.stderr + r.stdout, r.stderr + r.stdout
    assert not (run / "manifest.json").exists()


def test_throttle_flag_coin_flip_widens_a_measured_cell():
    """Near the cap the published flag (x0.3) is a coin flip: one unflagged row where the flag model expects the flag
    is not trusted; a cell well below the cap keeps only the repeat noise."""
    from harness.sweep.active.estimate import RowReward, flag_sd
    from harness.sweep.active.throttle_flags import FlagModel

    quiet = FlagModel.fit([(-0.1, 1.0, False), (-0.08, 1.0, False), (0.3, 1.0, True)], util_err=0.01)  # uncapped GPU
    assert quiet.chance(-0.1, 1.0) < 0.01 and quiet.chance(0.3, 1.0) > 0.9 and quiet.chance(0.3, 1.0, fits=False) == 0.0
    assert quiet.chance(0.3, 0.5) < 0.6  # capped half of the last sampler period: flagged about half the time
    one_unflagged = [RowReward(0.42, 0.42, False)]
    assert flag_sd(one_unflagged, quiet.chance(0.01, 1.0)) > 0.1
    assert flag_sd(one_unflagged, quiet.chance(-0.1, 1.0)) < 0.01


def test_capped_share_does_not_jump_at_the_cap():
    """A cell the model keeps just below the cap gets the mean share of the capped cells of its batch size, not 1
    (nor the 0 of a model that never caps it): the chance of the flag does not fall as the demand rises past the cap."""
    from harness.sweep.active.throttle_flags import FlagModel, capped_share, share_below_cap

    below = share_below_cap([0.6, 0.8])
    assert below == pytest.approx(0.7) and share_below_cap([]) == 1.0
    model = FlagModel(ceiling=1.0, offset=0.0, width=0.01, rows=0)
    just_below = model.chance(-0.001, capped_share(0.0, -0.001, below))
    just_above = model.chance(0.001, capped_share(0.7, 0.001, below))
    assert just_below < just_above < just_below + 0.1


def test_flag_model_learns_a_gpu_whose_flags_ignore_the_model_margin():
    """Every config at the cap (a 65 W board): flags fall about half the time whatever the model's margin says, and
    the learned chance follows the rows instead of the model's binary answer (capped or not)."""
    from harness.sweep.active.throttle_flags import FlagModel

    margins = [-0.02, -0.01, -0.002, 0.004, 0.014, 0.018, 0.04]
    rows = [(m, 1.0, flagged) for m in margins for flagged in (True, False)]
    learned = FlagModel.fit(rows, util_err=0.01)
    for m in margins:
        assert 0.3 < learned.chance(m, 1.0) < 0.75, (m, learned)
    sharp = FlagModel.fit([(m, 1.0, m > 0) for m in margins for _ in range(2)], util_err=0.01)
    assert sharp.chance(-0.02, 1.0) < 0.1 and sharp.chance(0.04, 1.0) > 0.85


def test_weak_draft_head_opens_the_low_step_corner():
    """A fitted draft head that accepts less (or steps slower) than the start profile's puts the fewest-step config
    of every batch size that has none measured on the list, ahead of the open rivals; a draft like the start's
    does not, and a measured fewest-step config closes the corner."""
    from harness.sweep.active.corner import low_step_corner
    from harness.twin.profile import load_profile

    start = load_profile()
    weak = start.model_copy(deep=True)
    weak.perf.accept_first = 0.42
    slow = start.model_copy(deep=True)
    slow.perf.draft_step_ms = 1.5
    cells = [
        _cell(1, (0, 0, 0), 0.0, 0.003, 1),
        _cell(1, (3, 4, 8), 0.35, 0.01, 1),
        _cell(1, (1, 4, 4), 0.30, 0.01, 0),
        _cell(1, (1, 4, 2), 0.20, 0.01, 0),
        _cell(1, (3, 2, 4), 0.34, 0.01, 0),
        _cell(16, (0, 0, 0), 0.0, 0.003, 1),
        _cell(16, (1, 4, 2), 0.15, 0.01, 1),
        _cell(16, (1, 4, 4), 0.18, 0.01, 0),
    ]
    assert low_step_corner(start, start, cells).cells == ()
    corner = low_step_corner(weak, start, cells)
    assert [(c.batch_size, c.config) for c in corner.cells] == [(1, (1, 4, 4))]  # bs 16 has (1,4,2) measured
    assert "acceptance 0.42" in corner.reason
    assert [(c.batch_size, c.config) for c in low_step_corner(slow, start, cells).cells] == [(1, (1, 4, 4))]
    assert "draft step 1.50 ms" in low_step_corner(slow, start, cells).reason
    # without the corner the loop would only check the open rival (3,2,4) and the bs-16 leader
    plain = next_actions(cells, repeats=2)
    assert (1, (1, 4, 4)) not in {(a.batch_size, a.config) for a in plain}
    actions = next_actions(cells, repeats=2, corner=corner.cells, corner_reason=corner.reason)
    assert [(a.batch_size, a.config) for a in actions][:2] == [(16, (1, 4, 4)), (1, (1, 4, 4))]
    assert "low-step corner" in actions[1].reason
    cells[2] = _cell(1, (1, 4, 4), 0.30, 0.01, 1)
    assert low_step_corner(weak, start, cells).cells == ()
