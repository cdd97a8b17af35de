"""The power cap as a sweep dimension: parsing, the twin device honouring and refusing limits, the real NVML setter
path through nvidia-ml-py against the NVML shim, and real twin sweeps that set, record and restore the limit (also
after SIGTERM, and after SIGKILL on resume)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from _engine_helpers import FAST, ROOT, harness_cmd, read_lines, run_harness, wait_rows
from _nvml_shim_helpers import ShimScript, load_in_process, session_shim
from _twin_helpers import twin_gpu

from harness.core.errors import UsageError
from harness.gpu.power_cap import (
    CapLimits,
    NvmlCapDevice,
    PowerCapController,
    PowerCapError,
    TwinCapDevice,
    parse_power_caps,
    resolve_cap,
)

GRID = ["--engine", "twin", "--configs", "0:0:0,3:4:8", "--batch-sizes", "1"]


# --- parsing and resolution ---------------------------------------------------------------------------------------


def test_parse_caps_watts_and_percent():
    assert parse_power_caps("60, 80") == ["60", "80"]
    assert parse_power_caps("75%,100%") == ["75%", "100%"]
    assert parse_power_caps("60W,70.5") == ["60", "70.5"]
    for bad in ("", "abc", "60,60", "-5", "0"):
        with pytest.raises(UsageError):
            parse_power_caps(bad)


def test_resolve_refuses_values_outside_the_constraints():
    limits = CapLimits(current_w=600, min_w=100, max_w=700, default_w=700)
    assert resolve_cap("50%", limits) == 350.0 and resolve_cap("300", limits) == 300.0
    with pytest.raises(PowerCapError, match=r"outside this GPU's limits \[100, 700\] W"):
        resolve_cap("800", limits)
    with pytest.raises(PowerCapError, match="default limit"):
        resolve_cap("50%", CapLimits(min_w=100, max_w=700))


# --- the twin device -----------------------------------------------------------------------------------------------


def test_twin_device_honours_a_set_limit_and_refuses_one_outside_min_max():
    with twin_gpu() as gpu:
        dev = TwinCapDevice(gpu.url)
        lim = dev.limits()
        assert (lim.current_w, lim.min_w, lim.max_w, lim.default_w) == (80.0, 35.0, 80.0, 80.0)
        dev.set_limit(45)
        state = gpu.get("/v1/state").json()
        assert state["power_limit_w"] == 45.0 and state["power_management_limit_w"] == 45.0
        assert gpu.get("/v1/info").json()["power_limit_w"] == 45.0
        # a busy engine demanding far more than the limit is held at it (plus the controller's small overshoot)
        assert gpu.post("/v1/engines", json={"engine_id": "e", "memory_mb": 100, "lease_s": 30}).status_code == 200
        act = gpu.post("/v1/engines/e/activity", json={"busy": True, "dynamic_power_w": 200.0, "util": 1.0}).json()
        assert act["clock_factor"] < 1.0
        p = gpu.get("/v1/state").json()
        assert 44.0 <= p["power_w"] <= 45.0 * 1.005 + 1.5 and p["clock_event_reasons"] & 0x4
        r = gpu.post("/v1/power_limit", json={"power_limit_w": 20})
        assert r.status_code == 400 and "outside this GPU's constraints [35, 80] W" in r.json()["error"]["message"]
        with pytest.raises(PowerCapError, match="refused"):
            dev.set_limit(120)
        assert dev.limits().current_w == 45.0  # a refused value changes nothing


# --- NVML through nvidia-ml-py and the shim ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def shim_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return session_shim(tmp_path_factory)


@pytest.fixture(scope="session")
def shim_lib(shim_dir: Path):
    return load_in_process(shim_dir)


@pytest.fixture
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shim_lib) -> ShimScript:
    s = ShimScript(tmp_path / "nvml.script", limit_min_mw=100000, limit_max_mw=700000)
    monkeypatch.setenv("NVML_SHIM_SCRIPT", str(s.path))
    return s


def test_nvml_setter_sets_reads_back_and_refuses(script: ShimScript):
    dev = NvmlCapDevice(0)
    try:
        lim = dev.limits()
        assert (lim.current_w, lim.enforced_w, lim.min_w, lim.max_w, lim.default_w) == (
            650.0,
            600.0,
            100.0,
            700.0,
            700.0,
        )
        dev.set_limit(300)
        lim = dev.limits()
        assert lim.current_w == 300.0 and lim.enforced_w == 300.0
        with pytest.raises(PowerCapError, match="NVML refused the power limit 900 W"):
            dev.set_limit(900)
        script.set({"root": 0})
        with pytest.raises(PowerCapError, match="needs root") as exc:
            dev.set_limit(400)
        assert "--power-cap-mode record" in (exc.value.fix or "")
        assert "CAP_SYS_ADMIN" in (exc.value.fix or "") and "sweep-settings" in (exc.value.fix or "")  # the Docker way
        assert dev.limits().current_w == 300.0
        script.set({"root": 1}).fail("nvmlDeviceGetPowerManagementLimit", 3)  # NOT_SUPPORTED: no limit to restore
        with pytest.raises(PowerCapError, match="could not be restored"):
            PowerCapController(dev, "set", {}).begin(["250"])
        assert dev.limits().enforced_w == 300.0
    finally:
        dev.close()


def test_nvml_cap_restored_by_a_new_controller_after_the_first_process_died(
    script: ShimScript, shim_dir: Path, tmp_path: Path
):
    """A controller in a child process sets 250 W and is SIGKILLed; the limit persists (as the driver's does); a new
    controller reading the saved manifest state restores the original 650 W."""
    manifest = tmp_path / "manifest.json"
    child = (
        "import json, os, signal, sys\n"
        "from harness.gpu.power_cap import NvmlCapDevice, PowerCapController\n"
        f"m = {{}}; path = {str(manifest)!r}\n"
        "save = lambda: open(path, 'w').write(json.dumps(m))\n"
        "c = PowerCapController(NvmlCapDevice(0), 'set', m, save)\n"
        "c.begin(['250']); c.apply('250')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", child],
        cwd=ROOT,
        env={**os.environ, **script.env(shim_dir)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == -signal.SIGKILL, r.stderr
    dev = NvmlCapDevice(0)
    try:
        assert dev.limits().current_w == 250.0  # left at the cap by the killed process
        m = json.loads(manifest.read_text())
        assert m["power_cap"]["original_w"] == 650.0 and m["power_cap"]["restored"] is False
        c = PowerCapController(dev, "set", m)
        c.begin(["250"])
        assert (
            c.restore() == "power limit restored to 650 W"
            and dev.limits().current_w == 650.0
            and m["power_cap"]["restored"] is True
        )
        # a later session of the same run, after a clean restore, takes the limit in force as the original
        dev.set_limit(500)
        again = PowerCapController(dev, "set", m)
        again.begin(["250"])
        again.apply("250")
        assert dev.limits().current_w == 250.0 and again.restore() == "power limit restored to 500 W"
    finally:
        dev.close()


# --- real twin sweeps ---------------------------------------------------------------------------------------------


def _limit(gpu) -> float:
    return httpx.get(gpu.url + "/v1/power_limit", timeout=10).json()["power_limit_w"]


def test_sweep_at_two_caps_rows_carry_the_enforced_cap_and_the_limit_is_restored(tmp_path):
    run = tmp_path / "run"
    with twin_gpu() as gpu:
        TwinCapDevice(gpu.url).set_limit(70)  # the user's limit before the run
        r = run_harness("sweep", *GRID, "--power-caps", "60,80", "--twin-gpu", gpu.url, "--out", str(run), *FAST)
        assert r.returncode == 0, r.stdout + r.stderr
        assert _limit(gpu) == 70.0
    rows = read_lines(run / "rows.jsonl")
    assert [x["cell_id"] for x in rows] == [
        "cap60w-r0-bs1-s0k0d0",
        "cap60w-r0-bs1-s3k4d8",
        "cap80w-r0-bs1-s0k0d0",
        "cap80w-r0-bs1-s3k4d8",
    ]
    assert [x["index"] for x in rows] == [0, 1, 2, 3]
    for x in rows:
        cap = 60.0 if x["cell_id"].startswith("cap60") else 80.0
        assert x["error"] is None and x["power_limit_w"] == cap, x
        assert x["extras"]["power_cap"] == {"label": f"{cap:g}", "target_w": cap, "mode": "set"}
        assert x["avg_power_watts"] <= cap * 1.02
    manifest = json.loads((run / "manifest.json").read_text())
    pc = manifest["power_cap"]
    assert pc["original_w"] == 70.0 and pc["restored"] is True and pc["targets_w"] == {"60": 60.0, "80": 80.0}
    assert pc["enforced_w"] == {"60": 60.0, "80": 80.0}
    assert manifest["options"]["power_caps"] == ["60", "80"]
    assert "power limit restored to 70 W" in r.stdout + r.stderr
    assert "cap W" in r.stdout  # the end-of-sweep summary is per cap
    # the report: tables, the recipe and speed vs utilization per cap, utilization against each row's cap
    rep = run_harness("report", "sweep", str(run))
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert "recipe per power cap" in rep.stdout and "power cap 60 W, batch size 1" in rep.stdout
    summary = json.loads((run / "reports" / "summary.json").read_text())
    assert [c["power_limit_w"] for c in summary["caps"]] == [60.0, 80.0] and summary["power_limit_w"] is None
    by_cell = {
        (x["extras"]["power_cap"]["target_w"], tuple(x[k] for k in ("steps", "topk", "num_draft_tokens"))): x
        for x in rows
    }
    for b in summary["batch_sizes"]:
        for c in b["cells"]:
            x = by_cell[(b["power_limit_w"], tuple(c["config"]))]
            assert c["utilization"] == pytest.approx(x["avg_power_watts"] / b["power_limit_w"])
    assert set(summary["caps"][0]["recipe"]) == {"1"}
    png = (run / "reports" / "speed_vs_utilization.png").read_bytes()
    assert png.startswith(b"\x89PNG") and (run / "reports" / "joules_per_token_cap60w.png").exists()
    v = run_harness("dataset", "validate", str(run), "--subset")  # a config once per cap is no duplicate
    assert v.returncode == 0, v.stdout + v.stderr
    # the last cap's last cell lost: its config is present under the other cap, yet the run is incomplete
    (run / "rows.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows[:-1]))
    v = run_harness("dataset", "validate", str(run))
    assert v.returncode != 0 and "planned cells have no row: cap80w-r0-bs1-s3k4d8" in v.stdout + v.stderr, (
        v.stdout + v.stderr
    )


def test_caps_outside_the_limits_are_refused_before_any_cell(tmp_path):
    run = tmp_path / "run"
    with twin_gpu() as gpu:
        r = run_harness("sweep", *GRID, "--power-caps", "20,80", "--twin-gpu", gpu.url, "--out", str(run), *FAST)
        assert _limit(gpu) == 80.0
    assert r.returncode == 9, r.stdout + r.stderr
    assert "power cap 20 (20 W) is outside this GPU's limits [35, 80] W" in r.stderr + r.stdout
    assert not (run / "rows.jsonl").exists() or read_lines(run / "rows.jsonl") == []
    assert json.loads((run / "manifest.json").read_text())["status"] == "failed"


def test_record_mode_records_the_limit_in_force_and_never_sets_one(tmp_path):
    run = tmp_path / "run"
    with twin_gpu() as gpu:
        TwinCapDevice(gpu.url).set_limit(50)  # set by the user beforehand (sudo nvidia-smi -pl 50 on a real GPU)
        r = run_harness("sweep", *GRID, "--power-cap-mode", "record", "--twin-gpu", gpu.url, "--out", str(run), *FAST)
        assert r.returncode == 0, r.stdout + r.stderr
        assert _limit(gpu) == 50.0
    rows = read_lines(run / "rows.jsonl")
    assert len(rows) == 2 and all(x["power_limit_w"] == 50.0 and "power_cap" not in x["extras"] for x in rows)
    bad = run_harness(
        "sweep", *GRID, "--power-cap-mode", "record", "--power-caps", "60", "--out", str(tmp_path / "x"), *FAST
    )
    assert bad.returncode == 2 and "record never sets a cap" in bad.stderr + bad.stdout


def _ignore_sigint() -> None:
    """What a non-interactive shell's ``cmd &`` does to its child: SIGINT starts out ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _start(run: Path, gpu_url: str, extra: list[str] = (), sigint_ignored: bool = False) -> subprocess.Popen:
    return subprocess.Popen(
        harness_cmd("sweep", *GRID, "--power-caps", "60,80", "--twin-gpu", gpu_url, "--out", str(run), *extra, *FAST),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ignore_sigint if sigint_ignored else None,
    )


@pytest.mark.parametrize(
    ("sig", "sigint_ignored"),
    [(signal.SIGTERM, False), (signal.SIGINT, False), (signal.SIGINT, True)],
    ids=["SIGTERM", "SIGINT", "SIGINT-started-ignored"],
)
def test_sigterm_and_sigint_restore_the_original_limit(tmp_path, sig, sigint_ignored):
    """SIGINT-started-ignored: a sweep launched with SIGINT ignored (``cmd &`` from a script, as CI's shell does) still
    stops on Ctrl-C; it used to run on and exit 0, which made this test fail only when pytest itself ran that way."""
    run = tmp_path / "run"
    with twin_gpu() as gpu:
        TwinCapDevice(gpu.url).set_limit(70)
        proc = _start(run, gpu.url, sigint_ignored=sigint_ignored)
        try:
            wait_rows(run, 1, proc)
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 130, err
        assert _limit(gpu) == 70.0
    assert json.loads((run / "manifest.json").read_text())["power_cap"]["restored"] is True


def test_kill9_leaves_the_cap_and_resume_restores_the_original(tmp_path):
    run = tmp_path / "run"
    with twin_gpu() as gpu:
        TwinCapDevice(gpu.url).set_limit(70)
        proc = _start(run, gpu.url)
        try:
            wait_rows(run, 1, proc)
            proc.kill()
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
        assert _limit(gpu) == 60.0  # SIGKILL: no cleanup ran, the first pass's cap is still set
        assert json.loads((run / "manifest.json").read_text())["power_cap"]["original_w"] == 70.0
        r = run_harness("sweep", "--resume", str(run), "--twin-gpu", gpu.url, "--plain", timeout=180)
        assert r.returncode == 0, r.stdout + r.stderr
        assert _limit(gpu) == 70.0
    rows = {x["cell_id"]: x for x in read_lines(run / "rows.jsonl")}
    assert len(rows) == 4 and all(
        x["power_limit_w"] == (60.0 if c.startswith("cap60") else 80.0) for c, x in rows.items()
    )
