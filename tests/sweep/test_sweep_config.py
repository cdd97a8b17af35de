"""``harness sweep`` options derived from ``SweepOptions``: ``-h``, ``--config`` overlays, ``--print-config`` round
trips through a real twin sweep, and the typed manifest keeps every key of an older manifest."""

from __future__ import annotations

import json

import pytest
import yaml
from _engine_helpers import FAST, run_harness

from harness.cli import main
from harness.runs.manifest import read_manifest, read_options
from harness.runs.options import SweepOptions


def _run(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    cap = capsys.readouterr()
    return code, cap.out + cap.err


def _printed(argv: list[str], capsys) -> dict:
    code, out = _run(["sweep", *argv, "--print-config"], capsys)
    assert code == 0, out
    return yaml.safe_load(out)


def test_short_help_is_the_long_help_with_panels_and_model_defaults() -> None:
    long_help, short_help = run_harness("sweep", "--help"), run_harness("sweep", "-h")  # 200 columns: no wrapping
    assert long_help.returncode == short_help.returncode == 0 and long_help.stdout == short_help.stdout
    for panel in ("Grid", "Engine", "Workload", "World", "Power caps", "Run folder", "Presets and config file"):
        assert panel in short_help.stdout, panel
    text = " ".join(short_help.stdout.split())
    # names, defaults and help come from the model's fields (Field(description=...)), choices from its Literal types
    assert "--request-timeout" in text and "wall seconds before a request counts as hung" in text and "300.0" in text
    assert "twin|sglang" in text and "measured|steady" in text and "--stream --no-stream" in text
    assert run_harness("reproduce", "-h").returncode == 0 and run_harness("status", "-h").returncode == 0


def test_config_file_overlays_the_preset_and_flags_overlay_the_file(tmp_path, capsys) -> None:
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        "repeats: 3\nbatch_sizes: [1, 4]\noutput_tokens: 64\nengine_args: ['--x']\nenergy_window: steady\n"
        "num_prompts: 20\n"
    )
    got = _printed(["--quick", "--config", str(cfg), "--repeats", "2", "--engine-arg=--y"], capsys)
    assert got["repeats"] == 2 and got["engine_args"] == ["--y"]  # the flags given win over the file
    assert (
        got["batch_sizes"] == [1, 4] and got["output_tokens"] == 64 and got["energy_window"] == "steady"
    )  # file over --quick
    assert got["time_scale"] == 20.0 and got["configs"] == [
        [0, 0, 0],
        [3, 4, 8],
        [3, 2, 4],
        [5, 2, 8],
    ]  # --quick where nothing else spoke
    assert got["seed"] == 0 and got["mem_fractions"] == [0.65, 0.55]  # the model's defaults under everything
    as_json = tmp_path / "run.json"
    as_json.write_text(json.dumps({"repeats": 3, "launch_per": "config"}))
    got = _printed(["--config", str(as_json), "--steps", "0,3", "--topk", "0,4", "--draft-tokens", "0,8"], capsys)
    assert got["repeats"] == 3 and got["launch_per"] == "config" and got["configs"] == [[0, 0, 0], [3, 4, 8]]


@pytest.mark.parametrize(
    "text, needle",
    [
        ("repeat: 3\n", "unknown option(s) 'repeat'"),
        # a bad value gets the flag's own message (one check, every door); the from: line names the file and key
        ("repeats: many\n", "--repeats: input should be a valid integer"),
        ("engine: tgi\n", "unknown --engine 'tgi'"),
        ("- 1\n- 2\n", "expected a mapping"),
        ("repeats: [1\n", "not valid YAML or JSON"),
    ],
)
def test_a_bad_config_file_is_a_usage_error_naming_the_key(tmp_path, capsys, text, needle) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    out_dir = tmp_path / "run"
    code, out = _run(["sweep", "--config", str(cfg), "--out", str(out_dir)], capsys)
    assert code == 2 and needle in out and str(cfg) in out and "fix:" in out and "Traceback" not in out, out
    if "unknown option" not in needle and "YAML" not in needle and "mapping" not in needle:
        assert f"from: --config {cfg} (key {text.split(':')[0]})" in out, out
    assert not out_dir.exists()


