"""harness report sweep and final_summary_table on sweeps built in the tests."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from _dataset_helpers import grid_rows, pilots, write_published
from rich.console import Console

from harness.cli import main
from harness.grid import BASELINE, REFERENCE, SpecConfig
from harness.report.sweep import BAND, final_summary_table, power_limit_of, summarize
from harness.runs.rows import RowStore

REPO = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


def _run_dir(tmp_path: Path, rows) -> Path:
    run = tmp_path / "run"
    with RowStore(run) as store:
        for r in rows:
            store.append(r)
    return run


def _expected_best(rows, bs: int, limit: float) -> tuple[int, int, int] | None:
    """Independent recomputation: fastest mean speed among configs whose mean avg power / limit is in the band."""
    cells: dict[SpecConfig, list] = {}
    for r in rows:
        if r.batch_size == bs and not r.error and not r.is_pilot:
            cells.setdefault(r.config, []).append(r)
    best = None
    for cfg, rs in cells.items():
        u = statistics.fmean(r.avg_power_watts for r in rs) / limit
        speed = statistics.fmean(r.speed_tok_s for r in rs)
        if BAND[0] <= u <= BAND[1] and (best is None or speed > best[1]):
            best = (cfg.as_tuple(), speed)
    return best[0] if best else None


def test_report_sweep_tables_figures_and_summary(tmp_path: Path) -> None:
    rows = grid_rows() + pilots(start=228)
    run = _run_dir(tmp_path, rows)
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "report", "sweep", str(run)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for bs in (1, 4, 8, 16):
        assert f"batch size {bs} " in out
    assert "power limit 80 W (rows)" in out and "1 error rows" in out and "out of memory" in out
    assert "baseline" in out and "reference" in out and "(3,4,8)" in out
    for name in ("speed_vs_utilization.png", "joules_per_token.png"):
        data = (run / "reports" / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000
    summary = json.loads((run / "reports" / "summary.json").read_text())
    assert summary["power_limit_w"] == 80.0 and [e["index"] for e in summary["error_rows"]] == [75]
    for b in summary["batch_sizes"]:
        best = b["best_in_band"]["config"] if b["best_in_band"] else None
        assert (tuple(best) if best else None) == _expected_best(rows, b["batch_size"], 80.0)
        assert b["baseline"]["config"] == list(BASELINE.as_tuple()) and b["reference"]["config"] == list(
            REFERENCE.as_tuple()
        )
    assert any(b["best_in_band"] for b in summary["batch_sizes"])  # the fixture puts configs inside the band
    bs16 = next(b for b in summary["batch_sizes"] if b["batch_size"] == 16)
    failing = next(c for c in bs16["cells"] if c["config"] == [5, 4, 16])
    assert (failing["n_ok"], failing["n_error"]) == (2, 1)  # the error row is not averaged in


def test_power_limit_sources(tmp_path: Path) -> None:
    rows = [r.model_copy(update={"power_limit_w": None}) for r in grid_rows(repeats=1)]
    assert power_limit_of(rows) == (80.0, "published default")
    (tmp_path / "manifest.json").write_text(json.dumps({"gpu": {"power_limit_w": 100.0}}))
    assert power_limit_of(rows, tmp_path) == (100.0, "manifest.json")
    assert power_limit_of(rows, tmp_path, 60.0) == (60.0, "--power-limit")
    limit_100 = summarize(rows, 100.0)
    assert all(c.utilization == c.avg_power_watts / 100.0 for s in limit_100 for c in s.cells if c.avg_power_watts)


def test_report_without_figures_on_a_file_and_bad_inputs(tmp_path: Path, capsys) -> None:
    f = write_published(tmp_path / "d.jsonl", grid_rows(repeats=1, batch_sizes=[1, 16]))
    assert main(["report", "sweep", str(f), "--no-figures", "--power-limit", "70"]) == 0
    assert "power limit 70 W (--power-limit)" in capsys.readouterr().out
    assert not (tmp_path / "reports").exists()
    assert main(["report", "sweep", str(tmp_path / "missing")]) == 3
    assert "file not found" in capsys.readouterr().err
    empty = tmp_path / "empty_run"
    empty.mkdir()
    assert main(["report", "sweep", str(empty)]) == 3
    assert "without rows.jsonl, dataset.jsonl" in capsys.readouterr().err


def test_final_summary_table_renders_each_batch_size() -> None:
    rows = grid_rows()
    table = final_summary_table(rows)
    assert table.row_count == 4
    console = Console(record=True, width=200)
    console.print(table)
    text = console.export_text()
    for s in summarize(rows, 80.0):
        assert f"{s.baseline.speed_tok_s:.1f}" in text
        if s.best_in_band:
            assert str(SpecConfig(*s.best_in_band.config)) in text


def test_a_batch_size_without_a_config_in_band_says_why_and_which_cap_finds_one() -> None:
    from harness.report.band import no_band_hint
    from harness.report.sweep import CellSummary

    def cell(cfg: tuple[int, int, int], watts: float, speed: float) -> CellSummary:
        return CellSummary(
            batch_size=1,
            config=cfg,
            n_ok=1,
            n_error=0,
            speed_tok_s=speed,
            avg_power_watts=watts,
            utilization=watts / 80.0,
        )

    base, ref, deep = cell((0, 0, 0), 79.0, 97.5), cell((3, 4, 8), 70.8, 154.6), cell((5, 4, 16), 73.0, 150.9)
    hint = no_band_hint([base, ref, deep], 80.0, 1)
    assert hint is not None
    assert "1 above it (lowest (0,0,0) at 0.988)" in hint and "2 below it (highest (5,4,16) at 0.912)" in hint
    assert "--batch-sizes 1 --power-caps 73" in hint and "(3,4,8), the fastest below it" in hint  # 70.8 W / 0.965
    assert no_band_hint([base, cell((3, 2, 4), 76.2, 120.0)], 80.0, 16) is None  # 0.9525: in the band
    hot = no_band_hint([cell((0, 0, 0), 81.0, 90.0), cell((3, 4, 8), 80.1, 115.0)], 80.0, 16)
    assert hot is not None and "2 above it" in hot and "--sm-clocks" in hot and "--power-caps" not in hot
    assert no_band_hint([], 80.0, 1) is None


def test_a_report_names_the_twin_and_counts_the_repeats_it_left_out(tmp_path: Path, capsys) -> None:
    """Two of three repeats of a cell with an invalid window: the table says 1/0/2, not 1/1, and summary.json and
    report.html say how many rows were left out and that the rows are the twin's (issue 38 C2)."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "twin_grid_3rep.jsonl"
    rows = [json.loads(line) for line in fixture.read_text().splitlines() if line.strip()]
    hit = [r for r in rows if r["batch_size"] == 4 and (r["steps"], r["topk"], r["num_draft_tokens"]) == (5, 4, 16)]
    for r in hit[:2]:
        r["window_valid"], r["window_reasons"] = False, ["coverage_below_95pct"]
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["report", "sweep", str(src), "--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    assert "rows from the GPU-free twin" in out and "1/0/2" in out and "tok/s per seq" in out
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    assert summary["provenance"]["twin"] is True and summary["provenance"]["world"] == "twin"
    assert summary["rows"]["used"] == len(rows) - 2 and summary["rows"]["excluded_invalid_window"] == 2
    cell = next(
        c
        for b in summary["batch_sizes"]
        if b["batch_size"] == 4
        for c in b["cells"]
        if tuple(c["config"]) == (5, 4, 16)
    )
    assert (cell["n_ok"], cell["n_excluded"]) == (1, 2)
    page = (tmp_path / "rep" / "report.html").read_text()
    assert "rows from the GPU-free twin" in page and "left out for an invalid measurement window: 2" in page
    assert "--invalid-windows keep uses them" in page
