"""The benchmark scripts the first GPU run depends on, dry-run on the twin: each runs end to end and writes what its
docstring says (the figures are the twin's; on a GPU box the same script measures the board)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_decode_log_interval_runs_both_intervals(tmp_path: Path) -> None:
    out = tmp_path / "dli"
    argv = [sys.executable, str(ROOT / "benchmarks" / "decode_log_interval.py"), "--configs", "0:0:0,3:1:4",
            "--batch-sizes", "1", "--repeats", "1", "--output-tokens", "64", "--time-scale", "50", "--out", str(out)]  # fmt: skip
    r = subprocess.run(
        argv, capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, "COLUMNS": "200"}
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert {c["batch_size"] for c in summary["cells"]} == {1} and len(summary["cells"]) == 2
    assert summary["geomean_ratio"] > 0 and "interval 1 / interval 40" in r.stdout
    for interval in (1, 40):  # the rows of each run record the interval their server was launched with
        rows = [json.loads(x) for x in (out / f"r0-i{interval}" / "rows.jsonl").read_text().splitlines()]
        assert rows and {row["extras"]["decode_log_interval"] for row in rows} == {interval}