def test_bad_flag_values_still_name_the_flag_and_the_fix(tmp_path, capsys) -> None:
    for argv, needle in (
        (["--engine", "tgi"], "unknown --engine 'tgi'"),
        (["--launch-per", "cel"], "unknown --launch-per"),
        (["--power-cap-mode", "sett"], "unknown --power-cap-mode"),
        (["--repeats", "0"], "--repeats"),
        (["--engine-device", "tpu"], "unknown --engine-device"),
        (["--engine-device", "cpu"], "not --engine twin"),
        (["--engine", "sglang", "--engine-device", "cpu", "--power-caps", "60"], "--power-caps needs GPUs"),
        (["--resume", str(tmp_path), "--config", str(tmp_path / "x.yaml")], "--config"),
    ):
        code, out = _run(
            ["sweep", *argv, "--out", str(tmp_path / "run")] if "--resume" not in argv else ["sweep", *argv], capsys
        )
        assert code == 2 and needle in out and "fix:" in out, (argv, out)
    assert not (tmp_path / "run").exists()


def test_a_resume_refuses_flags_that_would_change_its_saved_options(tmp_path, capsys) -> None:
    for argv, named in (
        (["--time-scale", "5"], "--time-scale"),
        (["--strategy", "active", "--budget", "0.3"], "--strategy, --budget"),
        (["--quick"], "--quick"),
        (["--executor", "ray"], "--executor"),
    ):
        code, out = _run(["sweep", "--resume", str(tmp_path), *argv], capsys)
        assert code == 2 and f"so {named} cannot change them" in out and "--sampler-url" in out, (argv, out)


