"""Issue 45 item 5: ``harness train`` records the sha256 of every artifact file; ``recommend``, ``evaluate`` and
``serve --models`` check each before loading it (an artifact can be a pickle) and refuse a changed file or one with
no recorded hash, unless ``--trust-artifacts``."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from _dataset_helpers import grid_rows, write_native

from harness.cli import main
from harness.grid import SpecConfig

BS = (1, 16)
CONFIGS = (SpecConfig(0, 0, 0), SpecConfig(3, 4, 8), SpecConfig(3, 2, 4), SpecConfig(1, 1, 2))


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    """Two real trainings into one folder, lookup_table then gbt (the second keeps the first's hashes), and gbt on
    other data elsewhere (a valid pickle that is not the first folder's)."""
    d = tmp_path_factory.mktemp("hashes")
    src = write_native(d / "d.jsonl", grid_rows(repeats=2, batch_sizes=BS, configs=CONFIGS, failing=()))
    other = write_native(d / "o.jsonl", grid_rows(repeats=2, batch_sizes=BS, configs=CONFIGS, failing=(), seed=7))
    for out, data, algos in ((d / "m", src, "lookup_table"), (d / "m", src, "gbt"), (d / "o", other, "gbt")):
        assert main(["train", "--dataset", str(data), "--out", str(out), "--algos", algos, "--seed", "0"]) == 0
    return {"data": src, "models": d / "m", "other": d / "o"}


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _copy(trained: dict[str, Path], tmp_path: Path) -> Path:
    models = tmp_path / "models"
    shutil.copytree(trained["models"], models)
    return models


def test_train_records_the_sha256_of_every_artifact_file(trained) -> None:
    models = trained["models"]
    recorded = json.loads((models / "train.json").read_text())["artifact_sha256"]
    files = ["gbt/model.joblib", "gbt/params.json", "lookup_table/model.json", "lookup_table/params.json"]
    assert sorted(recorded) == files  # the earlier training's lookup_table hashes survive the gbt one
    for rel in files:
        assert recorded[rel] == hashlib.sha256((models / rel).read_bytes()).hexdigest(), rel


def test_a_replaced_artifact_is_refused_by_recommend_evaluate_and_serve(trained, tmp_path, capsys) -> None:
    models = _copy(trained, tmp_path)
    # a pinned sglang version: recommend's "auto" would ask this interpreter's sglang in a subprocess (not the subject)
    recommend = [
        "recommend",
        "--models",
        str(models),
        "--algo",
        "gbt",
        "--batch-size",
        "16",
        "--sglang-version",
        "0.5.2",
    ]
    code, out, err = _run(recommend, capsys)
    assert code == 0 and "launch_server" in out, err
    shutil.copy(trained["other"] / "gbt" / "model.joblib", models / "gbt" / "model.joblib")  # a valid pickle, not ours
    code, out, err = _run(recommend, capsys)
    assert code == 3 and out == "" and "Traceback" not in err, (out, err)
    assert "is not the file harness train wrote" in err and "--trust-artifacts" in err, err
    code, out, err = _run(["evaluate", "--models", str(models), "--dataset", str(trained["data"]), "--no-loro"], capsys)
    assert code == 3 and "gbt/model.joblib is not the file harness train wrote" in err, err
    assert not (models / "evaluation.json").exists()  # nothing written for a refused artifact
    serve = ["serve", "--models", str(models), "--algo", "gbt", "--out", str(tmp_path / "serve"), "--port", "0"]
    code, out, err = _run(serve, capsys)
    assert code == 3 and "is not the file harness train wrote" in err and "Traceback" not in err, err
    code, out, err = _run([*recommend, "--trust-artifacts"], capsys)  # the user vouches for the folder
    assert code == 0 and "launch_server" in out, err
    code, out, err = _run([*serve, "--trust-artifacts", "--print-config"], capsys)
    assert code == 0 and "trust_artifacts: true" in out, (out, err)


def test_a_changed_params_file_or_no_recorded_hash_is_refused(trained, tmp_path, capsys) -> None:
    models = _copy(trained, tmp_path)
    recommend = [
        "recommend", "--models", str(models), "--algo", "lookup_table", "--batch-size", "16", "--sglang-version", "0.5.2"
    ]  # fmt: skip
    params = models / "lookup_table" / "params.json"
    params.write_text(params.read_text().replace('"seed": 0', '"seed": 1'))
    code, out, err = _run(recommend, capsys)
    assert code == 3 and "params.json is not the file harness train wrote" in err, err
    shutil.copy(trained["models"] / "lookup_table" / "params.json", params)
    meta = json.loads((models / "train.json").read_text())
    del meta["artifact_sha256"]  # a folder trained before hashes were recorded, or assembled by hand
    (models / "train.json").write_text(json.dumps(meta))
    code, out, err = _run(recommend, capsys)
    assert code == 3 and out == "" and "no sha256 recorded" in err and "--trust-artifacts" in err, err
    code, out, err = _run([*recommend, "--trust-artifacts"], capsys)
    assert code == 0 and "launch_server" in out, err


def test_trust_skips_only_the_hash_check_a_corrupt_artifact_is_still_refused(trained, tmp_path, capsys) -> None:
    models = _copy(trained, tmp_path)
    (models / "gbt" / "model.joblib").write_bytes(b"\x80\x04not a pickle at all")
    argv = ["evaluate", "--models", str(models), "--dataset", str(trained["data"]), "--no-loro", "--trust-artifacts"]
    code, out, err = _run(argv, capsys)
    assert code == 3 and "is corrupt or unreadable" in err and "Traceback" not in err, err
