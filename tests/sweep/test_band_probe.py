"""The band probe before the first cell (issue 47, items 2-3), on real twin processes (GPU, sampler, engines).

On the datacenter profile at its 700 W limit the probe's draws are ~0.35 of the limit: one line before the first cell
says the band cannot be reached and names the fix (caps inside the board's 200-700 W limits); ``--power-caps auto``
chooses at most three such caps, sweeps them and restores the limit, and every batch size has a config in the band
under one of them; ``--resume`` keeps the caps. The workload is sized so every window lasts ``--min-window``. On the
laptop profile at 80 W the probe says nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _engine_helpers import read_lines, run_harness

from harness.gpu.band import BAND

QUICK_H100 = [
    "--engine", "twin", "--twin-profile", "h100-sxm", "--configs", "0:0:0,3:4:8,5:2:8", "--batch-sizes", "1,16",
    "--time-scale", "50", "--output-tokens", "128", "--settle", "0", "--min-window", "4",
]  # fmt: skip
"""A short datacenter grid: the probe's two configs (baseline, (5,2,8)) and the reference."""
FAITHFUL_H100 = [
    "--engine", "twin", "--twin-profile", "h100-sxm", "--configs", "0:0:0,5:2:8", "--batch-sizes", "1,16",
    "--time-scale", "20", "--output-tokens", "512", "--settle", "0", "--min-window", "4",
]  # fmt: skip
"""For draws to compare: at --time-scale 50 and 128 tokens the host client's few milliseconds between requests are a
tenth of a wave in twin time, so a sized (many-wave) window draws less than the probe's (docs/powercap.md)."""


def _manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def test_at_700_w_one_line_before_the_first_cell_names_caps_inside_the_limits(tmp_path: Path) -> None:
    run = tmp_path / "h100"
    out = run_harness("sweep", *QUICK_H100, "--probe", "on", "--out", str(run))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    text = out.stderr  # the sweep's console lines
    line = next(x for x in text.splitlines() if "cannot reach the band" in x)
    assert text.index(line) < text.index("sweep: 6 cells"), "the probe's line comes before the first cell"
    assert "the 700 W limit in force" in line and "--power-caps auto" in line and "locked SM clock" in line
    caps = [float(c) for c in line.split("such as --power-caps ")[1].split(" ")[0].split(",")]
    assert caps and all(200 <= c <= 700 for c in caps)
    probe = _manifest(run)["preflight"]["probe"]
    assert probe["configs"] == [[0, 0, 0], [5, 2, 8]] and probe["gpu_time_s"] > 0
    draws = [m for m in probe["measured"] if "power_w" in m]
    assert len(draws) == 4 and all(0.25 < m["power_w"] / 700.0 < 0.5 for m in draws)
    assert probe["band"]["limits"]["min_w"] == 200.0 and probe["band"]["unreachable_batch_sizes"] == [1, 16]
    # the workload: every window lasts the minimum, the rows record how long it lasted and how many requests
    workload = probe["workload"]
    assert workload["sized"] and workload["min_window_s"] == 4.0
    sized = {int(bs): n for bs, n in workload["num_prompts_by_bs"].items()}
    assert sized[16] > 16 and sized[1] >= 16
    for r in read_lines(run / "rows.jsonl"):
        assert r["error"] is None
        assert r["window_duration_s"] >= 4.0, (r["cell_id"], r["window_duration_s"])
        assert r["n_requests"] == sized[r["batch_size"]], r["cell_id"]


@pytest.mark.slow
def test_power_caps_auto_finds_the_band_at_every_batch_size_and_resume_keeps_its_caps(tmp_path: Path) -> None:
    run = tmp_path / "auto"
    out = run_harness("sweep", *FAITHFUL_H100, "--power-caps", "auto", "--out", str(run))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    chose = next(x for x in out.stderr.splitlines() if x.startswith("--power-caps auto chose"))
    m = _manifest(run)
    caps = m["preflight"]["probe"]["caps_auto"]["caps"]
    assert 1 <= len(caps) <= 3 and all(200 <= float(c) <= 700 for c in caps) and ",".join(caps) in chose
    assert m["options"]["power_caps"] == caps and m["power_cap"]["restored"] is True
    assert "power limit restored to 700 W" in out.stderr
    rows = read_lines(run / "rows.jsonl")
    assert {r["power_limit_w"] for r in rows} == {float(c) for c in caps}
    for bs in (1, 16):  # under one of the chosen caps, some config of this batch size is in the band
        u = [r["avg_power_watts"] / r["power_limit_w"] for r in rows if r["batch_size"] == bs and r["error"] is None]
        assert any(BAND[0] <= x <= BAND[1] for x in u), (bs, sorted(u))
    # the report names, per batch size, the cap and the config
    rep = run_harness("report", "sweep", str(run), "--no-figures")
    assert rep.returncode == 0 and "across passes" in rep.stdout
    # --resume reuses the caps it resolved: no second probe, the same caps
    again = run_harness("sweep", "--resume", str(run))
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "--power-caps auto chose" not in again.stderr
    m2 = _manifest(run)
    assert m2["options"]["power_caps"] == caps and m2["preflight"]["probe"] == m["preflight"]["probe"]


def test_on_the_laptop_at_80_w_the_probe_says_nothing(tmp_path: Path) -> None:
    run = tmp_path / "laptop"
    args = ["--engine", "twin", "--configs", "0:0:0,3:4:8", "--batch-sizes", "1", "--time-scale", "50"]
    out = run_harness("sweep", *args, "--output-tokens", "128", "--settle", "0", "--probe", "on", "--out", str(run))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "cannot reach the band" not in out.stderr and "preflight: no band probe" not in out.stderr
    band = _manifest(run)["preflight"]["probe"]["band"]
    assert band["limit_in_force_w"] == 80.0 and band["unreachable_batch_sizes"] == []


def test_bad_probe_options_are_refused_before_any_run_folder(tmp_path: Path) -> None:
    for args, said in (
        (["--power-caps", "auto", "--probe", "off"], "--probe off skips the probe"),
        (["--power-caps", "auto,250"], "auto alone"),
        (["--min-window", "-1"], "--min-window"),
        (["--probe", "sometimes"], "--probe"),
    ):
        run = tmp_path / "never"
        out = run_harness("sweep", "--engine", "twin", *args, "--out", str(run))
        assert out.returncode == 2, (args, out.stdout[-800:], out.stderr[-800:])
        assert said in out.stdout + out.stderr and "Traceback" not in out.stderr
        assert not run.exists()


def test_the_sized_counts_reach_every_reader_of_a_cells_workload() -> None:
    """The runner (``sized_prompts`` of the manifest), the active sweep's estimate and ``twin calibrate --from`` (the
    ``Protocol``) read the same sized counts; a run the probe did not size keeps the published max(16, bs)."""
    from harness.runs.plan import sized_prompts
    from harness.twin.fit.calibrate import Protocol
    from harness.world.bench import BenchSettings

    preflight = {"probe": {"workload": {"sized": True, "num_prompts_by_bs": {"1": 18, "16": 112}}}}
    sized = sized_prompts(preflight)
    assert sized == {1: 18, 16: 112} and sized_prompts({"gpu": {}}) == {} and sized_prompts(None) == {}
    proto = Protocol(("p",), 512, None, tuple(sorted(sized.items())))
    assert (proto.measured(1), proto.measured(4), proto.measured(16), proto.requests(16)) == (18, 16, 112, 128)
    settings = BenchSettings(num_prompts_by_bs=sized)
    assert (settings.n_requests(1), settings.n_requests(8), settings.n_requests(16)) == (18, 16, 112)
