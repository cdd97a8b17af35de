"""``harness twin calibrate --from RUN_DIR`` on a real twin sweep: a profile fitted to the run's own rows (board from
the manifest), per-cell fit error for fitted and held-out cells, and the profile running as a twin GPU device."""

from __future__ import annotations

import json

import pytest
from _engine_helpers import read_lines, run_harness
from _twin_helpers import twin_gpu

from harness.twin.fit.from_run import split_holdout, with_device
from harness.twin.profile import TwinProfile, load_profile

TWIN = [
    "--time-scale",
    "50",
    "--output-tokens",
    "128",
    "--settle",
    "0",
    "--plain",
    "--engine-arg=--twin-launch-scale",
    "--engine-arg=0.2",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run = tmp_path_factory.mktemp("fit") / "run"
    r = run_harness(
        "sweep",
        "--engine",
        "twin",
        "--configs",
        "0:0:0,3:4:8,3:2:4,1:4:2,5:4:16",
        "--batch-sizes",
        "1",
        "--out",
        str(run),
        *TWIN,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return run


def test_calibrate_from_run_reports_fitted_and_held_out_cells_and_runs_as_a_twin_gpu(run):
    r = run_harness("twin", "calibrate", "--from", str(run), "--holdout-every", "2", "--max-evals", "3", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fitted cells" in r.stdout and "held-out cells" in r.stdout and "within the twin targets" in r.stdout
    path = run / "twin_profile.json"
    prof = TwinProfile.model_validate_json(path.read_text())
    manifest = json.loads((run / "manifest.json").read_text())
    cal = prof.calibration
    # every usable cell is fitted or held out (a window the loaded host's sampler cut is not usable); every 2nd spec
    # cell in (batch size, config) order is held out
    usable = sorted(
        tuple(x[k] for k in ("steps", "topk", "num_draft_tokens"))
        for x in read_lines(run / "rows.jsonl")
        if x["error"] is None and x["window_valid"]
    )
    spec = [c for c in usable if c != (0, 0, 0)]
    assert cal["source"] == str(run) and cal["cells_fitted"] + cal["cells_held_out"] == len(usable)
    assert [tuple(r["config"]) for r in cal["rows"] if r["held_out"]] == spec[1::2] and spec[1::2]
    for row in cal["rows"]:  # per-cell fit error against the run's own figures
        assert row["speed_err"] is not None and row["jpt_err"] is not None and isinstance(row["ok"], bool)
    assert cal["fitted_within_targets"] >= cal["cells_fitted"] - 1  # a 3-evaluation fit of a committed-profile run
    assert prof.device.power_limit_w == manifest["power_limit_w"] and prof.device.idle_power_w == pytest.approx(
        manifest["idle_power_w"]
    )
    assert prof.name == "fitted-twin-rtx4060-laptop"
    with twin_gpu(time_scale=50, profile=str(path)) as gpu:
        info = gpu.get("/v1/info").json()
        served = gpu.get("/v1/profile").json()
    assert info["hardware"] == "twin:fitted-twin-rtx4060-laptop" and info["power_limit_w"] == prof.device.power_limit_w
    assert served["perf"] == json.loads(path.read_text())["perf"]


def test_calibrate_from_bad_inputs(tmp_path, run):
    r = run_harness("twin", "calibrate", "--from", str(tmp_path))
    assert r.returncode != 0 and "not a sweep run folder" in r.stderr + r.stdout
    r = run_harness("twin", "calibrate", "--from", str(run), "--calibration", str(tmp_path / "c.json"))
    assert r.returncode != 0 and "--from" in r.stderr + r.stdout


def test_board_from_manifest_and_holdout_split():
    prof = with_device(
        load_profile(), {"power_limit_w": 100.0, "memory_total_mb": 16384, "idle_power_w": 6.5}, "fitted-x"
    )
    d = prof.device
    assert (d.power_limit_w, d.power_limit_max_w, d.memory_total_mb, d.idle_power_w) == (100.0, 100.0, 16384, 6.5)
    assert prof.hardware == "twin:fitted-x"

    class C:
        def __init__(self, cfg):
            self.config = cfg

    cells = [C((0, 0, 0)), C((3, 4, 8)), C((3, 2, 4)), C((0, 0, 0)), C((1, 4, 2))]
    fitted, held = split_holdout(cells, 2)  # type: ignore[arg-type]
    assert [c.config for c in held] == [(3, 2, 4)] and len(fitted) == 4
