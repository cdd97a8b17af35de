"""Issue 13 items 4 and 5: bad data never reaches a policy or a report silently, and bad input gets a clear error.

Every case runs the real command: ``harness.cli.main`` (the same entry point the ``harness`` script calls) for the
dataset tools, real ``harness`` processes for train / evaluate / recommend / twin gpu / sweep. The table of these
cases and their outcomes is "Bad inputs" in docs/harness.md.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest
from _dataset_helpers import grid_rows, write_native
from _engine_helpers import FAST, ROOT, harness_cmd, read_lines, run_harness
from _engine_helpers import run_harness as harness

from harness.cli import main
from harness.grid import SpecConfig
from harness.runs.options import SweepOptions
from harness.runs.rows import RowStore, make_cell_id

BS = (1, 16)
CONFIGS = (SpecConfig(0, 0, 0), SpecConfig(3, 4, 8), SpecConfig(3, 2, 4), SpecConfig(1, 1, 2))


@pytest.fixture(scope="module")
def small() -> list:
    """A clean 2-repeat grid of 4 configs x bs 1, 16 (16 rows), every window valid."""
    rows = grid_rows(repeats=2, batch_sizes=BS, configs=CONFIGS, failing=())
    return [r.model_copy(update={"window_valid": True}) for r in rows]


def _text(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))  # json.dumps writes NaN / Infinity as JSON does
    return path


def _records(rows: list) -> list[dict]:
    return [r.model_dump(mode="json") for r in rows]


def _run(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _consumers(src: Path, tmp: Path) -> dict[str, list[str]]:
    """The dataset consumers that run in-process (train and evaluate run as processes below)."""
    return {
        "report": ["report", "sweep", str(src), "--out", str(tmp / "rep"), "--no-figures"],
        "merge": ["dataset", "merge", str(src), "--out", str(tmp / "merged.jsonl")],
        "export": ["dataset", "export", str(src), "--format", "jsonl", "--out", str(tmp / "exp")],
        "compare": ["dataset", "compare", str(src), str(src)],
    }


def _no_temp_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if ".tmp" in p.name or p.name.startswith(".")]


# --- item 4: one loader, the same checks as validate ----------------------------------------------------------------


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_rejected_by_validate_strict_and_every_consumer(tmp_path, small, capsys, value) -> None:
    recs = _records(small)
    recs[5]["speed_tok_s"] = float(value.replace("Infinity", "inf"))
    src = _text(tmp_path / "d.jsonl", recs)
    assert value in src.read_text()
    for strict in ([], ["--strict"]):
        code, out = _run(["dataset", "validate", str(src), *strict], capsys)
        assert code == 3 and "non_finite" in out and "speed_tok_s" in out, out
    for name, argv in _consumers(src, tmp_path).items():
        code, out = _run(argv, capsys)
        assert code == 3, (name, out)
        assert "non_finite" in out and "Traceback" not in out, (name, out)
    assert not (tmp_path / "merged.jsonl").exists() and not (tmp_path / "exp").exists()
    assert _no_temp_files(tmp_path) == []
    r = harness("train", "--dataset", str(src), "--out", str(tmp_path / "m"), "--algos", "lookup_table")
    assert r.returncode == 3 and "non_finite" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "m" / "picks.json").exists()


def test_a_torn_last_line_is_reported_by_every_consumer_never_dropped(tmp_path, small, capsys) -> None:
    text = "".join(json.dumps(r) + "\n" for r in _records(small))
    src = tmp_path / "torn.jsonl"
    src.write_text(text[:-40])  # the last record cut mid-line, as a killed writer leaves it
    for name, argv in {"validate": ["dataset", "validate", str(src)], **_consumers(src, tmp_path)}.items():
        code, out = _run(argv, capsys)
        assert code == 3 and "torn last line" in out and "torn.jsonl:16" in out, (name, out)
        assert "--resume" in out
    r = harness("train", "--dataset", str(src), "--out", str(tmp_path / "m"), "--algos", "lookup_table")
    assert r.returncode == 3 and "torn last line" in r.stderr, r.stderr
    assert not (tmp_path / "m" / "picks.json").exists()


def _with_invalid_window(small: list) -> list:
    """The (3,2,4) rows at bs 16 get an invalid window and a wildly favourable (untrustworthy) measurement."""
    out = []
    for r in small:
        if r.batch_size == 16 and r.config == SpecConfig(3, 2, 4):
            r = r.model_copy(
                update={
                    "window_valid": False,
                    "window_reasons": ["probe_errors", "coverage_below_95pct"],
                    "speed_tok_s": r.speed_tok_s * 5,
                    "avg_power_watts": 77.5,
                    "energy_joules": r.energy_joules / 5,
                    "joules_per_token": r.joules_per_token / 5,
                }
            )
        out.append(r)
    return out


def test_invalid_window_rows_are_excluded_kept_or_refused_by_an_explicit_option(tmp_path, small, capsys) -> None:
    src = write_native(tmp_path / "w.jsonl", _with_invalid_window(small))
    code, out = _run(["dataset", "validate", str(src), "--subset"], capsys)
    assert code == 0 and "invalid_window" in out  # validate: a warning ...
    code, out = _run(["dataset", "validate", str(src), "--subset", "--strict"], capsys)
    assert code == 3 and "invalid_window" in out  # ... and an error under --strict

    def bs16_cell(summary: dict) -> dict:
        cells = next(b for b in summary["batch_sizes"] if b["batch_size"] == 16)
        return cells, next((c for c in cells["cells"] if tuple(c["config"]) == (3, 2, 4)), None)

    code, out = _run(["report", "sweep", str(src), "--out", str(tmp_path / "ex")], capsys)
    assert code == 0 and "2 rows with an invalid measurement window excluded" in out, out
    assert "probe_errors" in out
    code, out = _run(
        ["report", "sweep", str(src), "--out", str(tmp_path / "keep"), "--invalid-windows", "keep"], capsys
    )
    assert code == 0 and "2 rows with an invalid measurement window kept" in out, out
    excluded = json.loads((tmp_path / "ex" / "summary.json").read_text())
    kept = json.loads((tmp_path / "keep" / "summary.json").read_text())
    batch_ex, cell_ex = bs16_cell(excluded)
    batch_keep, cell_keep = bs16_cell(kept)
    assert cell_ex is None  # never reported, not even as closest to band
    assert cell_keep["n_ok"] == 2 and cell_keep["speed_tok_s"] > 0
    for batch in (batch_ex,):
        for key in ("best_in_band", "closest_to_band"):
            assert batch[key] is None or tuple(batch[key]["config"]) != (3, 2, 4)
    assert sorted(excluded["invalid_window_rows"]) == sorted(kept["invalid_window_rows"]) != []
    code, out = _run(["report", "sweep", str(src), "--no-figures", "--invalid-windows", "fail"], capsys)
    assert code == 3 and "--invalid-windows" in out
    code, out = _run(["dataset", "merge", str(src), "--out", str(tmp_path / "m.jsonl")], capsys)
    assert code == 3 and "invalid measurement window" in out and not (tmp_path / "m.jsonl").exists()
    code, out = _run(
        ["dataset", "merge", str(src), "--out", str(tmp_path / "m.jsonl"), "--invalid-windows", "keep"], capsys
    )
    assert code == 0 and len((tmp_path / "m.jsonl").read_text().splitlines()) == 16

    # train: the untrustworthy rows flip the bs-16 pick only when the user keeps them explicitly
    picks = {}
    for rule in ("exclude", "keep"):
        r = harness(
            "train",
            "--dataset",
            str(src),
            "--out",
            str(tmp_path / rule),
            "--algos",
            "lookup_table",
            "--invalid-windows",
            rule,
        )
        assert r.returncode == 0, r.stderr
        assert "invalid measurement window" in r.stderr
        train = json.loads((tmp_path / rule / "train.json").read_text())
        picks[rule] = json.loads((tmp_path / rule / "picks.json").read_text())["lookup_table"]["16"]
        assert train["rows_used"] == (14 if rule == "exclude" else 16)
    assert picks["keep"] == [3, 2, 4] and picks["exclude"] != [3, 2, 4]


def test_duplicate_cells_stop_report_train_and_merge(tmp_path, small, capsys) -> None:
    recs = _records(small)
    dup = dict(recs[3], index=len(recs), cell_id="r0-bs1-copy", speed_tok_s=recs[3]["speed_tok_s"] * 3)
    src = _text(tmp_path / "dup.jsonl", recs + [dup])
    for name, argv in {"validate": ["dataset", "validate", str(src)], **_consumers(src, tmp_path)}.items():
        code, out = _run(argv, capsys)
        assert code == 3 and "config_duplicate" in out, (name, out)
    r = harness("train", "--dataset", str(src), "--out", str(tmp_path / "m"), "--algos", "lookup_table")
    assert r.returncode == 3 and "config_duplicate" in r.stderr


def test_merge_never_overwrites_without_force_nor_a_runs_own_rows(tmp_path, small, capsys) -> None:
    run = tmp_path / "run"
    with RowStore(run) as store:
        for r in small:
            store.append(r)
    (run / "manifest.json").write_text(
        json.dumps(
            {
                "schema": 1,
                "run_id": "t",
                "status": "complete",
                "options": SweepOptions(
                    configs=[c.as_tuple() for c in CONFIGS], batch_sizes=list(BS), repeats=2
                ).model_dump(),
            }
        )
    )
    before = (run / "rows.jsonl").read_bytes()
    for force in ([], ["--force"]):
        code, out = _run(["dataset", "merge", str(run), "--out", str(run / "rows.jsonl"), *force], capsys)
        assert code == 6 and "own rows.jsonl" in out, out
    assert (run / "rows.jsonl").read_bytes() == before  # 16 rows stay 16 rows
    out_file = tmp_path / "merged.jsonl"
    out_file.write_text("keep me\n")
    code, out = _run(["dataset", "merge", str(run), "--out", str(out_file)], capsys)
    assert code == 6 and "--force" in out and out_file.read_text() == "keep me\n"
    code, out = _run(["dataset", "merge", str(run), "--out", str(out_file), "--force"], capsys)
    assert code == 0 and len(out_file.read_text().splitlines()) == 16
    assert _no_temp_files(tmp_path) == []


def test_validate_run_dir_checks_against_the_planned_grid(tmp_path, small, capsys) -> None:
    run = tmp_path / "run"
    opts = SweepOptions(configs=[c.as_tuple() for c in CONFIGS], batch_sizes=list(BS), repeats=2)

    def make(rows: list) -> None:
        if run.exists():
            for f in run.iterdir():
                f.unlink()
        with RowStore(run) as store:
            for r in rows:
                store.append(r)
        (run / "manifest.json").write_text(
            json.dumps({"schema": 1, "run_id": "t", "status": "complete", "options": opts.model_dump()})
        )

    make(small)  # a 4-config subset sweep: valid without --subset, because the manifest says what was planned
    code, out = _run(["dataset", "validate", str(run)], capsys)
    assert code == 0 and "VALID" in out, out
    make(small[:-1])  # the last planned cell missing
    code, out = _run(["dataset", "validate", str(run)], capsys)
    assert code == 3 and "config_missing" in out and "(1,1,2)" in out
    extra = small[0].model_copy(update={"batch_size": 4, "index": 16, "cell_id": make_cell_id(0, 4, CONFIGS[0])})
    make(small + [extra])  # a cell the plan never had
    code, out = _run(["dataset", "validate", str(run)], capsys)
    assert code == 3 and "unplanned_cell" in out
    make(small)
    opts = SweepOptions(configs=[c.as_tuple() for c in CONFIGS], batch_sizes=[1, 16, 4], repeats=2)
    make(small)  # planned bs 4 never ran
    code, out = _run(["dataset", "validate", str(run)], capsys)
    assert code == 3 and "unplanned_missing" in out and "bs 4" in out


# --- item 5: clear errors, never a traceback or a false success ----------------------------------------------------


def test_error_text_with_rich_markup_is_printed_verbatim(tmp_path, small, capsys) -> None:
    odd = tmp_path / "a[/x]b" / "[bold]d.jsonl"
    code, out = _run(["dataset", "validate", str(odd)], capsys)
    assert code == 3 and "[/x]b" in out and "[bold]d.jsonl" in out and "Traceback" not in out
    run = tmp_path / "run[/x]"
    with RowStore(run) as store:
        for r in small:
            store.append(r)
    code, out = _run(["report", "sweep", str(run), "--no-figures"], capsys)
    assert code == 0 and "run[/x]" in out, out
    code, out = _run(["dataset", "merge", str(run), "--out", str(tmp_path / "m[/b].jsonl")], capsys)
    assert code == 0 and "m[/b].jsonl" in out, out


@pytest.mark.parametrize(
    "manifest, message, exit_code",
    [
        ({"schema": 1, "run_id": "t", "status": "complete"}, "has no 'options'", 3),
        ({"schema": 99, "run_id": "t", "status": "complete", "options": {}}, "schema 99, newer than", 3),
        # a bad option value is refused as at every door (exit 2, the flag's message), the manifest named as its door
        ({"schema": 1, "run_id": "t", "options": {"repeats": "many"}}, "saved options, key repeats", 2),
        ("{garbage", "is not valid JSON", 3),
    ],
)
def test_a_broken_manifest_is_a_clear_error_for_status_resume_report_and_validate(
    tmp_path, small, capsys, manifest, message, exit_code
) -> None:
    run = tmp_path / "run"
    with RowStore(run) as store:
        for r in small:
            store.append(r)
    (run / "manifest.json").write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    for argv in (["status", str(run)], ["sweep", "--resume", str(run)], ["report", "sweep", str(run)]):
        code, out = _run(argv, capsys)
        assert code == exit_code and message in out and "Traceback" not in out, (argv, out)
        assert "fix:" in out and not (run / "reports").exists(), (argv, out)
    code, out = _run(["dataset", "validate", str(run), "--json", str(tmp_path / "v.json")], capsys)
    report = json.loads((tmp_path / "v.json").read_text())
    assert code == 3 and any(e["code"] == "manifest" and message in e["message"] for e in report["errors"]), report


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--configs", ""], "--configs"),
        (["--twin-fault", "crash@abc"], "--twin-fault"),
        (["--twin-fault", "melt"], "--twin-fault"),
        (["--batch-sizes", "1,100000"], "--batch-sizes"),
        (["--batch-sizes", "0"], "--batch-sizes"),
        (["--settle", "-5"], "--settle"),
        (["--settle", "cool:-3"], "--settle"),
        (["--time-scale", "-1"], "--time-scale"),
        (["--request-timeout", "0"], "--request-timeout"),
        (["--mem-fractions", "1.5"], "--mem-fractions"),
        (["--sampler-url", "localhost"], "--sampler-url"),
    ],
)
def test_sweep_usage_errors_name_the_option_and_leave_no_run_folder(tmp_path, capsys, args, flag) -> None:
    out_dir = tmp_path / "run"
    code, out = _run(["sweep", "--quick", "--out", str(out_dir), *args], capsys)
    assert code == 2 and flag in out and "fix:" in out and "Traceback" not in out, out
    assert not out_dir.exists()  # nothing blocks the next (corrected) run in the same --out


def test_twin_gpu_on_a_busy_port_is_a_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = run_harness("twin", "gpu", "--port", str(port), timeout=60)
    assert r.returncode == 4 and f"cannot bind the twin GPU to 127.0.0.1:{port}" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "--port" in r.stderr


@pytest.mark.slow
def test_corrupt_or_missing_artifacts_are_refused_by_evaluate_and_recommend(tmp_path, small) -> None:
    src = write_native(tmp_path / "d.jsonl", small)
    models = tmp_path / "m"
    r = harness("train", "--dataset", str(src), "--out", str(models), "--algos", "lookup_table,gbt")
    assert r.returncode == 0, r.stderr
    r = harness("recommend", "--models", str(models), "--algo", "gbt", "--batch-size", "16")
    assert r.returncode == 0 and "launch_server" in r.stdout
    (models / "gbt" / "model.joblib").write_bytes(b"\x80\x04not a pickle at all")
    r = harness("recommend", "--models", str(models), "--algo", "gbt", "--batch-size", "16")
    assert r.returncode == 3 and "corrupt" in r.stderr and r.stdout == "", (r.stdout, r.stderr)
    r = harness("evaluate", "--models", str(models), "--dataset", str(src), "--no-loro")
    assert r.returncode == 3 and "gbt artifact" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (models / "evaluation.json").exists()  # no false success
    (models / "lookup_table" / "model.json").unlink()
    r = harness("recommend", "--models", str(models), "--algo", "lookup_table", "--batch-size", "16")
    assert r.returncode == 3 and "artifact not found" in r.stderr and r.stdout == ""
    outside = tmp_path / "elsewhere.joblib"
    outside.write_bytes(b"x")
    (models / "gbt" / "model.joblib").unlink()
    (models / "gbt" / "model.joblib").symlink_to(outside)
    r = harness("recommend", "--models", str(models), "--algo", "gbt", "--batch-size", "16")
    assert r.returncode == 3 and "only from the folder you name" in r.stderr
    (models / "train.json").write_text("{broken")
    r = harness("evaluate", "--models", str(models), "--dataset", str(src))
    assert r.returncode == 3 and "train.json is corrupt" in r.stderr


def test_help_warns_that_policy_artifacts_are_pickles() -> None:
    for cmd in ("evaluate", "recommend", "train"):
        r = run_harness(cmd, "--help", timeout=60)
        assert r.returncode == 0 and "pickle" in " ".join(r.stdout.split()), (cmd, r.stdout)


def test_a_full_disk_stops_the_sweep_cleanly_and_resume_finishes_it(tmp_path) -> None:
    """A real full disk: a 4 MiB tmpfs filled up while the sweep runs (needs root to mount; skipped otherwise)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()}); needs root")
    try:
        run = disk / "run"
        sweep = [
            "sweep",
            "--engine",
            "twin",
            "--configs",
            "0:0:0,3:4:8,3:2:4",
            "--batch-sizes",
            "1,4",
            "--out",
            str(run),
            *FAST,
        ]
        proc = subprocess.Popen(
            harness_cmd(*sweep),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "COLUMNS": "200"},
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            rows = run / "rows.jsonl"
            if rows.exists() and rows.read_bytes().count(b"\n") >= 2:
                break
            time.sleep(0.2)
        with open(disk / "filler", "wb", buffering=0) as f:  # fill the disk to the last byte (unbuffered: nothing
            try:  # is left to flush when the file closes)
                while f.write(b"\0" * 65536):
                    pass
            except OSError:
                pass
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 6, out + err
        assert "free space, then --resume" in err and "Traceback" not in err, err
        assert not [p for p in run.rglob("*") if ".tmp" in p.name]  # no stale temp file
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["status"] == "failed" and "no space left" in manifest["error"]
        written = read_lines(run / "rows.jsonl")  # no torn line
        assert 2 <= len(written) < 6
        (disk / "filler").unlink()
        r = run_harness("sweep", "--resume", str(run), "--plain", timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        rows = read_lines(run / "rows.jsonl")
        assert sorted(r["cell_id"] for r in rows) == sorted({r["cell_id"] for r in rows}) and len(rows) == 6
        assert json.loads((run / "manifest.json").read_text())["status"] == "complete"
        v = run_harness("dataset", "validate", str(run))  # the planned 3-config subset, no --subset needed
        assert v.returncode == 0 and "VALID" in v.stdout, v.stdout + v.stderr
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_option_values_no_command_can_run_on_are_usage_errors(tmp_path, capsys) -> None:
    """Issue 38 A2: values that passed the checks and crashed later (a traceback in a child or after a world started)
    are exit 2 naming the flag, before anything starts."""
    cases = [
        (["sweep", "--engine", "twin", "--time-scale", "inf", "--print-config"], "--time-scale"),
        (["serve", "--picks", "1=0:0:0", "--port", "-5", "--print-config"], "--port"),
        (["twin", "gpu", "--port", "70000", "--print-config"], "--port"),
        (["twin", "gpu", "--time-scale", "nan", "--print-config"], "--time-scale"),
        (["sampler", "serve", "--rate-hz", "0", "--print-config"], "--rate-hz"),
    ]
    for argv, flag in cases:
        code, out = _run(argv, capsys)
        assert code == 2 and flag in out and "fix:" in out and "Traceback" not in out, (argv, out)


def test_config_files_that_are_not_utf8_or_hold_nothing_are_usage_errors(tmp_path, capsys) -> None:
    binary = tmp_path / "latin1.yaml"
    binary.write_bytes("repeats: 3  # r\xe9p\xe9titions\n".encode("latin-1"))
    code, out = _run(["sweep", "--config", str(binary), "--print-config"], capsys)
    assert code == 2 and "not UTF-8" in out and "Traceback" not in out, out
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    code, out = _run(["sweep", "--config", str(empty), "--print-config"], capsys)
    assert code == 2 and "holds no options" in out, out  # it used to run the defaults, silently


def test_user_input_is_printed_as_given_never_as_emoji_or_markup(capsys) -> None:
    """Issue 38 A8: rich turned ``a:b:c`` into ``a🅱c`` (its ``:b:`` emoji code) in the error that quoted it."""
    code, out = _run(["sweep", "--configs", "a:b:c", "--print-config"], capsys)
    assert code == 2 and "'a:b:c'" in out and "\U0001f171" not in out, out
    code, out = _run(["sweep", "--configs", "[bold]x[/bold]:1:2", "--print-config"], capsys)
    assert code == 2 and "[bold]x[/bold]" in out, out


def test_a_baseline_hidden_for_its_window_says_how_to_use_it(tmp_path, small) -> None:
    """Issue 38 C1: on a loaded host the bs-1 baseline's windows were flagged, consumers dropped them, and train and
    evaluate said "no baseline row for batch size 1" with a fix that did not apply."""
    flagged = [
        r.model_copy(update={"window_valid": False, "window_reasons": ["gap_over_3_periods"]})
        if r.batch_size == 1 and r.config == SpecConfig(0, 0, 0)
        else r
        for r in small
    ]
    src = write_native(tmp_path / "flagged.jsonl", flagged)
    r = harness("train", "--dataset", str(src), "--out", str(tmp_path / "m"), "--algos", "lookup_table")
    assert r.returncode == 3 and "no baseline row for batch size 1" in r.stderr, r.stderr
    assert "excluded for an invalid measurement window" in r.stderr and "--invalid-windows keep" in r.stderr
    kept = harness("train", "--dataset", str(src), "--out", str(tmp_path / "k"), "--algos", "lookup_table",
                   "--invalid-windows", "keep")  # fmt: skip
    assert kept.returncode == 0, kept.stderr


def test_report_says_when_a_garbage_manifest_leaves_no_power_limit(tmp_path, small, capsys) -> None:
    """Issue 38 A8: ``report sweep`` exited 0 on a garbage manifest, silently judging utilization against 80 W."""
    run = tmp_path / "run"
    with RowStore(run) as store:
        for r in small:
            store.append(r.model_copy(update={"power_limit_w": None}))
    (run / "manifest.json").write_text("{garbage")
    code, out = _run(["report", "sweep", str(run), "--no-figures", "--power-limit", "80"], capsys)
    assert code == 3 and "is not valid JSON" in out and "rows.jsonl" in out, out  # issue 45: the run is refused
    rows = str(run / "rows.jsonl")  # its rows alone: the report still looks for a limit beside them
    code, out = _run(["report", "sweep", rows, "--no-figures"], capsys)
    assert code == 3 and "manifest.json is unreadable" in out and "--power-limit" in out, out
    code, out = _run(["report", "sweep", rows, "--no-figures", "--power-limit", "80"], capsys)
    assert code == 0, out


def _harness_error_classes() -> dict[str, type]:
    """Every ``HarnessError`` subclass of the project, by name (their modules imported, none needing an extra)."""
    import importlib

    from harness.core.errors import HarnessError

    for module in (
        "harness.sweep.errors", "harness.runs.lock", "harness.gpu.power_cap", "harness.gpu.sm_clocks",
        "harness.engine.launch", "harness.engine.sglang_client", "harness.dataset.cli",
        "pilots.terminalbench.harbor_install", "pilots.terminalbench.setup", "pilots.terminalbench.runner",
    ):  # fmt: skip
        importlib.import_module(module)
    found: dict[str, type] = {}
    todo = [HarnessError]
    while todo:
        cls = todo.pop()
        found[cls.__name__] = cls
        todo.extend(cls.__subclasses__())
    return found


def test_the_exit_code_table_matches_the_code() -> None:
    """docs/harness.md "Errors and exit codes": each class sits in the row of its exit code, and every error class
    of the project has a row (a new class or a changed code without the table fails here)."""
    text = (ROOT / "docs" / "harness.md").read_text()
    table = text.split("### Errors and exit codes", 1)[1].split("\n\n", 2)[2].split("\n\n", 1)[0]
    documented: dict[str, int] = {}
    for line in table.splitlines()[2:]:
        code, classes = line.split("|")[1:3]
        for name in re.findall(r"`(\w+)`", classes):
            documented[name] = int(code.strip()) if code.strip().isdigit() else -1
    classes = _harness_error_classes()
    assert set(classes) <= set(documented), f"error classes missing from the table: {set(classes) - set(documented)}"
    wrong = {n: (documented[n], c.exit_code) for n, c in classes.items() if documented[n] != c.exit_code}
    assert not wrong, f"table vs code (documented, actual): {wrong}"


EXIT_MENTION = re.compile(r"\bexits?(?: with)?(?: code)? (\d+)\b")
"""An exit code named in prose: "exit 2", "exits 4", "exit code 9", "exits with code 3"."""
TOPICS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b(cap|caps|clock|clocks|limit)\b.*\b(outside|refus\w*|not support\w*|rejects?)\b", re.I), "DeviceSettingError"),
    (re.compile(r"\b(extra|not installed)\b", re.I), "MissingDependencyError"),
)  # fmt: skip
"""Sentences whose subject fixes the error class: a refused power cap or clock lock, a missing optional extra."""


