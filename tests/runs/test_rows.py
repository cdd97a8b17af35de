"""The row model, its published projection, builders and the append-only run-folder store."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.core.errors import DataError
from harness.grid import ACTIONS, PUBLISHED_BATCH_SIZES, REFERENCE, SpecConfig
from harness.runs.rows import (
    PILOT_ERROR_PREFIX,
    PUBLISHED_KEYS,
    RowStore,
    SweepRow,
    error_row,
    from_published,
    grid_index,
    hardware_label,
    key_order_problem,
    load_rows,
    make_cell_id,
    pilot_row,
    throttling_flags,
    to_published,
)


def _ok_row(index: int = 0, **kw) -> SweepRow:
    base = dict(
        hardware="twin:rtx4060-laptop",
        index=index,
        repeat=0,
        batch_size=1,
        steps=3,
        topk=4,
        num_draft_tokens=8,
        is_baseline=False,
        accept_length=2.4,
        speed_tok_s=150.0,
        speed_source="step_time",
        step_time_s=0.016,
        wall_clock_s=60.2,
        wall_clock_tok_s=136.1,
        total_output_tokens=8192,
        energy_joules=4200.5,
        avg_power_watts=69.8,
        joules_per_token=0.51,
        gpu_temp_c_before=55,
        gpu_temp_c=71,
        gpu_power_w=70.1,
        gpu_util_pct=93,
        gpu_mem_used_mb=5400,
        gpu_throttling=True,
        clock_event_reasons=0x1,
        gpu_throttling_power_thermal=False,
        cell_id=make_cell_id(0, 1, REFERENCE),
    )
    base.update(kw)
    return SweepRow(**base)


def test_published_keys_are_the_26_in_order() -> None:
    assert len(PUBLISHED_KEYS) == 26 == len(set(PUBLISHED_KEYS))
    assert PUBLISHED_KEYS[:3] == ("hardware", "index", "repeat") and PUBLISHED_KEYS[-1] == "retry_mem_fraction"
    assert list(to_published(_ok_row())) == list(PUBLISHED_KEYS)


def test_published_round_trip_keeps_json_types() -> None:
    pub = to_published(_ok_row())
    back = to_published(from_published(json.loads(json.dumps(pub))))
    assert json.dumps(back) == json.dumps(pub)  # 55 stays 55, not 55.0
    assert isinstance(back["gpu_temp_c_before"], int) and isinstance(back["gpu_power_w"], float)


def test_from_published_rejects_missing_unknown_and_bad_types() -> None:
    pub = to_published(_ok_row())
    with pytest.raises(DataError, match="missing keys \\['retry_mem_fraction'\\]"):
        from_published({k: v for k, v in pub.items() if k != "retry_mem_fraction"})
    with pytest.raises(DataError, match="unknown keys \\['cell_id'\\]"):
        from_published({**pub, "cell_id": "x"})
    with pytest.raises(DataError, match="is_baseline"):
        from_published({**pub, "is_baseline": "no"})
    with pytest.raises(DataError, match="gpu_temp_c"):
        from_published({**pub, "gpu_temp_c": True})  # a bool is not a temperature
    reordered = {"index": pub["index"], **{k: v for k, v in pub.items() if k != "index"}}
    assert "position 0 is 'index'" in key_order_problem(reordered)
    assert key_order_problem(pub) is None


def test_hardware_labels() -> None:
    assert hardware_label("NVIDIA GeForce RTX 4060 Laptop GPU") == "RTX4060_Laptop"
    assert hardware_label("NVIDIA H200") == "H200"
    assert hardware_label("NVIDIA GeForce RTX 4090") == "RTX4090"
    assert hardware_label("anything", "rtx4060-laptop") == "twin:rtx4060-laptop"


def test_throttling_flags_mask_the_idle_bit() -> None:
    assert throttling_flags(0x1) == (True, False)  # the published flaw: idle counted as throttled
    assert throttling_flags(0x4) == (True, True)
    assert throttling_flags(0x41) == (True, True)
    assert throttling_flags(0) == (False, False)
    assert throttling_flags(None) == (None, None)


def test_grid_index_is_repeat_major_then_batch_then_config() -> None:
    bss, acts = list(PUBLISHED_BATCH_SIZES), list(ACTIONS)
    assert grid_index(0, 1, ACTIONS[0], bss, acts) == 0
    assert grid_index(0, 4, ACTIONS[0], bss, acts) == 19
    assert grid_index(2, 16, ACTIONS[18], bss, acts) == 227


def test_error_row_is_all_null_measurements() -> None:
    row = error_row(hardware="h", index=75, repeat=0, batch_size=16, config=SpecConfig(5, 4, 16), error="out of memory")
    pub = to_published(row)
    assert pub["error"] == "out of memory" and pub["is_baseline"] is False
    assert all(pub[k] is None for k in PUBLISHED_KEYS[9:])
    assert error_row(hardware="h", index=0, repeat=0, batch_size=1, config=ACTIONS[0], error="x").is_baseline is True


@pytest.mark.parametrize("suite", ["terminalbench", "swebench"])
def test_pilot_rows_follow_published_semantics(suite: str) -> None:
    row = pilot_row(
        suite=suite,
        hardware="h",
        index=228,
        config=ACTIONS[0],
        batch_size=16,
        repeat=2,
        is_baseline=True,
        speed_tok_s=46.4,
        step_time_s=0.1,
        gpu_temp_c_before=50,
        gpu_mem_used_mb=5000,
        gpu_throttling=False,
        pilot_server_batch_size=16,
    )
    pub = to_published(row)
    assert pub["is_baseline"] is False and pub["error"].startswith(PILOT_ERROR_PREFIX)
    assert pub["batch_size"] == 1 and pub["repeat"] is None and pub["step_time_s"] is None
    assert pub["speed_source"] == f"{suite}_pilot" and row.is_pilot and not row.is_error
    nulled = suite == "terminalbench"
    assert (pub["gpu_temp_c_before"] is None) is nulled and (pub["gpu_mem_used_mb"] is None) is nulled
    assert (pub["gpu_throttling"] is None) is nulled


def test_store_is_append_only_and_resolves_latest_per_cell(tmp_path: Path) -> None:
    cfg = SpecConfig(5, 4, 16)
    failed = error_row(
        hardware="h",
        index=0,
        repeat=0,
        batch_size=16,
        config=cfg,
        error="oom at 0.65",
        cell_id=make_cell_id(0, 16, cfg),
        mem_fraction=0.65,
    )
    other = _ok_row(index=1)
    retried = _ok_row(
        index=0,
        batch_size=16,
        steps=5,
        topk=4,
        num_draft_tokens=16,
        cell_id=failed.cell_id,
        retry_mem_fraction=0.55,
        mem_fraction=0.55,
    )
    with RowStore(tmp_path) as store:
        store.append(failed)
        store.append(other)
        size_before = store.rows_path.stat().st_size
        store.append(retried)
    rows_text = (tmp_path / "rows.jsonl").read_text()
    assert len(rows_text.splitlines()) == 3 and store.rows_path.stat().st_size > size_before
    assert rows_text.startswith(json.dumps(failed.model_dump(mode="json"), separators=(",", ":")))  # untouched
    latest = RowStore(tmp_path).latest()
    assert [r.index for r in latest] == [0, 1] and latest[0].retry_mem_fraction == 0.55 and latest[0].error is None
    assert len((tmp_path / "dataset.jsonl").read_text().splitlines()) == 3
    assert [r.index for r in load_rows(tmp_path / "dataset.jsonl")] == [0, 1]  # per-index resolution
    assert [r.index for r in load_rows(tmp_path)] == [0, 1]
    out = tmp_path / "final.jsonl"
    assert RowStore(tmp_path).write_published(out) == 2
    assert [list(json.loads(line)) for line in out.read_text().splitlines()] == [list(PUBLISHED_KEYS)] * 2


def test_store_repairs_a_torn_tail_left_by_a_killed_writer(tmp_path: Path) -> None:
    """A writer killed (SIGKILL, real process) mid-append leaves a torn line; reopening cuts it, nothing else lost."""
    script = textwrap.dedent(
        f"""
        import os, json, signal
        from harness.runs.rows import RowStore, SweepRow
        rec = {json.dumps(to_published(_ok_row()))!r}
        store = RowStore({str(tmp_path)!r}).open()
        store.append(SweepRow(**json.loads(rec)))
        with open(store.rows_path, "ab") as f:
            f.write(rec.encode()[:40]); f.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[2], timeout=60)
    assert proc.returncode == -9
    assert not (tmp_path / "rows.jsonl").read_bytes().endswith(b"\n")
    assert [r.index for r in load_rows(tmp_path)] == [0]  # readers skip the torn tail
    with RowStore(tmp_path) as store:
        store.append(_ok_row(index=1, cell_id="c1"))
    assert [r.index for r in store.read_all()] == [0, 1]
    assert [json.loads(x)["index"] for x in (tmp_path / "dataset.jsonl").read_text().splitlines()] == [0, 1]


def test_store_restores_published_lines_lost_between_the_two_writes(tmp_path: Path) -> None:
    with RowStore(tmp_path) as store:
        store.append(_ok_row(index=0))
    with open(tmp_path / "rows.jsonl", "a") as f:  # crash after the native write, before the published one
        f.write(json.dumps(_ok_row(index=1, cell_id="c1").model_dump(mode="json")) + "\n")
    RowStore(tmp_path).open().close()
    assert [json.loads(x)["index"] for x in (tmp_path / "dataset.jsonl").read_text().splitlines()] == [0, 1]
    (tmp_path / "rows.jsonl").write_text("")
    with pytest.raises(DataError, match="dataset.jsonl has 2 rows"):
        RowStore(tmp_path).open()
