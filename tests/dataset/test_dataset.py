"""harness dataset validate | merge | compare | export, on datasets built in the tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _dataset_helpers import HW, grid_rows, pilots, write_native, write_published

from harness.cli import main
from harness.core.errors import UsageError
from harness.dataset import compare, load, merge, validate_file
from harness.grid import ACTIONS, SpecConfig
from harness.runs.rows import PILOT_ERROR_PREFIX, PUBLISHED_KEYS, RowStore, make_cell_id, to_published

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def grid228() -> list:
    return grid_rows()


def _codes(report) -> set[str]:
    return {i.code for i in report.errors}


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _dump(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# --- validate ----------------------------------------------------------------------------------------------------


def test_validate_accepts_a_full_grid_with_pilots(tmp_path: Path, grid228, capsys) -> None:
    f = write_published(tmp_path / "d.jsonl", grid228 + pilots(start=228))
    rep = validate_file(f)
    assert rep.ok, rep.errors
    assert (rep.n_grid, rep.n_pilot, rep.n_error_rows) == (228, 4, 1)
    assert rep.repeats == [0, 1, 2] and rep.batch_sizes == [1, 4, 8, 16]
    assert main(["dataset", "validate", str(f), "--json", str(tmp_path / "v.json")]) == 0
    assert "VALID" in capsys.readouterr().out
    saved = json.loads((tmp_path / "v.json").read_text())
    assert saved["ok"] is True and saved["n_pilot"] == 4 and saved["errors"] == []


def test_validate_a_run_folder_resolves_replacements(tmp_path: Path, grid228) -> None:
    with RowStore(tmp_path) as store:
        for r in grid228:
            store.append(r)
        fixed = grid228[75].model_copy(
            update={
                "error": None,
                "retry_mem_fraction": 0.55,
                **{
                    k: getattr(grid228[74], k)
                    for k in (
                        "accept_length",
                        "speed_tok_s",
                        "speed_source",
                        "step_time_s",
                        "wall_clock_s",
                        "total_output_tokens",
                        "energy_joules",
                    )
                },
            }
        )
        store.append(fixed)
    rep = validate_file(tmp_path)
    assert rep.ok and rep.n_rows == 228 and rep.n_superseded == 1 and rep.n_error_rows == 0
    assert rep.warnings[0].code == "superseded"
    assert "superseded" in _codes(validate_file(tmp_path, strict=True))
    assert main(["dataset", "validate", str(tmp_path), "--strict"]) == 3
    lines = (tmp_path / "dataset.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "dataset.jsonl").write_text("".join(lines[:7] + [lines[8], lines[7]] + lines[9:]))
    assert "dataset_mismatch" in _codes(validate_file(tmp_path))


@pytest.mark.parametrize(
    "mutate, code",
    [
        (lambda recs: recs.pop(5), "config_missing"),
        (lambda recs: recs[3].update(steps=2, topk=2, num_draft_tokens=2), "unknown_config"),
        (lambda recs: recs[3].update(steps=3, topk=4, num_draft_tokens=16), "invalid_config"),
        (lambda recs: recs[3].update(steps=3, topk=1, num_draft_tokens=2), "invalid_config"),
        (lambda recs: recs[0].update(is_baseline=False), "is_baseline"),
        (
            lambda recs: [
                r.update(error="boom", speed_tok_s=None) for r in recs if r["steps"] == 0 and r["batch_size"] == 4
            ],
            "baseline_failed",
        ),
        (lambda recs: recs[10].update(index=11), "index_duplicate"),
        (lambda recs: recs[10].update(speed_source="terminal"), "schema"),
        (lambda recs: recs[10].update(speed_tok_s=None), "measurement_missing"),
        (lambda recs: recs[10].update(speed_source="step_time", step_time_s=None), "step_time_missing"),
        (lambda recs: recs.insert(3, dict(list(recs[3].items())[1:]) | {"hardware": HW}), "key_order"),
        (lambda recs: recs[7].pop("gpu_throttling"), "key_order"),
        (lambda recs: recs[7].update(extra_field=1), "key_order"),
        (lambda recs: recs[7].update(repeat=None), "repeat_missing"),
    ],
    ids=[
        "missing-config",
        "unknown-config",
        "rule-breaking-config",
        "unrewritten-topk1",
        "is-baseline",
        "baseline-failed",
        "dup-index",
        "bad-speed-source",
        "missing-measurement",
        "step-time",
        "key-order",
        "missing-key",
        "unknown-key",
        "no-repeat",
    ],
)
def test_validate_flags_broken_grids(tmp_path: Path, grid228, mutate, code: str) -> None:
    recs = [to_published(r) for r in grid228]
    mutate(recs)
    rep = validate_file(_dump(tmp_path / "d.jsonl", recs))
    assert not rep.ok and code in _codes(rep), [i.model_dump() for i in rep.errors[:5]]


@pytest.mark.parametrize(
    "change, code",
    [
        ({"is_baseline": True}, "pilot_is_baseline"),
        ({"batch_size": 16}, "pilot_batch_size"),
        ({"repeat": 1}, "pilot_nulls"),
        ({"gpu_temp_c_before": 50}, "pilot_terminalbench_nulls"),
        ({"index": 0}, "pilot_position"),
        ({"error": "a trace"}, "pilot_error"),
    ],
)
def test_validate_enforces_pilot_rules(tmp_path: Path, grid228, change: dict, code: str) -> None:
    recs = [to_published(r) for r in grid228 + pilots(start=228)]
    recs[228].update(change)
    if change.get("index") == 0:
        recs[0]["index"] = 228
    rep = validate_file(_dump(tmp_path / "d.jsonl", recs))
    assert code in _codes(rep)


def test_validate_subset_and_custom_grids(tmp_path: Path, capsys) -> None:
    configs = [ACTIONS[0], ACTIONS[10]]
    f = write_published(tmp_path / "d.jsonl", grid_rows(repeats=2, batch_sizes=[1, 16], configs=configs, failing=()))
    assert "config_missing" in _codes(validate_file(f))
    assert validate_file(f, subset=True).ok
    custom = [ACTIONS[0], SpecConfig(2, 2, 4)]  # valid for sglang, outside the published 19 (e.g. --steps 2)
    g = write_published(tmp_path / "g.jsonl", grid_rows(repeats=2, batch_sizes=[1], configs=custom, failing=()))
    assert "unknown_config" in _codes(validate_file(g))
    rep = validate_file(g, subset=True)
    assert rep.ok and rep.warnings[0].code == "unknown_config"
    assert compare(load(g).rows, load(g).rows).agrees  # compare/export/report take custom grids
    out = tmp_path / "m.jsonl"
    assert main(["dataset", "merge", str(g), "--out", str(out)]) == 3  # merge builds published datasets only
    assert "not one of the 19 published actions" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize("kind", ["malformed", "truncated", "empty", "missing", "not-object"])
def test_unreadable_input_is_a_clear_error(tmp_path: Path, grid228, kind: str, capsys) -> None:
    f = tmp_path / "d.jsonl"
    text = "".join(json.dumps(to_published(r)) + "\n" for r in grid228[:5])
    if kind == "malformed":
        lines = text.splitlines(keepends=True)
        f.write_text("".join(lines[:2]) + "{not json\n" + "".join(lines[2:]))
    elif kind == "truncated":
        f.write_text(text[:-30])
    elif kind == "empty":
        f.write_text("")
    elif kind == "not-object":
        f.write_text("[1, 2]\n")
    out = tmp_path / "out.jsonl"
    for argv in (
        ["dataset", "validate", str(f)],
        ["dataset", "merge", str(f), "--out", str(out)],
        ["dataset", "export", str(f), "--format", "jsonl", "--out", str(tmp_path / "exp")],
    ):
        assert main(argv) == 3
        err = capsys.readouterr().err
        assert "error:" in err and ("d.jsonl" in err), err
        assert {
            "malformed": ":3: malformed",
            "truncated": ":5: torn last line",
            "empty": "holds no rows",
            "missing": "file not found",
            "not-object": "expected a JSON object",
        }[kind] in err
    assert not out.exists() and not (tmp_path / "exp").exists()


def test_cli_exit_codes_in_a_real_process(tmp_path: Path, grid228) -> None:
    recs = [to_published(r) for r in grid228]
    recs.pop(40)
    f = _dump(tmp_path / "d.jsonl", recs)
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "dataset", "validate", str(f)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr
    assert "INVALID" in proc.stdout and "config_missing" in proc.stdout and "not a valid dataset" in proc.stderr


# --- merge -------------------------------------------------------------------------------------------------------


def _retry_for(row, *, ok: bool = True, mem: float = 0.55):
    upd = {"mem_fraction": mem, "retry_mem_fraction": None, "attempt": 2}
    if ok:
        upd |= {
            "error": None,
            "accept_length": 2.0,
            "speed_tok_s": 80.0,
            "speed_source": "step_time",
            "step_time_s": 0.025,
            "wall_clock_s": 60.0,
            "total_output_tokens": 8192,
            "energy_joules": 4000.0,
        }
    else:
        upd |= {"error": "EngineLaunchError: out of memory at mem_fraction 0.55"}
    return row.model_copy(update=upd)


def test_merge_applies_retries_and_appends_pilots(tmp_path: Path, grid228, capsys) -> None:
    grid = write_published(tmp_path / "grid.jsonl", grid228)
    failing = grid228[75]
    assert failing.error and failing.config == SpecConfig(5, 4, 16) and failing.batch_size == 16
    retries = write_native(tmp_path / "retries.jsonl", [_retry_for(failing), _retry_for(grid228[3])])
    (tmp_path / "tb_run").mkdir()
    tb = write_native(tmp_path / "tb_run" / "dataset_rows.jsonl", pilots(n_tb=3, n_sb=0, start=900)).parent
    sb = write_published(tmp_path / "sb.jsonl", pilots(n_tb=0, n_sb=3, start=5))
    out = tmp_path / "merged.jsonl"
    assert (
        main(
            [
                "dataset",
                "merge",
                str(grid),
                "--retries",
                str(retries),
                "--pilots",
                str(tb),
                "--pilots",
                str(sb),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert "1 replaced by retries, 1 retries ignored, 6 pilot rows" in capsys.readouterr().out
    recs = _lines(out)
    assert [r["index"] for r in recs] == list(range(234)) and all(list(r) == list(PUBLISHED_KEYS) for r in recs)
    assert recs[75]["error"] is None and recs[75]["retry_mem_fraction"] == 0.55 and recs[75]["speed_tok_s"] == 80.0
    assert recs[3] == to_published(grid228[3])  # a retry of a successful row changes nothing
    assert [r["speed_source"] for r in recs[228:]] == ["terminalbench_pilot"] * 3 + ["swebench_pilot"] * 3
    assert all(r["error"].startswith(PILOT_ERROR_PREFIX) and r["is_baseline"] is False for r in recs[228:])
    assert validate_file(out).ok


def test_merge_keeps_the_error_row_when_the_retry_fails_too(grid228) -> None:
    res = merge(grid228, [_retry_for(grid228[75], ok=False)])
    assert res.rows[75].error == grid228[75].error and res.rows[75].retry_mem_fraction is None
    assert res.n_replaced == 0 and res.n_retry_ignored == 1


@pytest.mark.parametrize("bad", ["mismatched-cell", "unknown-index", "pilot-not-pilot", "grid-gap"])
def test_merge_refuses_inconsistent_inputs_and_writes_nothing(tmp_path: Path, grid228, bad: str, capsys) -> None:
    grid_rows_ = list(grid228)
    retries, pil = [], []
    if bad == "mismatched-cell":
        retries = [_retry_for(grid228[75]).model_copy(update={"batch_size": 8})]
    elif bad == "unknown-index":
        retries = [_retry_for(grid228[75]).model_copy(update={"index": 500})]
    elif bad == "pilot-not-pilot":
        pil = [grid228[4]]
    else:
        grid_rows_.pop(10)
    grid = write_published(tmp_path / "grid.jsonl", grid_rows_)
    argv = ["dataset", "merge", str(grid)]
    if retries:
        argv += ["--retries", str(write_native(tmp_path / "r.jsonl", retries))]
    if pil:
        argv += ["--pilots", str(write_published(tmp_path / "p.jsonl", pil))]
    out = tmp_path / "merged.jsonl"
    out.write_text("previous content\n")
    assert main(argv + ["--out", str(out), "--force"]) == 3  # even --force writes nothing from bad inputs
    assert "error:" in capsys.readouterr().err
    assert out.read_text() == "previous content\n"  # nothing already written is lost


def test_merge_reads_run_folders(tmp_path: Path, grid228) -> None:
    with RowStore(tmp_path / "run") as store:
        for r in grid228:
            store.append(r)
    out = tmp_path / "m.jsonl"
    assert main(["dataset", "merge", str(tmp_path / "run"), "--out", str(out), "--native"]) == 0
    recs = _lines(out)
    assert len(recs) == 228 and recs[0]["cell_id"] == make_cell_id(0, 1, ACTIONS[0])


# --- compare -----------------------------------------------------------------------------------------------------


def test_compare_agrees_within_repeat_noise(tmp_path: Path, capsys) -> None:
    a = write_published(tmp_path / "a.jsonl", grid_rows(seed=1, noise=0.02))
    b = write_published(tmp_path / "b.jsonl", grid_rows(seed=2, noise=0.02))
    res = compare(load(a).rows, load(b).rows)
    assert res.agrees and res.cell_agreement >= 0.9
    assert 0.01 < res.noise_cv["speed_tok_s"] < 0.03  # the injected 2 % noise is recovered
    assert len(res.ranks) == 8 and all(r.kendall > 0.6 for r in res.ranks)
    assert main(["dataset", "compare", str(a), str(b), "--json", str(tmp_path / "c.json")]) == 0
    assert "AGREE" in capsys.readouterr().out
    assert json.loads((tmp_path / "c.json").read_text())["agrees"] is True


def test_compare_detects_a_shift_beyond_noise(tmp_path: Path) -> None:
    a = write_published(tmp_path / "a.jsonl", grid_rows(seed=1))
    b = write_published(tmp_path / "b.jsonl", grid_rows(seed=2, scale=1.15))
    res = compare(load(a).rows, load(b).rows)
    speed = [c for c in res.cells if c.metric == "speed_tok_s"]
    assert not res.agrees and all(not c.within and 0.1 < c.rel_diff < 0.2 for c in speed)
    assert all(r.agrees for r in res.ranks)  # a uniform shift keeps the ranking
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "dataset", "compare", str(a), str(b)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "DISAGREE" in proc.stdout and "disagree beyond repeat noise" in proc.stderr


def test_compare_detects_reordered_configs(grid228) -> None:
    shuffled = []
    for r in grid228:
        if r.error:
            shuffled.append(r)
            continue
        fake = grid228[(r.index // 19) * 19 + (18 - r.index % 19)]  # reverse the config order within each group
        speed = fake.speed_tok_s if not fake.error else r.speed_tok_s
        shuffled.append(r.model_copy(update={"speed_tok_s": speed}))
    res = compare(grid228, shuffled)
    speed_ranks = [r for r in res.ranks if r.metric == "speed_tok_s"]
    assert speed_ranks and all(not r.agrees for r in speed_ranks) and not res.agrees


def test_compare_without_repeats_uses_the_floor(grid228) -> None:
    one = [r for r in grid228 if r.repeat == 0]
    res = compare(
        one, [r.model_copy(update={"speed_tok_s": r.speed_tok_s * 1.01}) if r.speed_tok_s else r for r in one]
    )
    assert "min band only" in res.noise_source["speed_tok_s"] and all(c.band == 0.02 for c in res.cells)
    assert res.agrees
    assert main(["dataset", "compare", "/nonexistent/a.jsonl", "/nonexistent/b.jsonl"]) == 3
    with pytest.raises(UsageError, match="bad compare thresholds"):
        compare(one, one, k=0)


# --- export ------------------------------------------------------------------------------------------------------


def test_export_hf_parquet_jsonl(tmp_path: Path, grid228) -> None:
    import datasets
    import pyarrow.parquet as pq

    src = write_published(tmp_path / "d.jsonl", grid228 + pilots(start=228))
    assert main(["dataset", "export", str(src), "--format", "hf", "--out", str(tmp_path / "hf")]) == 0
    ds = datasets.load_from_disk(str(tmp_path / "hf"))
    assert len(ds) == 232 and ds.column_names == list(PUBLISHED_KEYS)
    assert ds[75]["error"] and ds[75]["speed_tok_s"] is None and ds[0]["is_baseline"] is True
    assert ds.features["gpu_temp_c_before"].dtype == "float64" and ds.features["repeat"].dtype == "int64"

    assert main(["dataset", "export", str(src), "--format", "parquet", "--out", str(tmp_path / "pq")]) == 0
    table = pq.read_table(next((tmp_path / "pq").glob("*.parquet")))
    assert table.num_rows == 232 and table.column_names == list(PUBLISHED_KEYS)

    assert main(["dataset", "export", str(src), "--format", "jsonl", "--out", str(tmp_path / "js")]) == 0
    assert _lines(next((tmp_path / "js").glob("*.jsonl"))) == _lines(src)


def test_export_native_and_refusals(tmp_path: Path, grid228, capsys) -> None:
    import pyarrow.parquet as pq

    with RowStore(tmp_path / "run") as store:
        for r in grid228[:19]:
            store.append(r.model_copy(update={"attention_backend": "flashinfer"}))
    out = tmp_path / "pq"
    assert main(["dataset", "export", str(tmp_path / "run"), "--format", "parquet", "--native", "--out", str(out)]) == 0
    table = pq.read_table(next(out.glob("*.parquet")))
    assert table.num_rows == 19 and "cell_id" in table.column_names and "window_reasons" in table.column_names
    assert str(table.schema.field("attention_backend").type) == "string"
    assert set(table.column("attention_backend").to_pylist()) == {"flashinfer"}
    before = sorted(p.name for p in out.iterdir())
    assert main(["dataset", "export", str(tmp_path / "run"), "--format", "parquet", "--out", str(out)]) == 6
    assert "not empty" in capsys.readouterr().err and sorted(p.name for p in out.iterdir()) == before
    assert main(["dataset", "export", str(tmp_path / "run"), "--format", "csv", "--out", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()
    assert main(["dataset", "export", str(tmp_path / "run"), "--format", "jsonl", "--out", str(out), "--force"]) == 0
    assert [p.suffix for p in out.iterdir()] == [".jsonl"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folder left behind


@pytest.mark.parametrize("bad", ["key-order", "missing-key", "rule-breaking-config", "bad-type"])
def test_merge_and_export_refuse_bad_records_and_write_nothing(tmp_path: Path, grid228, bad: str, capsys) -> None:
    recs = [to_published(r) for r in grid228[:19]]
    if bad == "key-order":
        recs[4] = {"index": recs[4]["index"], **{k: v for k, v in recs[4].items() if k != "index"}}
    elif bad == "missing-key":
        del recs[4]["joules_per_token"]
    elif bad == "rule-breaking-config":
        recs[4].update(steps=1, topk=2, num_draft_tokens=8)
    else:
        recs[4]["total_output_tokens"] = "8192"
    f = _dump(tmp_path / "d.jsonl", recs)
    out, exp = tmp_path / "m.jsonl", tmp_path / "exp"
    assert main(["dataset", "merge", str(f), "--out", str(out)]) == 3
    assert main(["dataset", "export", str(f), "--format", "hf", "--out", str(exp)]) == 3
    err = capsys.readouterr().err
    assert err.count("record 5") + err.count("at index 4") == 2, err  # the row is named either way
    assert not out.exists() and not exp.exists()


def test_json_reports_never_replace_a_file_without_force(tmp_path: Path, grid228, capsys) -> None:
    """Issue 38 A7: ``validate --json F`` and ``compare --json F`` overwrote F; merge and export refused."""
    f = write_published(tmp_path / "d.jsonl", grid228)
    keep = tmp_path / "keep.json"
    keep.write_text('{"mine": true}')
    assert main(["dataset", "validate", str(f), "--json", str(keep)]) == 6
    assert main(["dataset", "compare", str(f), str(f), "--json", str(keep)]) == 6
    assert "already exists; nothing written" in capsys.readouterr().err and keep.read_text() == '{"mine": true}'
    assert main(["dataset", "validate", str(f), "--json", str(keep), "--force"]) == 0
    assert json.loads(keep.read_text())["ok"] is True
