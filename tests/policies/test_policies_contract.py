"""State, reward and dataset contract of the policies (synthetic rows; published calibration figures)."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pytest
from _synthetic_grid import synthetic_records, synthetic_rows

from harness.core.errors import DataError
from harness.core.jsonl import write_jsonl_atomic
from harness.grid import ACTIONS, SpecConfig
from harness.runs.rows import from_native
from policies.contract import (
    RewardOptions,
    band_score,
    dataset_from_rows,
    load_dataset,
    row_reward,
    state_vector,
    thermal_multiplier,
    throughput_score,
)  # fmt: skip


def _row(**kw):
    base = dict(hardware="t", index=0, repeat=0, batch_size=1, steps=3, topk=4, num_draft_tokens=8, is_baseline=False,
                speed_tok_s=150.0, avg_power_watts=76.0, gpu_temp_c=60.0, gpu_throttling=False)  # fmt: skip
    return from_native({**base, **kw})


def test_action_space_is_the_grid_one():
    from harness import grid
    from policies import contract

    assert contract.ACTIONS is grid.ACTIONS and len(contract.ACTIONS) == 19
    assert ACTIONS[10] == SpecConfig(3, 4, 8) and ACTIONS[7] == SpecConfig(3, 2, 4)


def test_band_throughput_and_multiplier_pieces():
    assert band_score(0.96) == 1.0 and band_score(0.95) == 1.0 and band_score(0.98) == 1.0
    assert band_score(0.5) == pytest.approx(0.5 / 0.95)
    assert band_score(1.03) == pytest.approx(0.5) and band_score(1.2) == 0.0
    assert (
        throughput_score(100, 100) == 0.0 and throughput_score(300, 100) == 1.0 and throughput_score(150, 100) == 0.25
    )
    assert (
        thermal_multiplier(81, False) == 0.5
        and thermal_multiplier(76, False) == 0.8
        and thermal_multiplier(75, False) == 1.0
    )
    assert thermal_multiplier(81, True) == pytest.approx(0.15) and thermal_multiplier(None, True) == 0.3


@pytest.mark.parametrize(
    "bs, config, util, expected",
    [(1, (5, 4, 16), 0.921, 0.5173), (1, (5, 4, 8), 0.888, 0.4483), (16, (3, 2, 4), 0.952, 0.3855),
     (16, (1, 4, 2), 0.909, 0.2971), (16, (5, 2, 8), 0.972, 0.2555)],
)  # fmt: skip
def test_reward_reproduces_published_live_calibration(bs, config, util, expected):
    cal = json.loads(resources.files("harness").joinpath("data/calibration.json").read_text())
    rows = {(r["batch_size"], tuple(r["config"])): r for r in cal["rows"]}
    base = rows[(bs, (0, 0, 0))]["speed_tok_s"]
    row = _row(batch_size=bs, steps=config[0], topk=config[1], num_draft_tokens=config[2],
               speed_tok_s=rows[(bs, config)]["speed_tok_s"], avg_power_watts=util * 80.0)  # fmt: skip
    assert row_reward(row, base) == pytest.approx(expected, abs=6e-4)


def test_reward_options_change_the_score():
    row = _row(avg_power_watts=70.0, gpu_throttling=True, clock_event_reasons=1, gpu_throttling_power_thermal=False)
    published = row_reward(row, 100.0)
    assert row_reward(row, 100.0, RewardOptions(throttle="power_thermal")) == pytest.approx(published / 0.3)
    assert row_reward(row, 100.0, RewardOptions(power_limit_w=73.0)) > published
    assert row_reward(row, 100.0, RewardOptions(energy_weight=1.0)) == pytest.approx(0.3 * 70 / 80 / 0.95)
    assert row_reward(_row(error="boom", speed_tok_s=None), 100.0) == 0.0
    with pytest.raises(ValueError):
        RewardOptions(band=(0.98, 0.95))


def test_power_thermal_flag_from_raw_mask_and_fallback():
    idle_only = _row(gpu_throttling=True, clock_event_reasons=0x1)
    capped = _row(gpu_throttling=True, clock_event_reasons=0x4)
    published_only = _row(gpu_throttling=True)
    opts = RewardOptions(throttle="power_thermal")
    assert row_reward(idle_only, 100.0, opts) > row_reward(capped, 100.0, opts)
    assert row_reward(published_only, 100.0, opts) == row_reward(
        published_only, 100.0
    )  # no mask: published flag stands in
    d = dataset_from_rows(
        [
            _row(is_baseline=True, steps=0, topk=0, num_draft_tokens=0, speed_tok_s=100.0, clock_event_reasons=0),
            published_only,
        ],
        reward=opts,
    )
    assert d.throttle_fallbacks == 1


def test_state_forms():
    r = _row(
        batch_size=4,
        gpu_temp_c_before=None,
        gpu_mem_used_mb=4096,
        gpu_util_pct=None,
        pre_gpu_temp_c=50,
        pre_gpu_util_pct=10,
    )
    assert state_vector(r, "hindsight") == [0.5, 0.4, 0.5, 0.0]
    assert state_vector(r, "pre") == [0.5, 0.5, 0.0, 0.1]


def test_dataset_skips_errors_and_uses_last_baseline():
    rows = synthetic_rows()
    d = dataset_from_rows(rows)
    assert len(rows) == 228 and len(d) == 225 and d.skipped_errors == 3
    assert not d.legal_mask(16)[18] and d.legal_mask(16).sum() == 18 and d.legal_mask(1).sum() == 19
    last_base = [r for r in rows if r.is_baseline and r.batch_size == 8][-1].speed_tok_s
    i = next(i for i, r in enumerate(d.rows) if r.batch_size == 8 and r.repeat == 0 and not r.is_baseline)
    assert d.rewards[i] == pytest.approx(row_reward(d.rows[i], last_base))
    per = dataset_from_rows(rows, reward=RewardOptions(baseline_rule="per_repeat"))
    base0 = next(r for r in rows if r.is_baseline and r.batch_size == 8 and r.repeat == 0).speed_tok_s
    assert per.rewards[i] == pytest.approx(row_reward(d.rows[i], base0)) and per.rewards[i] != d.rewards[i]
    assert np.allclose(d.pscores()[d.batch_sizes == 16], 1 / 18) and np.allclose(
        d.pscores()[d.batch_sizes == 1], 1 / 19
    )


def test_pilot_rows_are_skipped():
    recs = synthetic_records()
    pilot = {**recs[10], "index": 228, "repeat": None, "is_baseline": False, "error": "agentic_pilot_trace: regex-log",
             "speed_source": "terminalbench_pilot", "step_time_s": None}  # fmt: skip
    d = dataset_from_rows([from_native(r) for r in [*recs, pilot]])
    assert len(d) == 225 and d.skipped_errors == 4


def test_bad_datasets_fail_clearly(tmp_path):
    recs = synthetic_records()
    no_base = [r for r in recs if not r["is_baseline"]]
    with pytest.raises(DataError, match="no baseline rows"):
        dataset_from_rows([from_native(r) for r in no_base])
    one_bs_missing = [r for r in recs if not (r["is_baseline"] and r["batch_size"] == 4)]
    with pytest.raises(DataError, match="no baseline row for batch size 4"):
        dataset_from_rows([from_native(r) for r in one_bs_missing])
    with pytest.raises(DataError, match="unknown config"):
        dataset_from_rows(
            [from_native(r) for r in [*recs, {**recs[5], "index": 999, "steps": 2, "topk": 2, "num_draft_tokens": 2}]]
        )
    with pytest.raises(DataError, match="unknown config"):
        dataset_from_rows(
            [from_native(r) for r in [*recs, {**recs[5], "index": 999, "steps": 3, "topk": 4, "num_draft_tokens": 16}]]
        )
    bad = tmp_path / "bad.jsonl"
    write_jsonl_atomic(bad, [{"batch_size": 1, "speed": 3.0}])
    with pytest.raises(DataError):
        load_dataset(bad)
    with pytest.raises(DataError, match="--state pre"):
        dataset_from_rows(
            [from_native({k: v for k, v in r.items() if not k.startswith("pre_")}) for r in recs], state="pre"
        )
