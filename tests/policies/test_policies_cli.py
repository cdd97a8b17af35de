"""The policy CLI as a user runs it: real ``harness`` processes on the synthetic grid."""

from __future__ import annotations

import json

import pytest
from _engine_helpers import run_harness as harness
from _synthetic_grid import synthetic_records

from harness.core.jsonl import write_jsonl_atomic


def test_evaluate_json_then_report_writes_tables_and_figures(trained_models, synthetic_files, tmp_path):
    r = harness(
        "evaluate", "--dataset", str(synthetic_files["dataset"]), "--models", str(trained_models), "--json", "--no-loro"
    )
    assert r.returncode == 0, r.stderr
    ev = json.loads(r.stdout)
    assert list(ev["in_sample"]) == json.loads((trained_models / "train.json").read_text())["algorithms"]
    assert ev["summary"]["lookup_table"]["in_sample_avg"] > ev["reference_in_sample_avg"]
    assert (trained_models / "evaluation.json").exists()
    r = harness("report", "policies", str(trained_models))
    assert r.returncode == 0, r.stderr
    assert "in-sample reward of each pick" in r.stdout and "doubly_robust" in r.stdout
    for name in ("reward_per_algorithm.png", "throughput_of_picks.png", "energy_band.png"):
        png = trained_models / "figures" / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_recommend_prints_the_sglang_flags(trained_models):
    r = harness("recommend", "--models", str(trained_models), "--algo", "lookup_table", "--batch-size", "16")
    assert r.returncode == 0, r.stderr
    assert "sglang.launch_server" in r.stdout
    assert "--speculative-num-steps 3 --speculative-eagle-topk 2 --speculative-num-draft-tokens 4" in r.stdout
    assert "--cuda-graph-max-bs 16" in r.stdout and "--attention-backend flashinfer" in r.stdout
    r = harness("recommend", "--models", str(trained_models), "--algo", "lookup_table", "--batch-size", "2")
    assert r.returncode == 2 and "no pick at batch size 2" in r.stderr and "fix:" in r.stderr


@pytest.mark.slow
def test_bad_inputs_exit_non_zero_with_a_fix(tmp_path, synthetic_files):
    no_base = tmp_path / "nobase.jsonl"
    write_jsonl_atomic(no_base, [r for r in synthetic_records() if not r["is_baseline"]])
    r = harness("train", "--dataset", str(no_base), "--out", str(tmp_path / "m"), "--algos", "lookup_table")
    assert r.returncode == 3 and "no baseline rows" in r.stderr and "fix:" in r.stderr
    r = harness("train", "--dataset", str(synthetic_files["dataset"]), "--out", str(tmp_path / "m"), "--algos", "sarsa")
    assert r.returncode == 2 and "unknown algorithm 'sarsa'" in r.stderr
    r = harness("train", "--dataset", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "m"))
    assert r.returncode == 3 and "not found" in r.stderr
    r = harness(
        "train", "--dataset", str(synthetic_files["dataset"]), "--out", str(tmp_path / "m"), "--band", "0.98,0.95"
    )
    assert r.returncode == 2 and "--band '0.98,0.95' is not a band" in r.stderr
    r = harness("evaluate", "--models", str(tmp_path / "m"))
    assert r.returncode == 2 and "--dataset" in r.stderr


def test_train_subset_with_options_from_a_run_folder(synthetic_files, tmp_path):
    out = tmp_path / "models"
    r = harness("train", "--dataset", str(synthetic_files["dir"]), "--out", str(out), "--algos", "lookup_table,linucb",
                "--state", "pre", "--throttle", "power_thermal", "--baseline-rule", "per_repeat", "--seed", "7")  # fmt: skip
    assert r.returncode == 0, r.stderr
    meta = json.loads((out / "train.json").read_text())
    assert meta["state"] == "pre" and meta["seed"] == 7 and meta["rows_used"] == 225
    assert (
        meta["reward_options"]["throttle"] == "power_thermal"
        and meta["reward_options"]["baseline_rule"] == "per_repeat"
    )
    assert set(json.loads((out / "picks.json").read_text())) == {"lookup_table", "linucb"}


def test_train_json_records_the_options_as_a_config_file_that_retrains_the_same(
    trained_models, synthetic_files, tmp_path
):
    """``train.json``'s ``options`` are ``harness train --print-config``'s: a ``--config`` file that trains the same."""
    import yaml

    options = json.loads((trained_models / "train.json").read_text())["options"]
    assert (
        options["dataset"] == str(synthetic_files["dataset"])
        and options["seed"] == 0
        and options["state"] == "hindsight"
    )
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(options))
    r = harness("train", "--config", str(config), "--print-config")
    assert r.returncode == 0 and yaml.safe_load(r.stdout) == options, r.stderr


def test_recommend_speaks_the_flags_of_the_sglang_it_is_for(trained_models):
    """Issue 38 C3: recommend printed --cuda-graph-max-bs, which sglang 0.5.23's parser rejects (exit 2)."""
    r = harness("recommend", "--models", str(trained_models), "--algo", "lookup_table", "--batch-size", "16",
                "--sglang-version", "0.5.23")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "--cuda-graph-max-bs-decode 16" in r.stdout and "--cuda-graph-max-bs 16" not in r.stdout
    assert "(sglang 0.5.23, --sglang-version)" in r.stdout
    r = harness("recommend", "--models", str(trained_models), "--algo", "lookup_table", "--batch-size", "16")
    assert r.returncode == 0 and "sglang 0.5.2, the published version" in r.stdout  # none installed in this venv
    r = harness("recommend", "--models", str(trained_models), "--algo", "lookup_table", "--batch-size", "16",
                "--sglang-version", "0.4.0")  # fmt: skip
    assert r.returncode == 2 and "fix:" in r.stderr


def test_a_garbage_params_file_is_named_not_its_artifact(trained_models, tmp_path):
    """Issue 38 A8: a garbage ``params.json`` was reported as the artifact being corrupt."""
    import shutil

    models = tmp_path / "models"
    shutil.copytree(trained_models, models)
    (models / "lookup_table" / "params.json").write_text("{garbage")
    r = harness("recommend", "--models", str(models), "--algo", "lookup_table", "--batch-size", "16")
    assert r.returncode == 3 and "lookup_table/params.json is corrupt" in r.stderr, r.stderr
