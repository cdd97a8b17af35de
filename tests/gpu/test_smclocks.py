"""The locked SM clock as a sweep dimension: parsing and supported-clock validation, the twin device's clock lock
(power, clock, bit 0x2), the real NVML lock/reset path through nvidia-ml-py against the NVML shim (a refused lock
names the NVML error and the fix), and real twin sweeps over clocks and caps: lower J/token at a lower clock, rows
and manifest carrying the clock, the report per pass, and the original restored after SIGKILL + --resume + SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from _engine_helpers import FAST, ROOT, harness_cmd, read_lines, run_harness, wait_rows
from _nvml_shim_helpers import ShimScript, load_in_process, session_shim
from _twin_helpers import twin_gpu

from harness.core.errors import DataError, UsageError
from harness.gpu.sm_clocks import (
    ClockInfo,
    NvmlClockDevice,
    SmClockController,
    SmClockError,
    TwinClockDevice,
    parse_sm_clocks,
    resolve_clock,
)

SHORT = [*FAST, "--num-prompts", "4"]
H200 = ClockInfo(max_mhz=1980, supported_mhz=list(range(1980, 344, -15)))


def test_parse_clocks_and_refuse_unsupported_ones_naming_the_nearest():
    assert parse_sm_clocks("1980, 1410,990") == ["1980", "1410", "990"]
    assert parse_sm_clocks("max,1410MHz") == parse_sm_clocks("default,1410") == ["max", "1410"]
    for bad in ("", "fast", "1410,1410", "max,default", "0", "-5"):
        with pytest.raises(UsageError):
            parse_sm_clocks(bad)
    assert resolve_clock("1410", H200) == 1410 and resolve_clock("max", H200) is None
    with pytest.raises(SmClockError, match=r"1400 MHz is not one this GPU supports \(nearest: 1395 or 1410 MHz"):
        resolve_clock("1400", H200)
    with pytest.raises(SmClockError, match="nearest: 1965 or 1980 MHz"):
        resolve_clock("2100", H200)


def test_twin_device_locks_the_sm_clock_and_power_follows():
    with twin_gpu() as gpu:
        dev = TwinClockDevice(gpu.url)
        info = dev.clocks()
        assert (info.locked_mhz, info.max_mhz) == (None, 2370) and info.supported_mhz[:2] == [2370, 2355]
        assert gpu.post("/v1/engines", json={"engine_id": "e", "memory_mb": 100, "lease_s": 30}).status_code == 200
        gpu.post("/v1/engines/e/activity", json={"busy": True, "dynamic_power_w": 50.0, "util": 1.0})
        free = gpu.get("/v1/state").json()
        dev.lock(1410)
        act = gpu.post("/v1/engines/e/activity", json={"busy": True, "dynamic_power_w": 50.1, "util": 1.0}).json()
        locked = gpu.get("/v1/state").json()
        assert act["sm_clock_locked_mhz"] == 1410 and locked["sm_clock_mhz"] == 1410 and free["sm_clock_mhz"] == 2370
        # the same DVFS law as the cap: dynamic power x (1410/2370)^2.2, clocks-setting bit, no power-cap bit
        assert locked["power_w"] == pytest.approx(13.0 + 50.1 * (1410 / 2370) ** 2.2, abs=1.5) and free["power_w"] > 60
        assert locked["clock_event_reasons"] & 0x2 and not locked["clock_event_reasons"] & 0x4
        r = gpu.post("/v1/clocks", json={"sm_clock_locked_mhz": 1401})
        assert r.status_code == 400 and "not a supported clock" in r.json()["error"]["message"]
        with pytest.raises(SmClockError, match="refused"):
            dev.lock(5000)
        assert dev.clocks().locked_mhz == 1410  # a refused value changes nothing
        dev.unlock()
        assert dev.clocks().locked_mhz is None and gpu.get("/v1/info").json()["sm_clock_locked_mhz"] is None


# --- NVML through nvidia-ml-py and the shim ---------------------------------------------------------------------


@pytest.fixture
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> ShimScript:
    load_in_process(session_shim(tmp_path_factory))
    s = ShimScript(tmp_path / "nvml.script")
    monkeypatch.setenv("NVML_SHIM_SCRIPT", str(s.path))
    return s


def test_nvml_lock_reset_validation_and_refusal(script: ShimScript):
    locked = Path(f"{script.path}.clocks")
    dev = NvmlClockDevice(0)
    try:
        manifest: dict = {}
        c = SmClockController(dev, "set", manifest)
        with pytest.raises(SmClockError, match=r"1401 MHz is not one this GPU supports \(nearest: 1395 or 1410 MHz"):
            c.begin(["1401"])
        c.begin(["1410", "max"])
        assert manifest["sm_clocks"]["clocks"]["max_mhz"] == 1980 and manifest["sm_clocks"]["original_mhz"] is None
        assert c.apply("1410") == 1410 and locked.read_text().split() == ["1410", "1410"]
        assert dev.nv.nvmlDeviceGetClockInfo(dev.handle, 1) == 1410  # the shim's SM clock follows the lock
        assert c.restore() == "SM clocks unlocked" and not locked.exists() and manifest["sm_clocks"]["restored"] is True
        script.set({"root": 0})
        with pytest.raises(
            SmClockError, match=r"locking the SM clock at 1410 MHz needs root \(NVML: .*Permission"
        ) as exc:
            c.apply("1410")
        assert "sudo nvidia-smi -lgc" in (exc.value.fix or "") and not locked.exists()
        assert manifest["sm_clocks"]["restored"] is True  # the refused lock changed nothing: nothing to restore
    finally:
        dev.close()


# --- real twin sweeps ---------------------------------------------------------------------------------------------


def _locked(gpu) -> int | None:
    return httpx.get(gpu.url + "/v1/clocks", timeout=10).json()["sm_clock_locked_mhz"]


def test_sweep_over_caps_and_clocks_lower_clock_lower_joules_per_token(tmp_path):
    run = tmp_path / "run"
    with twin_gpu() as gpu:
        r = run_harness(
            "sweep",
            "--engine",
            "twin",
            "--configs",
            "0:0:0",
            "--batch-sizes",
            "1",
            "--power-caps",
            "70",
            "--sm-clocks",
            "max,990",
            "--twin-gpu",
            gpu.url,
            "--out",
            str(run),
            *SHORT,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert _locked(gpu) is None and httpx.get(gpu.url + "/v1/power_limit").json()["power_limit_w"] == 80.0
    out = r.stdout + r.stderr
    assert (
        "SM clock 990: locked at 990 MHz" in out
        and "SM clocks unlocked" in out
        and "power limit restored to 80 W" in out
    )
    rows = read_lines(run / "rows.jsonl")
    assert [x["cell_id"] for x in rows] == ["cap70w-clkmax-r0-bs1-s0k0d0", "cap70w-clk990mhz-r0-bs1-s0k0d0"]
    assert [x["index"] for x in rows] == [0, 1] and all(x["error"] is None and x["power_limit_w"] == 70.0 for x in rows)
    assert [x["sm_clock_locked_mhz"] for x in rows] == [None, 990]
    assert rows[1]["extras"]["sm_clock"] == {"label": "990", "target_mhz": 990}
    for free, slow in [(rows[0], rows[1])]:  # memory-bound decode at bs 1: less energy per token
        assert slow["joules_per_token"] < 0.75 * free["joules_per_token"], (free, slow)
        assert slow["speed_tok_s"] < free["speed_tok_s"] and slow["avg_power_watts"] < 0.5 * free["avg_power_watts"]
        assert slow["speed_tok_s"] > free["speed_tok_s"] * 990 / 2370  # it slows less than the clock
    sc = json.loads((run / "manifest.json").read_text())["sm_clocks"]
    assert sc["original_mhz"] is None and sc["restored"] is True and sc["targets_mhz"] == {"max": None, "990": 990}
    assert sc["enforced_mhz"] == {"max": None, "990": 990}
    rep = run_harness("report", "sweep", str(run))
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert "recipe per power cap and SM clock" in rep.stdout and "70 W, SM 990 MHz, batch size 1" in rep.stdout
    summary = json.loads((run / "reports" / "summary.json").read_text())
    assert [(c["power_limit_w"], c["sm_clock"]) for c in summary["caps"]] == [(70.0, "max"), (70.0, "990")]
    assert (run / "reports" / "joules_per_token_cap70w_clk990mhz.png").exists()
    v = run_harness("dataset", "validate", str(run), "--subset")  # a config once per cap and clock is no duplicate
    assert v.returncode == 0, v.stdout + v.stderr
    from policies.contract import load_dataset  # policies never pool clock passes either

    with pytest.raises(DataError, match="2 SM clocks") as info:
        load_dataset(run)
    assert "--sm-clock 990" in (info.value.fix or "") and len(load_dataset(run, sm_clock="max").rows) == 1


def _sweep(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        harness_cmd("sweep", *args), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _stop(proc: subprocess.Popen, sig: int) -> str:
    try:
        proc.send_signal(sig)
        return proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_kill9_leaves_the_lock_resume_keeps_the_original_and_sigterm_restores_it(tmp_path):
    """The user's own lock (1980 MHz) is the original: SIGKILL leaves the pass's 1410 locked; the resumed session
    keeps 1980 as the original (not the 1410 it finds) and puts it back when SIGTERM stops it."""
    run = tmp_path / "run"
    with twin_gpu() as gpu:
        TwinClockDevice(gpu.url).lock(1980)
        proc = _sweep(
            [
                "--engine",
                "twin",
                "--configs",
                "0:0:0,3:4:8",
                "--batch-sizes",
                "1",
                "--sm-clocks",
                "1410,max",
                "--twin-gpu",
                gpu.url,
                "--out",
                str(run),
                *SHORT,
            ]
        )
        wait_rows(run, 1, proc)
        _stop(proc, signal.SIGKILL)
        assert _locked(gpu) == 1410  # no cleanup ran: the first pass's lock is still set
        sc = json.loads((run / "manifest.json").read_text())["sm_clocks"]
        assert sc["original_mhz"] == 1980 and sc["restored"] is False
        proc = _sweep(["--resume", str(run), "--twin-gpu", gpu.url, "--plain"])
        wait_rows(run, 2, proc)
        err = _stop(proc, signal.SIGTERM)
        assert proc.returncode == 130, err
        assert _locked(gpu) == 1980
    sc = json.loads((run / "manifest.json").read_text())["sm_clocks"]
    assert sc["original_mhz"] == 1980 and sc["restored"] is True
    rows = read_lines(run / "rows.jsonl")
    assert rows[0]["cell_id"] == "clk1410mhz-r0-bs1-s0k0d0" and all(x["sm_clock_locked_mhz"] == 1410 for x in rows[:2])
