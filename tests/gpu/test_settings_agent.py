"""The GPU settings agent (``harness gpu-settings serve``) as a real process over real nvidia-ml-py and the NVML shim:
a client that never calls an NVML setter itself sets and restores caps and clocks through it (the sweep's own
controllers over ``--gpu-settings-url``); the key guards it; a refusal names NVML's error and the fix; the agent's
exit puts back what it changed. Why (issue 46 item 1): a sweep run as root left root-owned caches behind."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from _nvml_shim_helpers import ShimScript, call_count, load_in_process, session_shim

from harness.core.errors import ServiceUnavailableError
from harness.gpu.device import KEY_ENV
from harness.gpu.power_cap import NvmlCapDevice, PowerCapController, PowerCapError, cap_device
from harness.gpu.sm_clocks import SmClockController, SmClockError, clock_device

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
KEY = "k" * 32
UUID = "GPU-5h1m0000-0000-0000-0000-000000000001"


@pytest.fixture(scope="module")
def shim_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return session_shim(tmp_path_factory)


@pytest.fixture(scope="module")
def shim_lib(shim_dir: Path):
    return load_in_process(shim_dir)


@pytest.fixture
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shim_lib) -> ShimScript:
    s = ShimScript(tmp_path / "nvml.script", limit_min_mw=200000, limit_max_mw=700000)
    monkeypatch.setenv("NVML_SHIM_SCRIPT", str(s.path))
    return s


def _start_agent(script: ShimScript, shim_dir: Path, key: str | None = KEY) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, **script.env(shim_dir)}
    env.pop(KEY_ENV, None)
    if key is not None:
        env[KEY_ENV] = key
    p = subprocess.Popen(
        [sys.executable, "-m", "harness", "gpu-settings", "serve", "--port", "0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None
    ready, _, _ = select.select([p.stdout], [], [], 60)
    line = p.stdout.readline() if ready else ""
    if "listening on " not in line:
        p.kill()
        raise AssertionError(f"agent did not start: {line!r} {p.stderr.read() if p.stderr else ''}")
    return p, line.split("listening on ")[1].split()[0]


def _stop(p: subprocess.Popen, sig: int = signal.SIGTERM) -> str:
    p.send_signal(sig)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    return out


def test_the_agent_refuses_to_start_without_a_key(script: ShimScript, shim_dir: Path) -> None:
    for key in (None, "short"):
        env = {**os.environ, **script.env(shim_dir)}
        env.pop(KEY_ENV, None)
        if key:
            env[KEY_ENV] = key
        r = subprocess.run(
            [sys.executable, "-m", "harness", "gpu-settings", "serve", "--port", "0"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2 and KEY_ENV in r.stderr and "fix:" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr


def test_a_client_without_nvml_setters_sets_and_restores_through_the_agent(
    script: ShimScript, shim_dir: Path, shim_lib, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent, url = _start_agent(script, shim_dir)
    monkeypatch.setenv(KEY_ENV, KEY)
    reader = NvmlCapDevice(UUID)  # this process reads NVML (no root needed) and never sets
    sets_before = call_count(shim_lib, "nvmlDeviceSetPowerManagementLimit")
    try:
        state: dict = {}
        cap = PowerCapController(cap_device(None, UUID, url), "set", state)
        cap.begin(["300", "75%"])
        assert state["power_cap"]["original_w"] == 650.0 and state["power_cap"]["limits"]["max_w"] == 700.0
        cap.apply("300")
        assert reader.limits().current_w == 300.0 and reader.limits().enforced_w == 300.0
        cap.apply("75%")  # 75 % of the 700 W default
        assert reader.limits().current_w == 525.0
        clocks: dict = {}
        clk = SmClockController(clock_device(None, UUID, url), "set", clocks)
        clk.begin(["1410", "max"])
        clk.apply("1410")
        assert Path(f"{script.path}.clocks").exists()  # the shim's lock, set by the agent's process
        assert clocks["sm_clocks"]["clocks"]["original_source"].startswith("assumed unlocked")
        # what the sweep refuses before any cell, through the agent as through NVML
        with pytest.raises(SmClockError, match="not one this GPU supports"):
            clk.begin(["1411"])
        assert clk.restore() == "SM clocks unlocked" and not Path(f"{script.path}.clocks").exists()
        assert cap.restore() == "power limit restored to 650 W" and reader.limits().current_w == 650.0
        assert call_count(shim_lib, "nvmlDeviceSetPowerManagementLimit") == sets_before  # never set here
        # hostile bodies and a wrong key: 4xx naming the problem, nothing changed
        r = httpx.post(
            f"{url}/gpus/{UUID}/v1/power_limit",
            json={"power_limit_w": "lots"},
            headers={"Authorization": f"Bearer {KEY}"},
        )
        assert r.status_code == 400 and "power_limit_w" in r.json()["error"]["message"]
        r = httpx.post(f"{url}/gpus/{UUID}/v1/power_limit", content=b"\xff", headers={"Authorization": f"Bearer {KEY}"})
        assert r.status_code == 400
        monkeypatch.setenv(KEY_ENV, "x" * 32)
        with pytest.raises(PowerCapError, match="refused the key") as exc:
            cap_device(None, UUID, url).set_limit(400)
        assert KEY_ENV in (exc.value.fix or "")
        monkeypatch.setenv(KEY_ENV, KEY)
        with pytest.raises(PowerCapError, match="outside this GPU's limits"):
            PowerCapController(cap_device(None, UUID, url), "set", {}).begin(["900"])
        # a cap left set when the agent stops (its client killed) is put back by the agent's own exit
        cap_device(None, UUID, url).set_limit(250)
        clock_device(None, UUID, url).lock(1410)
        assert reader.limits().current_w == 250.0
        out = _stop(agent)
        assert "power limit back at 650 W" in out and "SM clocks unlocked" in out, out
        assert reader.limits().current_w == 650.0 and not Path(f"{script.path}.clocks").exists()
    finally:
        reader.close()
        if agent.poll() is None:
            agent.kill()
            agent.wait()


def test_an_agent_without_the_privilege_answers_403_with_the_fix(
    script: ShimScript, shim_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script.set({"root": 0})  # NVML_ERROR_NO_PERMISSION, as for a container without CAP_SYS_ADMIN
    agent, url = _start_agent(script, shim_dir)
    monkeypatch.setenv(KEY_ENV, KEY)
    try:
        with pytest.raises(PowerCapError, match="needs root") as exc:
            cap_device(None, UUID, url).set_limit(300)
        assert "CAP_SYS_ADMIN" in (exc.value.fix or "")
        with pytest.raises(ServiceUnavailableError, match="unreachable"):
            cap_device(None, UUID, "http://127.0.0.1:9").limits()
        monkeypatch.delenv(KEY_ENV)
        from harness.core.errors import UsageError

        with pytest.raises(UsageError, match=KEY_ENV):
            cap_device(None, UUID, url)
    finally:
        _stop(agent, signal.SIGINT)


def test_the_sweep_and_serve_refuse_the_agent_on_the_twin_or_without_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from harness.cli import main

    monkeypatch.delenv(KEY_ENV, raising=False)
    url = "http://127.0.0.1:18300"
    for argv, needle in (
        (["sweep", "--engine", "sglang", "--sglang-version", "0.5.23", "--gpu-settings-url", url], KEY_ENV),
        (["sweep", "--engine", "twin", "--gpu-settings-url", url], "the twin GPU takes its settings itself"),
        (["serve", "--engine", "sglang", "--picks", "1=0:0:0", "--gpu-settings-url", url], KEY_ENV),
        (
            ["sweep", "--engine", "sglang", "--sglang-version", "0.5.23", "--gpu-settings-url", "ftp://x"],
            "--gpu-settings-url",
        ),
    ):
        out_dir = tmp_path / "run"
        code = main([*argv, "--out", str(out_dir)])
        text = capsys.readouterr()
        said = text.out + text.err
        assert code == 2 and needle in said and "fix:" in said and "Traceback" not in said, (argv, said)
        assert not out_dir.exists(), argv
