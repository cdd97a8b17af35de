"""The band against the row's enforced cap: reward, utilization, in-band flags and the memory term of the state;
published-layout rows (no cap) keep the published 80 W and mem/8192."""

from __future__ import annotations

import json

import pytest
from _engine_helpers import run_harness as harness
from _synthetic_grid import synthetic_records

from harness.core.errors import DataError
from harness.core.jsonl import write_json_atomic, write_jsonl_atomic
from harness.runs.rows import from_native, to_published
from policies.contract import RewardOptions, band_score, dataset_from_rows, load_dataset, row_reward, throughput_score


def _row(**kw):
    base = dict(hardware="t", index=0, repeat=0, batch_size=1, steps=3, topk=4, num_draft_tokens=8, is_baseline=False,
                speed_tok_s=150.0, avg_power_watts=57.6, gpu_temp_c=60.0, gpu_throttling=False)  # fmt: skip
    return from_native({**base, **kw})


def test_reward_uses_the_rows_enforced_cap():
    capped = _row(power_limit_w=60.0)  # 57.6 W of a 60 W cap: u = 0.96, inside the band
    uncapped = _row()  # a published-layout row records no cap: 57.6 / 80 = 0.72
    tp = throughput_score(150.0, 100.0) ** 0.5
    assert row_reward(capped, 100.0) == pytest.approx(1.0 * tp)
    assert row_reward(uncapped, 100.0) == pytest.approx(band_score(0.72) ** 0.5 * tp)
    assert row_reward(capped, 100.0, RewardOptions(limit_source="fixed")) == row_reward(uncapped, 100.0)
    d = dataset_from_rows(
        [
            _row(is_baseline=True, steps=0, topk=0, num_draft_tokens=0, speed_tok_s=100.0, power_limit_w=60.0),
            capped,
            _row(index=2, power_limit_w=80.0),
        ]
    )
    assert list(d.utilization) == pytest.approx([57.6 / 60, 0.96, 0.72])


def test_memory_term_published_or_total(tmp_path):
    recs = synthetic_records(seed=0)
    write_jsonl_atomic(tmp_path / "rows.jsonl", recs)
    pub = load_dataset(tmp_path / "rows.jsonl")
    assert pub.reward_options.memory_term == "published"
    mem = next(r.gpu_mem_used_mb for r in pub.rows)
    assert pub.states[0][2] == pytest.approx(mem / 8192)
    with pytest.raises(DataError, match="--memory-total-mb"):
        load_dataset(tmp_path / "rows.jsonl", reward=RewardOptions(memory_term="total"))
    write_json_atomic(tmp_path / "manifest.json", {"run_id": "x", "memory_total_mb": 143771})
    tot = load_dataset(tmp_path / "rows.jsonl", reward=RewardOptions(memory_term="total"))
    assert tot.reward_options.memory_total_mb == 143771 and tot.states[0][2] == pytest.approx(mem / 143771)


def test_train_records_the_cap_source_and_memory_term_in_its_artifacts(tmp_path):
    recs = synthetic_records(seed=0, power_limit_w=60.0)
    write_jsonl_atomic(tmp_path / "rows.jsonl", recs)
    write_jsonl_atomic(tmp_path / "dataset.jsonl", [to_published(from_native(r)) for r in recs])
    r = harness(
        "train",
        "--dataset",
        str(tmp_path / "rows.jsonl"),
        "--out",
        str(tmp_path / "m"),
        "--algos",
        "lookup_table",
        "--memory-term",
        "total",
        "--memory-total-mb",
        "16384",
    )
    assert r.returncode == 0, r.stderr + r.stdout
    meta = json.loads((tmp_path / "m" / "train.json").read_text())["reward_options"]
    assert meta["limit_source"] == "row" and meta["memory_term"] == "total" and meta["memory_total_mb"] == 16384
    bad = harness(
        "train", "--dataset", str(tmp_path / "dataset.jsonl"), "--out", str(tmp_path / "m2"), "--memory-term", "total"
    )
    assert bad.returncode == 3 and "--memory-total-mb" in bad.stderr + bad.stdout


def _two_cap_rows(tmp_path):
    """The same synthetic grid at caps 60 and 80 W, labelled as ``harness sweep --power-caps 60,80`` labels rows."""
    out = []
    for k, (label, watts) in enumerate((("60", 60.0), ("80", 80.0))):
        recs = synthetic_records(seed=0, power_limit_w=watts)
        out += [
            {
                **r,
                "index": r["index"] + k * len(recs),
                "extras": {**(r.get("extras") or {}), "power_cap": {"label": label}},
            }
            for r in recs
        ]
    write_jsonl_atomic(tmp_path / "rows.jsonl", out)
    return tmp_path / "rows.jsonl", len(out) // 2


def test_policies_never_pool_power_caps(tmp_path):
    """Baselines are per batch size and the state has no cap: rows of several caps must be trained one cap at a time."""
    path, per_cap = _two_cap_rows(tmp_path)
    with pytest.raises(DataError, match="2 power caps") as info:
        load_dataset(path)
    assert "--power-cap 60" in info.value.fix
    d80 = load_dataset(path, power_cap="80")
    assert len(d80.rows) + d80.skipped_errors == per_cap and {r.power_limit_w for r in d80.rows} == {80.0}
    with pytest.raises(DataError, match="no rows at power cap '70'"):
        load_dataset(path, power_cap="70")
    r = harness(
        "train", "--dataset", str(path), "--out", str(tmp_path / "m"), "--algos", "lookup_table", "--power-cap", "60"
    )
    assert r.returncode == 0, r.stderr + r.stdout
    assert json.loads((tmp_path / "m" / "train.json").read_text())["selection"] == {
        "invalid_windows": "exclude",
        "power_cap": "60",
        "sm_clock": None,
    }
    ev = harness("evaluate", "--models", str(tmp_path / "m"), "--dataset", str(path), "--no-loro", "--json")
    assert ev.returncode == 0, ev.stderr + ev.stdout  # evaluate scores the cap pass train used
    pooled = harness("train", "--dataset", str(path), "--out", str(tmp_path / "m2"), "--algos", "lookup_table")
    assert pooled.returncode == 3 and "--power-cap" in pooled.stderr


@pytest.mark.parametrize(("total", "term"), [(81559, "total"), (8188, "published"), (None, "published")])
def test_memory_term_auto_normalises_a_datacenter_board_by_its_own_total(tmp_path, total, term):
    """``auto`` (train's default): an 80 GB board's memory feature reads mem/81559, not 6-10; the published 8 GB
    laptop (8188 MiB) and a file with no manifest keep mem/8192 exactly; train.json records what was resolved."""
    recs = synthetic_records(seed=0)
    write_jsonl_atomic(tmp_path / "rows.jsonl", recs)
    if total is not None:
        write_json_atomic(tmp_path / "manifest.json", {"run_id": "x", "memory_total_mb": total})
    d = load_dataset(tmp_path / "rows.jsonl", reward=RewardOptions(memory_term="auto"))
    mem = next(r.gpu_mem_used_mb for r in d.rows)
    assert d.reward_options.memory_term == term
    assert d.states[0][2] == pytest.approx(mem / (total if term == "total" else 8192))
    r = harness(
        "train", "--dataset", str(tmp_path / "rows.jsonl"), "--out", str(tmp_path / "m"), "--algos", "lookup_table"
    )
    assert r.returncode == 0, r.stderr + r.stdout
    meta = json.loads((tmp_path / "m" / "train.json").read_text())["reward_options"]
    assert meta["memory_term"] == term and (meta["memory_total_mb"] == total if term == "total" else True)
