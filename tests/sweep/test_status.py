"""``harness status`` reconciles the manifest with the rows on disk (issue 38, A1): a run whose rows file was emptied
or lost its last row is not "complete", whatever its manifest says; ``--resume`` measures what is missing."""

from __future__ import annotations

import pytest
from _engine_helpers import FAST, read_lines, run_harness


@pytest.mark.slow
def test_status_reads_the_rows_not_only_the_manifest(tmp_path) -> None:
    run = tmp_path / "run"
    r = run_harness(
        "sweep", "--engine", "twin", "--configs", "0:0:0,3:1:4", "--batch-sizes", "1", "--out", str(run), *FAST
    )
    assert r.returncode == 0, r.stdout + r.stderr
    ok = run_harness("status", str(run))
    assert ok.returncode == 0 and "complete" in ok.stdout and "2 / 2 done" in ok.stdout, ok.stdout
    rows = run / "rows.jsonl"
    lines = rows.read_bytes().splitlines(keepends=True)
    rows.write_bytes(lines[0] + lines[1][: len(lines[1]) // 2])  # a torn last row
    torn = run_harness("status", str(run))
    assert torn.returncode == 1 and "1 / 2 done" in torn.stdout and "incomplete" in torn.stdout, torn.stdout
    rows.write_bytes(b"")  # emptied
    empty = run_harness("status", str(run))
    assert empty.returncode == 1 and "0 / 2 done" in empty.stdout and "--resume" in empty.stdout, empty.stdout
    refused = run_harness("sweep", "--resume", str(run), "--plain")  # rows lost: resume will not paper over it
    assert refused.returncode == 3 and "delete dataset.jsonl" in refused.stderr, refused.stderr
    (run / "dataset.jsonl").unlink()  # as the fix says
    again = run_harness("sweep", "--resume", str(run), "--plain")
    assert again.returncode == 0, again.stdout + again.stderr
    assert sorted(row["cell_id"] for row in read_lines(rows)) == ["r0-bs1-s0k0d0", "r0-bs1-s3k1d4"]
    assert run_harness("status", str(run)).returncode == 0
