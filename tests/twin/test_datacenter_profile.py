"""The datacenter twin profile (issue 47, item 1): ``harness/twin/profiles/h100-sxm.json`` beside the laptop's,
selected for a sweep with ``--twin-profile``. A real twin sweep on it (twin GPU, sampler and engines as processes)
records ``twin:h100-sxm`` rows at the 700 W limit whose decode draws 0.30-0.45 of it and runs faster than the
laptop's rows of the same cells (``tests/fixtures/twin_grid_3rep.jsonl``, the default workload)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from _engine_helpers import FAST, read_lines, run_harness

from harness.cli import main
from harness.grid import ACTIONS
from harness.twin.model import device_power, step_cost
from harness.twin.profile import known_profiles, load_profile

FIXTURE = Path(__file__).parents[1] / "fixtures" / "twin_grid_3rep.jsonl"
CONFIGS = [(0, 0, 0), (3, 4, 8), (5, 4, 16)]
BATCH_SIZES = [1, 16]
ACCEPTANCE = {
    "accept_first",
    "accept_decay",
    "accept_decay_power",
    "rank_share",
    "chain_depth_factor",
    "long_context_tokens",
    "long_context_floor",
    "long_context_scale_tokens",
    "prompt_quality_spread",
}
"""The draft's acceptance parameters: the laptop's (the model pair is the same)."""


def test_the_profile_loads_with_the_h100_sxm_constraints() -> None:
    p = load_profile("h100-sxm")
    d = p.device
    assert p.hardware == "twin:h100-sxm" and "h100-sxm" in known_profiles()
    assert (d.power_limit_min_w, d.power_limit_max_w) == (200.0, 700.0)
    assert d.power_limit_w == d.power_management_limit_w == 700.0
    assert d.memory_total_mb == 81559 and (d.max_sm_clock_mhz, d.mem_clock_mhz) == (1980, 2619)
    assert tuple(d.compute_capability) == (9, 0)
    assert p.perf.model_dump(include=ACCEPTANCE) == load_profile().perf.model_dump(include=ACCEPTANCE)
    assert "ASSUMPTION" in p.about and set(p.calibration["assumptions"]) >= {"power", "thermal", "perf"}
    for cfg in ACTIONS:  # the power cap never binds at 700 W, at any config and batch size
        for bs in (1, 4, 8, 16):
            _, f = device_power(p, step_cost(p, cfg, bs).dyn_w)
            assert f == 1.0, (cfg, bs)


def _laptop_speed() -> dict[tuple[int, int, int, int], float]:
    """The laptop profile's mean decode speed per (s, k, d, bs) over the fixture's repeats (error rows left out)."""
    by: dict[tuple[int, int, int, int], list[float]] = {}
    for r in read_lines(FIXTURE):
        if r["error"] is None and r.get("power_cap_w") is None and r.get("sm_clock_locked_mhz") is None:
            by.setdefault((r["steps"], r["topk"], r["num_draft_tokens"], r["batch_size"]), []).append(r["speed_tok_s"])
    return {k: statistics.mean(v) for k, v in by.items()}


def test_a_sweep_on_the_h100_profile_draws_a_third_of_its_limit_and_decodes_faster(tmp_path: Path) -> None:
    run = tmp_path / "h100"
    configs = ",".join(":".join(map(str, c)) for c in CONFIGS)
    bs = ",".join(map(str, BATCH_SIZES))
    # FAST, but the default 512 output tokens: the laptop fixture's workload (a 128-token bs-16 cell on the H100
    # is ~50 iterations, too few for sglang's 40-iteration step-time samples to leave out the idle gaps)
    out = run_harness(
        "sweep", "--engine", "twin", "--twin-profile", "h100-sxm", "--configs", configs, "--batch-sizes", bs,
        *FAST, "--output-tokens", "512", "--out", str(run),
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    rows = read_lines(run / "rows.jsonl")
    assert {(r["steps"], r["topk"], r["num_draft_tokens"], r["batch_size"]) for r in rows} == {
        (*c, b) for c in CONFIGS for b in BATCH_SIZES
    }
    laptop = _laptop_speed()
    for r in rows:
        cell = (r["steps"], r["topk"], r["num_draft_tokens"], r["batch_size"])
        assert r["error"] is None, (cell, r["error"])
        assert r["hardware"] == "twin:h100-sxm" and r["gpu_name"] == "NVIDIA H100 80GB HBM3 (twin)"
        assert r["power_limit_w"] == 700.0
        assert 0.30 <= r["avg_power_watts"] / 700.0 <= 0.45, (cell, r["avg_power_watts"])
        assert not r["gpu_throttling_power_thermal"], cell
        if cell in laptop:  # the laptop's bs-16 (5,4,16) does not fit in 8 GB: an error row there
            assert r["speed_tok_s"] > 2 * laptop[cell], (cell, r["speed_tok_s"], laptop[cell])
    assert (5, 4, 16, 16) not in laptop  # ... and fits in 80 GB


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def test_an_unknown_profile_is_refused_naming_the_known_ones(tmp_path: Path, capsys) -> None:
    for cmd in (["sweep", "--out", str(tmp_path / "x")], ["serve", "--print-config"]):
        code, err = _cli([*cmd, "--twin-profile", "nope"], capsys)
        assert code == 2, err
        assert "error: --twin-profile 'nope' is not a twin profile (known: h100-sxm, rtx4060-laptop)" in err
        assert "Traceback" not in err
    assert not (tmp_path / "x").exists()
    code, err = _cli(["sweep", "--twin-profile", str(tmp_path / "missing.json"), "--print-config"], capsys)
    assert code == 3 and "twin profile not found" in err


def test_a_profile_is_refused_with_a_running_twin_gpu_or_another_engine(tmp_path: Path, capsys) -> None:
    code, err = _cli(
        ["sweep", "--twin-profile", "h100-sxm", "--twin-gpu", "http://127.0.0.1:1", "--out", str(tmp_path / "x")],
        capsys,
    )
    assert code == 2 and "--twin-profile h100-sxm cannot apply to the running twin GPU" in err, err
    assert "fix: drop --twin-profile, or drop --twin-gpu" in err
    serve = ["serve", "--picks", "1=0:0:0", "--twin-profile", "h100-sxm", "--out", str(tmp_path / "s")]
    code, err = _cli([*serve, "--twin-gpu", "http://127.0.0.1:1", "--sampler-url", "http://127.0.0.1:2"], capsys)
    assert code == 2 and "--twin-profile h100-sxm cannot apply to the running twin GPU" in err, err
    assert not (tmp_path / "s").exists()
    code, err = _cli(
        ["sweep", "--engine", "sglang", "--twin-profile", "h100-sxm", "--out", str(tmp_path / "x")], capsys
    )
    assert code == 2 and "--twin-profile only applies to --engine twin" in err, err
    assert not (tmp_path / "x").exists()
