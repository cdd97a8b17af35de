"""The commands whose options come from a pydantic model (``harness.core.model_options``): ``serve``, ``sampler
serve``, ``twin gpu``, ``twin calibrate`` and ``train``, like ``sweep``. One source for the flags, ``--config`` files
and ``--print-config``: what a command prints is a config file that gives the same options back, a flag beats the
file, and a bad file or value is exit 2 naming the key or flag. Runs the real CLI in-process."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.cli import main

COMMANDS = {
    "serve": (["serve"], ["--picks", "1=0:0:0,16=3:2:4", "--band", "0.9,0.97", "--engine-arg=--twin-launch-scale",
                          "--engine-arg=0.1", "--instances", "one", "--configs", "0:0:0,3:2:4"], ("port", "9100")),
    "sampler": (["sampler", "serve"], ["--probe", "twin", "--rate-hz", "20", "--log", "logs"], ("rate_hz", "5")),
    "twin-gpu": (["twin", "gpu"], ["--time-scale", "20", "--seed", "3", "--index", "1"], ("seed", "4")),
    "calibrate": (["twin", "calibrate"], ["--from", "run", "--holdout-every", "3", "--spreads", "0.2,0.3"],
                  ("max_evals", "7")),
    "train": (["train"], ["--dataset", "d.jsonl", "--out", "m", "--state", "pre", "--param", "linucb.alpha=1",
                          "--param", "cql.alpha=0", "--tune"], ("seed", "5")),
}  # fmt: skip


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_print_config_is_a_config_file_that_gives_the_same_options(name, tmp_path: Path, capsys, monkeypatch) -> None:
    cmd, flags, (key, value) = COMMANDS[name]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.jsonl").write_text("")  # an input path must exist when the options are built (train --dataset)
    code, printed, err = _run([*cmd, *flags, "--print-config"], capsys)
    assert code == 0, err
    options = yaml.safe_load(printed)
    assert isinstance(options, dict) and len(options) >= 6, printed
    config = tmp_path / "options.yaml"
    config.write_text(printed)
    code, again, err = _run([*cmd, "--config", str(config), "--print-config"], capsys)
    assert code == 0 and again == printed, err  # the file alone: the same options, byte for byte
    flag = "--" + key.replace("_", "-")
    code, over, err = _run([*cmd, "--config", str(config), flag, value, "--print-config"], capsys)
    assert code == 0, err
    changed = {k for k, v in yaml.safe_load(over).items() if v != options[k]}
    assert changed == {key} and str(yaml.safe_load(over)[key]) in (value, str(float(value)))  # the flag wins


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_bad_config_file_or_value_names_the_key_and_exits_2(name, tmp_path: Path, capsys) -> None:
    cmd, _, (key, _) = COMMANDS[name]
    bad = tmp_path / "bad.yaml"
    bad.write_text("no_such_option: 1\n")
    code, _, err = _run([*cmd, "--config", str(bad), "--print-config"], capsys)
    assert code == 2 and "no_such_option" in err and "fix:" in err and "Traceback" not in err
    bad.write_text(f"{key}: not-a-number\n")
    code, _, err = _run([*cmd, "--config", str(bad), "--print-config"], capsys)
    assert code == 2 and key in err and "fix:" in err and "Traceback" not in err
    code, _, err = _run([*cmd, "--" + key.replace("_", "-"), "x", "--print-config"], capsys)
    assert code == 2 and "--" + key.replace("_", "-") in err and "Traceback" not in err


def test_choices_and_required_options_are_usage_errors(capsys) -> None:
    code, _, err = _run(["serve", "--mode", "fast", "--print-config"], capsys)
    assert code == 2 and "unknown --mode 'fast'" in err and "--mode band or adaptive" in err
    code, _, err = _run(["sampler", "serve", "--probe", "dcgm", "--print-config"], capsys)
    assert code == 2 and "unknown --probe 'dcgm'" in err
    code, _, err = _run(["train", "--out", "m", "--print-config"], capsys)
    assert code == 2 and "--dataset is required" in err
    code, _, err = _run(["twin", "gpu", "--time-scale", "0", "--print-config"], capsys)
    assert code == 2 and "--time-scale" in err and "greater than 0" in err
