"""One check per option value, four doors (issue 45, item 1): every invalid value of docs/harness.md's table "Invalid
option values" is refused with the same message, fix and exit code whether it comes as a flag, in a ``--config``
file (as a YAML list or number where that is its natural form), in a resumed run's ``manifest.json`` (sweep) or
through the Python API. The real CLI runs in-process; the table is read from the docs, so a row added there is
tested here. ``pytest -s`` prints the (value, door, message, exit) table."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.cli import main
from harness.core.model_options import OptionError, OptionsModel, flag_name
from harness.runs.options import SweepOptions
from harness.serve.options import ServeOptions
from harness.telemetry.options import SamplerOptions
from harness.twin.options import TwinGpuOptions
from policies.options import TrainOptions

ROOT = Path(__file__).resolve().parents[2]

COMMANDS: dict[str, tuple[list[str], type[OptionsModel]]] = {
    "sweep": (["sweep"], SweepOptions),
    "serve": (["serve"], ServeOptions),
    "train": (["train"], TrainOptions),
    "sampler serve": (["sampler", "serve"], SamplerOptions),
    "twin gpu": (["twin", "gpu"], TwinGpuOptions),
}


def documented_rows() -> list[tuple[str, str, str, str]]:
    """(command, option, invalid value, start of the error) from docs/harness.md."""
    text = (ROOT / "docs" / "harness.md").read_text()
    section = text.split("### Invalid option values", 1)[1]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] in COMMANDS:
            rows.append((cells[0], cells[1].strip("`"), cells[2].strip("`"), cells[3].strip("`")))
        elif rows and not line.startswith("|"):
            break
    return rows


ROWS = documented_rows()


def _is_list(model: type[OptionsModel], key: str) -> bool:
    def walk(tp: Any) -> bool:
        origin = typing.get_origin(tp)
        if origin in (list, tuple):
            return True
        return any(walk(a) for a in typing.get_args(tp)) if origin is not None else False

    return walk(model.model_fields[key].annotation)


def _scalar(text: str) -> Any:
    """A list item or a value as a config file writes it naturally: a number as a number, anything else as text
    (``3:1:4`` stays text: YAML 1.1 would read it as a base-60 integer)."""
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"-?\d+\.\d*", text):
        return float(text)
    return text


def native(model: type[OptionsModel], key: str, text: str) -> Any:
    """The value in its natural config-file form: a list option as a YAML list, a number as a number."""
    return [_scalar(t) for t in text.split(",")] if _is_list(model, key) else _scalar(text)


def _required(command: str, tmp_path: Path) -> dict[str, Any]:
    if command != "train":
        return {}
    dataset = tmp_path / "rows.jsonl"
    dataset.write_text("")
    return {"dataset": str(dataset), "out": str(tmp_path / "models")}


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, str]]:
    code = main(argv)
    err = capsys.readouterr().err
    lines = {m.group(1): m.group(2) for m in re.finditer(r"^(error|fix|from): (.*)$", err, re.MULTILINE)}
    assert "Traceback" not in err, err
    return code, lines


def _flags(values: dict[str, Any], model: type[OptionsModel]) -> list[str]:
    return [arg for k, v in values.items() for arg in (flag_name(k, model.model_fields[k]), str(v))]


@pytest.mark.parametrize("command, key, text, starts", ROWS, ids=[f"{r[0]}:{r[1]}={r[2]}" for r in ROWS])
def test_an_invalid_value_is_refused_alike_at_every_door(command, key, text, starts, tmp_path, capsys) -> None:
    cmd, model = COMMANDS[command]
    flag = flag_name(key, model.model_fields[key])
    required = _required(command, tmp_path)
    doors: dict[str, tuple[int, dict[str, str]]] = {}

    doors["flag"] = _cli([*cmd, *_flags(required, model), f"{flag}={text}", "--print-config"], capsys)

    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({key: native(model, key, text)}))
    doors["--config"] = _cli([*cmd, *_flags(required, model), "--config", str(config), "--print-config"], capsys)

    if command == "sweep":
        run = tmp_path / "run"
        run.mkdir()
        manifest = {"schema": 1, "run_id": "t", "options": {key: native(model, key, text)}}
        (run / "manifest.json").write_text(json.dumps(manifest))
        doors["manifest"] = _cli(["sweep", "--resume", str(run)], capsys)
        # refused under the run's writer lock, before anything is written: the manifest as it was, no rows
        assert json.loads((run / "manifest.json").read_text()) == manifest
        assert not [p for p in run.iterdir() if p.name not in ("manifest.json", ".lock")]

    with pytest.raises(OptionError) as info:
        model(**required, **{key: native(model, key, text)})
    doors["python"] = (info.value.exit_code, {"error": info.value.message, "fix": info.value.fix or ""})

    first = doors["flag"][1]
    assert first["error"].startswith(starts), first
    for door, (code, lines) in doors.items():
        with capsys.disabled():
            print(f"| `{text}` | {command} {door} | {lines['error']} | {code} |")
        assert code == 2, (door, lines)
        assert (lines["error"], lines["fix"]) == (first["error"], first["fix"]), door
        if door in ("--config", "manifest"):
            assert f"key {key}" in lines["from"] and ("run.yaml" in lines["from"] or "manifest.json" in lines["from"])
        else:
            assert "from" not in lines


def test_the_table_covers_the_value_types() -> None:
    """Every kind of value the spine checks has a row: lists (batch sizes, configs, caps, clocks, fractions), the
    band, ports, durations, the time scale, URLs and choices."""
    options = {(c, k) for c, k, _, _ in ROWS}
    for needed in [
        ("sweep", "batch_sizes"),
        ("sweep", "configs"),
        ("sweep", "power_caps"),
        ("sweep", "sm_clocks"),
        ("sweep", "mem_fractions"),
        ("sweep", "time_scale"),
        ("sweep", "settle"),
        ("sweep", "sampler_url"),
        ("serve", "band"),
        ("serve", "port"),
        ("serve", "max_batch_size"),
        ("serve", "tick_s"),
    ]:
        assert needed in options, needed


def test_a_valid_value_reads_the_same_from_text_and_from_a_list() -> None:
    """The natural forms of a door give one value: ``"60, 75%"`` on the command line and ``[60, "75%"]`` in a file."""
    a = SweepOptions(batch_sizes="1, 4 16", power_caps="60,75%", sm_clocks="max,1410", configs="3:1:2,0:0:0")
    b = SweepOptions(
        batch_sizes=[1, 4, 16], power_caps=[60, "75%"], sm_clocks=["default", 1410], configs=["3:1:4", [0, 0, 0]]
    )
    assert a == b and a.configs == [(3, 1, 4), (0, 0, 0)] and a.power_caps == ["60", "75%"]
    assert ServeOptions(band="0.9, 0.97").band == ServeOptions(band=[0.9, 0.97]).band == (0.9, 0.97)