def test_print_config_round_trip_runs_the_same_options(tmp_path, capsys, monkeypatch) -> None:
    """print -> save -> --config: the same printout, and a real twin sweep run from the file records those options."""
    argv = [
        "--configs",
        "0:0:0",
        "--batch-sizes",
        "1",
        "--num-prompts",
        "4",
        "--seed",
        "7",
        *[a for a in FAST if a != "--plain"],
    ]
    code, printed = _run(["sweep", *argv, "--print-config"], capsys)
    assert code == 0, printed
    cfg = tmp_path / "run.yaml"
    cfg.write_text(printed)
    code, again = _run(["sweep", "--config", str(cfg), "--print-config"], capsys)
    assert code == 0 and again == printed
    run = tmp_path / "run"
    r = run_harness("sweep", "--config", str(cfg), "--out", str(run), "--plain", timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    expected = SweepOptions.model_validate(yaml.safe_load(printed)).model_copy(update={"sglang_version": "0.5.2"})
    assert read_options(run) == expected  # "auto" resolved to the twin's version, everything else as printed
    code, resumed = _run(["sweep", "--resume", str(run), "--print-config"], capsys)
    assert code == 0 and yaml.safe_load(resumed) == expected.model_dump(mode="json")
    # a flag that repeats a saved value, and --out naming the same folder, change nothing (compose's sweep service
    # always passes its --engine and --out): accepted; a changed value or another folder is refused
    code, again = _run(["sweep", "--resume", str(run), "--out", str(run), "--seed", "7", "--print-config"], capsys)
    assert code == 0 and yaml.safe_load(again) == expected.model_dump(mode="json"), again
    code, out = _run(["sweep", "--resume", str(run), "--seed", "8", "--print-config"], capsys)
    assert code == 2 and "so --seed cannot change them" in out, out
    code, out = _run(["sweep", "--resume", str(run), "--out", str(tmp_path / "other"), "--print-config"], capsys)
    assert code == 2 and "another folder's --out" in out, out
    # a service's default folder (compose: HARNESS_SWEEP_OUT) is a default, not an instruction: --resume ignores it
    monkeypatch.setenv("HARNESS_SWEEP_OUT", str(tmp_path / "results" / "sweep-gpu"))
    code, again = _run(["sweep", "--resume", str(run), "--print-config"], capsys)
    assert code == 0 and yaml.safe_load(again) == expected.model_dump(mode="json"), again


OLD_MANIFEST = {
    # the dict layout the sweep wrote before the manifest became a model, with keys this harness does not know
    "schema": 1,
    "run_id": "20260101T000000Z-abcdef",
    "created_ns": 1767225600000000000,
    "created": "2026-01-01T00:00:00+00:00",
    "status": "interrupted",
    "argv": ["harness", "sweep", "--quick"],
    "options": {
        "engine": "twin",
        "sglang_version": "0.5.2",
        "configs": [[0, 0, 0]],
        "batch_sizes": [1],
        "repeats": 1,
        "time_scale": 50.0,
        "settle": "0",
        "output_tokens": 64,
        "retired_option": 1,
    },
    "versions": {"python": "3.12.0"},
    "git": {"commit": None},
    "launches": 2,
    "cells_planned": 1,
    "cells_done": 0,
    "launches_before": 2,
    "sglang_version_requested": "auto",
    "sglang_version": "0.5.2",
    "attention_backend": "flashinfer",
    "writer": {"pid": 1, "host": "elsewhere", "started": "2026-01-01T00:00:00Z"},
    "sessions": [
        {
            "started_ns": 1767225600000000000,
            "argv": ["harness", "sweep"],
            "resumed": False,
            "retry_errors": False,
            "writer": {"pid": 1},
            "launches": 2,
            "wall_s": 1.5,
            "gpu_note": "kept",
        }
    ],
    "power_cap": {"mode": "record", "targets_w": {}, "vendor_field": [1, 2]},
    "infrastructure_events": [
        {"wall_ns": 1, "cell_id": "r0-bs1-s0k0d0", "kind": "sampler", "action": "stopped the run"}
    ],
    "operator_note": {"why": "a key only a newer (or hand-edited) manifest has"},
}


def test_an_old_manifest_loads_and_keeps_its_unknown_keys(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps(OLD_MANIFEST))
    m = read_manifest(run)
    assert m.status == "interrupted" and m.launches == 2 and m.sessions[0].wall_s == 1.5
    m.save(run)
    written = json.loads((run / "manifest.json").read_text())
    for key, value in OLD_MANIFEST.items():  # nothing dropped, nothing changed, nested unknown keys included
        assert written[key] == value, key
    code, out = _run(["status", str(run)], capsys)
    assert code == 1 and "interrupted" in out and "0 / 1 done" in out, out
    # a real resume of that run: its one cell runs, and every key the harness does not know is still there after
    r = run_harness("sweep", "--resume", str(run), "--plain", timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    after = json.loads((run / "manifest.json").read_text())
    assert after["status"] == "complete" and after["cells_done"] == 1 and len(after["sessions"]) == 2
    assert after["operator_note"] == OLD_MANIFEST["operator_note"] and after["sessions"][0]["gpu_note"] == "kept"
    assert after["options"]["retired_option"] == 1 and after["power_cap"]["vendor_field"] == [1, 2]
    assert after["launches"] == 3 and after["infrastructure_events"] == OLD_MANIFEST["infrastructure_events"]


def test_print_config_names_the_target_and_the_draft(capsys) -> None:
    """Issue 46 (7): the models were ``null`` in ``--print-config`` (their defaults hidden in code)."""
    from harness.engine.spec import DEFAULT_DRAFT, DEFAULT_MODEL

    printed = _printed(["--engine", "twin"], capsys)
    assert (printed["model_path"], printed["draft_model_path"]) == (DEFAULT_MODEL, DEFAULT_DRAFT)
    assert DEFAULT_MODEL == "unsloth/Llama-3.2-1B-Instruct" and "EAGLE3-Llama-3.2-1B" in DEFAULT_DRAFT
    mine = _printed(["--engine", "twin", "--model-path", "/models/t", "--draft-model-path", "/models/d"], capsys)
    assert (mine["model_path"], mine["draft_model_path"]) == ("/models/t", "/models/d")