def _exit_mentions() -> list[tuple[str, str, int]]:
    """(file:line, sentence, code) of every exit code README.md and docs/*.md name in prose (not the code table)."""
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith("| ") and re.match(r"\| (\d+|128\+n) \|", line):
                continue  # the exit-code table itself: test_the_exit_code_table_matches_the_code
            for cell in line.split("|"):
                for sentence in re.split(r"(?<=[.;])\s", cell):
                    for m in EXIT_MENTION.finditer(sentence):
                        out.append((f"{path.relative_to(ROOT)}:{lineno}", sentence.strip(), int(m.group(1))))
    return out


def test_every_exit_code_the_docs_name_is_the_codes() -> None:
    """Issue 46 (9): docs/powercap.md said a refused cap exits 7 while the code exits 9. Every exit code named in
    prose is one the harness exits with; a sentence naming an error class (`PowerCapError`) or about a refused cap
    or clock, or a missing extra, names that class's code."""
    classes = _harness_error_classes()
    known = {c.exit_code for c in classes.values()} | {0, 75, 130}
    mentions = _exit_mentions()
    assert len(mentions) > 40, mentions  # the scan finds the docs' mentions
    wrong = []
    for where, sentence, code in mentions:
        named = [classes[n] for n in re.findall(r"`(\w+)`", sentence) if n in classes]
        topical = [classes[cls] for pattern, cls in TOPICS if pattern.search(sentence)]
        expected = {c.exit_code for c in named} or {c.exit_code for c in topical[:1]}
        if code not in known or (expected and code not in expected):
            wrong.append(f"{where}: exit {code} ({sentence[:140]}); expected {sorted(expected) or sorted(known)}")
    assert not wrong, "\n".join(wrong)
