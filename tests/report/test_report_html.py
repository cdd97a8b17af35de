"""``harness report sweep``'s Pareto figure and self-contained HTML report, rendered by headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _dataset_helpers import grid_rows

from harness.report.html import config_label, pareto_front
from harness.report.sweep import summarize
from harness.runs.rows import RowStore

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def test_labels_and_pareto_front() -> None:
    assert config_label((0, 0, 0)) == "no_spec" and config_label((3, 4, 8)) == "s3 k4 d8"
    cells = summarize(grid_rows(repeats=3), 80.0)[0].cells
    front = pareto_front(cells)
    assert front and all(c.jpt_sd is not None for c in front)  # three repeats: an SD per cell
    for c in front:  # nothing dominates a front cell; every other cell is dominated by one
        assert not any(
            (o.speed_tok_s or 0) > (c.speed_tok_s or 0) and (o.joules_per_token or 0) < (c.joules_per_token or 0)
            for o in cells
        )
    jpts = [c.joules_per_token for c in front]
    speeds = [c.speed_tok_s for c in front]
    assert jpts == sorted(jpts) and speeds == sorted(speeds)  # cheaper is slower along the front


def test_html_report_is_self_contained_and_renders(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with RowStore(run) as store:
        for r in grid_rows():
            store.append(r)
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "report", "sweep", str(run)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    reports = run / "reports"
    assert (reports / "pareto.png").read_bytes().startswith(b"\x89PNG")
    doc = (reports / "report.html").read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', doc)
    assert len(images) == 3  # speed vs utilization, J/token, Pareto: all inline
    assert not re.search(r'(src|href)="(?!data:)', doc)  # no external resource: opens offline
    assert "s3 k4 d8" in doc and "best in band" in doc and "batch size 16" in doc
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (.ci/prereqs.sh installs it as root)")
    shot = tmp_path / "shot.png"
    r = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1200,2400",
            f"--screenshot={shot}",
            (reports / "report.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert shot.exists(), r.stderr[-2000:]
    from PIL import Image

    img = Image.open(shot).convert("RGB")
    assert img.size == (1200, 2400)
    colours = img.getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 50  # text, table shading and figures, not a blank page
    green = sum(n for n, (r_, g, b) in colours if g > r_ + 15 and g > b + 15)
    assert green > 500  # the in-band rows' shading (and the band in the figures) rendered
