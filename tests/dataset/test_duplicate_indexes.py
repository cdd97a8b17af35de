"""Issue 45 item 5: a row measured twice under one index is refused by every consumer (the one loader), naming the
index and the records; only an error row may be replaced by a later row (a ``--retry-errors`` re-run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _dataset_helpers import grid_rows, write_native, write_published

from harness.cli import main
from harness.grid import SpecConfig

BS = (1, 16)
CONFIGS = (SpecConfig(0, 0, 0), SpecConfig(3, 4, 8), SpecConfig(3, 2, 4), SpecConfig(1, 1, 2))
FAILED = (0, 16, SpecConfig(3, 4, 8))  # one error row, index 5


@pytest.fixture(scope="module")
def small() -> list:
    """A 2-repeat grid of 4 configs x bs 1, 16 (16 rows) with one error row, every window valid."""
    rows = grid_rows(repeats=2, batch_sizes=BS, configs=CONFIGS, failing=(FAILED,))
    return [r.model_copy(update={"window_valid": True}) for r in rows]


def _consumers(src: Path, tmp: Path, models: Path) -> dict[str, list[str]]:
    return {
        "report": ["report", "sweep", str(src), "--out", str(tmp / "rep"), "--no-figures"],
        "compare": ["dataset", "compare", str(src), str(src)],
        "export": ["dataset", "export", str(src), "--format", "jsonl", "--out", str(tmp / "exp")],
        "train": ["train", "--dataset", str(src), "--out", str(tmp / "m"), "--algos", "lookup_table"],
        "evaluate": ["evaluate", "--models", str(models), "--dataset", str(src), "--no-loro"],
    }


def _harness(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.fixture(scope="module")
def models(small, tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("dup")
    out = d / "models"
    assert main(["train", "--dataset", str(write_native(d / "clean.jsonl", small)), "--out", str(out),
                 "--algos", "lookup_table"]) == 0  # fmt: skip
    return out


@pytest.mark.parametrize("write", [write_published, write_native], ids=["published", "native"])
def test_a_row_measured_twice_is_refused_by_every_consumer(tmp_path, small, models, capsys, write) -> None:
    again = small[3].model_copy(update={"speed_tok_s": small[3].speed_tok_s * 3})  # index 3 measured a second time
    src = write(tmp_path / "dup.jsonl", small + [again])
    for name, argv in _consumers(src, tmp_path, models).items():
        code, out = _harness(argv, capsys)
        assert code == 3 and "Traceback" not in out, (name, out)
        assert "index 3 appears twice (records 4 and 17" in out and "fix:" in out, (name, out)
    assert not (tmp_path / "exp").exists() and not (tmp_path / "rep").exists()
    assert not (tmp_path / "m" / "picks.json").exists() and not (models / "evaluation.json").exists()
    code, out = _harness(["dataset", "validate", str(src)], capsys)
    assert code == 3 and "index_duplicate" in out and "index 3 appears twice" in out, out


def test_an_error_row_replaced_by_its_rerun_is_still_used(tmp_path, small, capsys) -> None:
    """The one replacement the harness writes (``sweep --retry-errors``): the later row wins."""
    failed = next(r for r in small if r.error)
    ok = small[4]  # the same batch size's baseline lends its measurements
    rerun = failed.model_copy(update={k: getattr(ok, k) for k in ("error", "accept_length", "speed_tok_s",
                                                                   "speed_source", "step_time_s", "wall_clock_s",
                                                                   "total_output_tokens", "energy_joules")})  # fmt: skip
    src = write_native(tmp_path / "retried.jsonl", small + [rerun])
    code, out = _harness(["dataset", "export", str(src), "--format", "jsonl", "--out", str(tmp_path / "exp")], capsys)
    assert code == 0, out
    exported = [json.loads(line) for line in (tmp_path / "exp" / "eagle3_energy_sweep.jsonl").read_text().splitlines()]
    assert len(exported) == 16 and exported[failed.index]["error"] is None, exported[failed.index]
