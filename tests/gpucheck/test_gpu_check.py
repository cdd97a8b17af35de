"""The GPU proof kit (benchmarks/gpu_check.py) against the NVML shim (a gcc-built ``libnvidia-ml.so.1``), a
``nvidia-smi`` stand-in that reads the same shim, and the torch-CPU STAND-IN load: window errors, the restore of the
power limit and locked clocks on exit and on SIGTERM/SIGINT mid-run, the refused-permission finding, the verdicts and
the JSON schema. It proves the check's logic, not a GPU (docs/gpu_check.md)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import pytest
from _nvml_shim_helpers import ShimScript, call_count, load_in_process, session_shim

from harness.gpu.nvml_control import SET_CALLS
from harness.gpucheck.judge import cap_binds_verdict, verdicts
from harness.gpucheck.record import trapezoid_j, window

REPO = Path(__file__).resolve().parents[2]
SMI_STAND_IN = REPO / "tests" / "nvml_shim" / "nvidia_smi.py"
# the H200 seen by `run` (driver 580.159.04): limits 200..700 W, default 700 W; follow_limits makes power obey them
H200 = {"limit_enforced_mw": 700000, "limit_mgmt_mw": 700000, "limit_default_mw": 700000, "limit_min_mw": 200000,
        "limit_max_mw": 700000, "power_avg_mw": None, "power_usage_mw": None, "follow_limits": 1, "idle_power_mw": 80000,
        "power_mw": 80000, "util_gpu": 0, "clock_events": 0x1, "mem_total": 143771 << 20}  # fmt: skip


HOOK = """import os, sys
plan, path = {plan!r}, {script!r}
if sys.argv[1] in plan:
    mw, util = plan[sys.argv[1]]
    keep = [l for l in open(path) if l.split("=")[0].strip() not in ("power_mw", "util_gpu", "clock_events")]
    open(path + ".new", "w").write("".join(keep) + f"power_mw = {{mw}}\\nutil_gpu = {{util}}\\nclock_events = {{1 if mw <= 80000 else 4}}\\n")
    os.replace(path + ".new", path)
"""


class Lines:
    """The child's stdout lines, read by a thread; ``wait`` blocks until a line matches (a timeout only guards hangs)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.q: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        assert proc.stdout is not None
        out = proc.stdout
        threading.Thread(target=lambda: ([self.q.put(line) for line in out], self.q.put(None)), daemon=True).start()

    def wait(self, pred: Callable[[str], bool], timeout: float = 60.0) -> str:
        while True:
            line = self.q.get(timeout=timeout)
            if line is None:
                raise AssertionError("the check exited before the expected line:\n" + "".join(self.seen))
            self.seen.append(line)
            if pred(line):
                return line

    def rest(self) -> str:
        while (line := self.q.get(timeout=60.0)) is not None:
            self.seen.append(line)
        return "".join(self.seen)


@pytest.fixture(scope="module")
def shim_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return session_shim(tmp_path_factory)


@pytest.fixture
def env(tmp_path: Path, shim_dir: Path) -> tuple[ShimScript, dict[str, str]]:
    script = ShimScript(tmp_path / "nvml.script", **{k: v for k, v in H200.items() if v is not None})
    script.set({k: None for k, v in H200.items() if v is None})
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{SMI_STAND_IN}" "$@"\n')
    smi.chmod(0o755)
    e = {
        **os.environ,
        **script.env(shim_dir),
        "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONUNBUFFERED": "1",
        "PYTHON": sys.executable,
    }
    e.pop("OUT", None)
    return script, e


def start(env: dict[str, str], out: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(["bash", str(REPO / "benchmarks" / "gpu_check.sh"), str(out), "--cpu-stand-in", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)  # fmt: skip


def limit_file(script: ShimScript) -> int | None:
    p = Path(f"{script.path}.limit")
    return int(p.read_text().split()[0]) if p.exists() else None


def clocks_locked(script: ShimScript) -> bool:
    return Path(f"{script.path}.clocks").exists()


def test_window_energy_by_three_routes():
    s = 1_000_000_000
    # 100 W for 2 s, then 300 W: counter exact; samples every 0.5 s
    recs = [{"t_wall_ns": k * s // 2, "energy_mj": 1000.0 * (100 * min(k / 2, 2) + 300 * max(0, k / 2 - 2)),
             "power_w": 100.0 if k <= 4 else 300.0, "utilization_pct": 50.0, "clock_event_reasons": 0x4 if k > 4 else 0x1} for k in range(13)]  # fmt: skip
    smi = [
        {"t_wall_ns": r["t_wall_ns"], "power.draw": r["power_w"] * 1.1, "power.draw.instant": r["power_w"]}
        for r in recs
    ]
    w = window(recs, smi, s // 4, 5 * s + s // 4)
    assert w["energy_counter_j"] == pytest.approx(100 * 1.75 + 300 * 3.25)
    # the trapezoid smears the step at 2.0 s over the 2.0 -> 2.5 s interval: 50 J short of the counter, exactly
    assert w["energy_power_integral_j"] == pytest.approx(w["energy_counter_j"] - 50.0)
    assert w["err_integral_vs_counter"] == pytest.approx(-50.0 / w["energy_counter_j"], abs=1e-5)
    assert w["err_smi_power_draw_vs_counter"] == pytest.approx(
        (1.1 * (w["energy_counter_j"] - 50.0) - w["energy_counter_j"]) / w["energy_counter_j"], abs=1e-4
    )
    assert (
        w["clock_event_reasons_or"] == 0x5
        and w["samples"] == 10
        and w["avg_power_w"] == pytest.approx(w["energy_counter_j"] / 5.0)
    )
    assert (
        trapezoid_j([(0, 1.0)], 0, s) is None and window([], [], 0, s)["energy_counter_j"] is None
    )  # no bracket: None, never 0


def test_cap_binding_verdict():
    lim = {"min_w": 200.0, "default_w": 700.0, "enforced_w": 700.0}
    v = lambda p: cap_binds_verdict({"limits": lim, "windows": {"decode_b1": {"avg_power_w": p}}})  # noqa: E731
    assert v(150.0)["verdict"] == "never_binds" and v(150.0)["needs_sm_clocks"]
    assert v(150.0)["next"] == "harness sweep --sm-clocks max,1410,990 (docs/smclocks.md)" and "next" not in v(650.0)
    picked = cap_binds_verdict(
        {
            "limits": lim,
            "windows": {"decode_b1": {"avg_power_w": 150.0}},
            "phases": {"sm_clocks": {"picked_mhz": [1980, 1410]}},
        }
    )
    assert picked["next"].startswith("harness sweep --sm-clocks max,1410 ")
    assert v(300.0)["verdict"] == "binds_only_far_below_default" and v(300.0)["needs_sm_clocks"]
    assert v(650.0)["verdict"] == "binds" and not v(650.0)["needs_sm_clocks"]
    assert cap_binds_verdict({"limits": lim, "windows": {}})["verdict"] == "unknown"


def run_to_end(proc: subprocess.Popen[str], lines: Lines) -> str:
    text = lines.rest()
    assert proc.wait(timeout=60) == 0, text
    return text


def test_end_to_end_on_the_shim(tmp_path: Path, env: tuple[ShimScript, dict[str, str]]):
    script, e = env
    out = tmp_path / "out"
    # the power each phase draws (the shim does not see the CPU stand-in's load), set by the check's phase hook before
    # the phase starts (a sub-window power step would smear over one sample interval of a window only ~0.5 s long)
    plan = {"idle": (80000, 0), "ramp": (400000, 50), "sustained": (690000, 100), "decode_b1": (260000, 100),
            "decode_b16": (300000, 100), "power_cap": (690000, 100), "sm_clocks": (690000, 100)}  # fmt: skip
    hook = tmp_path / "hook.py"
    hook.write_text(HOOK.format(plan=plan, script=str(script.path)))
    proc = start(e, out, "--full", "--budget-s", "12", "--phase-hook", f"{sys.executable} {hook}")
    text = run_to_end(proc, Lines(proc))
    data = json.loads((out / "gpu_check.json").read_text())
    assert set(data) >= {
        "schema",
        "identity",
        "phases",
        "windows",
        "findings",
        "restores",
        "period",
        "smi",
        "limits",
        "clocks",
        "uuid_map",
        "twin",
        "launch_argv",
        "cap_binds_decode",
        "verdicts",
        "samples",
        "smi_samples",
        "wall_s",
    }
    assert data["findings"] == [] and all(p["status"] == "done" for p in data["phases"].values()), data["phases"]
    status = {r["check"]: r["status"] for r in data["verdicts"]}
    assert status["load"] == "WARN" and "STAND-IN" in text  # the stand-in says so in the table
    for name in ("idle", "sustained", "decode_b1"):
        assert status[f"energy[{name}]"] == "PASS" and data["windows"][name]["samples"] >= 3
        assert data["windows"][name]["energy_smi_power_draw_j"] is not None  # the nvidia-smi stand-in answered
    assert data["windows"]["sustained"]["avg_power_w"] == pytest.approx(690, rel=0.05)
    # the cap: 0.6 x 700 W = 420 W (below 0.7 x 690 W), enforced, power follows it, and the original is back
    pc = data["phases"]["power_cap"]
    assert pc["target_w"] == 420 and pc["enforced_after_set_w"] == 420.0 and pc["follows_cap"]
    assert status["power_cap_set"] == status["power_follows_cap"] == "PASS" and limit_file(script) == 700000
    # two locked clocks (1980, nearest 0.71 x 1980 = 1410), lower power and energy per matmul at the lower one, unlocked after
    assert data["phases"]["sm_clocks"]["picked_mhz"] == [1980, 1410] and not clocks_locked(script)
    hi, lo = data["windows"]["clock1980_matmul"], data["windows"]["clock1410_matmul"]
    assert lo["avg_sm_clock_mhz"] == 1410 and lo["avg_power_w"] < hi["avg_power_w"]
    assert (
        data["cap_binds_decode"]["verdict"] == "binds_only_far_below_default" and status["cap_binds_decode"] == "WARN"
    )
    assert {r["name"] for r in data["restores"]} == {"power_limit", "sm_clocks"} and all(
        r["ok"] == "true" for r in data["restores"]
    )
    tw = data["twin"]
    assert tw["profile_device_params"]["idle_power_w"] == pytest.approx(80, rel=0.05) and tw["replay"]["rms_w"] >= 0
    assert tw["dvfs_exponent_fit"] == pytest.approx(2.0, rel=0.05)  # the shim scales dynamic power by (f/fmax)^2
    assert len(data["launch_argv"]["argv"]) == 19 and "sglang itself could not be run" in data["launch_argv"]["note"]
    assert "check " in text and "PASS" in text  # the plain-text table


@pytest.mark.parametrize(("sig", "phase", "ready", "code"), [
    (signal.SIGTERM, "power_cap", "power limit set to", 143),
    (signal.SIGINT, "sm_clocks", "SM clocks locked at", 130),
])  # fmt: skip
def test_signal_mid_run_restores(
    tmp_path: Path, env: tuple[ShimScript, dict[str, str]], sig: int, phase: str, ready: str, code: int
):
    script, e = env
    out = tmp_path / "out"
    proc = start(
        e, out, "--full", "--budget-s", "120", "--only", phase
    )  # a 10 s load phase: the signal lands inside it
    lines = Lines(proc)
    lines.wait(lambda line: ready in line)
    assert limit_file(script) == 420000 if phase == "power_cap" else clocks_locked(script)  # the change is in force
    proc.send_signal(sig)
    text = lines.rest()
    assert proc.wait(timeout=30) == code, text
    assert limit_file(script) == (700000 if phase == "power_cap" else None) and not clocks_locked(script)  # restored
    data = json.loads((out / "gpu_check.json").read_text())
    assert [r["ok"] for r in data["restores"]] == ["true"] and "restore[" in text and "interrupted" in text


def test_refused_permission_is_a_finding(tmp_path: Path, env: tuple[ShimScript, dict[str, str]]):
    script, e = env
    script.set({"root": 0})
    out = tmp_path / "out"
    proc = start(e, out, "--full", "--budget-s", "12", "--only", "power_cap,sm_clocks")
    run_to_end(proc, Lines(proc))
    data: dict[str, Any] = json.loads((out / "gpu_check.json").read_text())
    msgs = [f["message"] for f in data["findings"]]
    assert any("nvmlDeviceSetPowerManagementLimit: Insufficient Permissions" in m for m in msgs), msgs
    assert any("nvmlDeviceSetGpuLockedClocks: Insufficient Permissions" in m for m in msgs), msgs
    status = {r["check"]: r for r in verdicts(data)}
    assert (
        status["power_cap_set"]["status"] == "WARN" and "Insufficient Permissions" in status["power_cap_set"]["detail"]
    )
    assert status["sm_clock_lock"]["status"] == "WARN" and limit_file(script) is None and data["restores"] == []


def test_the_default_changes_nothing_and_only_full_sets(tmp_path: Path, env: tuple[ShimScript, dict[str, str]]):
    """A borrowed GPU must not be changed by accident: without --full no set call is made (the shim's limit and clock
    files stay absent); GPU_CHECK_READ_ONLY=1 wins over --full; --full with --read-only is a usage error."""
    script, e = env
    proc = start(e, tmp_path / "default", "--budget-s", "12", "--only", "power_cap,sm_clocks")
    text = run_to_end(proc, Lines(proc))
    status = {r["check"]: r for r in json.loads((tmp_path / "default" / "gpu_check.json").read_text())["verdicts"]}
    assert (
        "READ-ONLY" in text
        and status["power_cap_set"]["status"] == "SKIP"
        and status["sm_clock_lock"]["status"] == "SKIP"
    )
    assert limit_file(script) is None and not clocks_locked(script)
    proc = start(
        {**e, "GPU_CHECK_READ_ONLY": "1"}, tmp_path / "env", "--full", "--budget-s", "12", "--only", "power_cap"
    )
    assert "READ-ONLY" in run_to_end(proc, Lines(proc)) and limit_file(script) is None
    both = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu_check.sh"), "--full", str(tmp_path / "x"), "--read-only"],
        env=e,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def test_check_imports_without_pydantic():
    """The machine with the GPU has no pydantic: the check's import path must not need it (blocked here)."""
    code = (
        "import sys; sys.modules['pydantic'] = None; sys.path.insert(0, '.'); import harness.gpucheck.phases, "
        "harness.gpucheck.twin_replay, harness.gpucheck.judge, harness.telemetry.probes; "
        "from harness.gpucheck.argv_check import launch_lines; print(launch_lines()['error'])"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "not importable here" in r.stdout, r.stderr


@pytest.mark.parametrize("read_only", [True, False])
def test_read_only_makes_no_set_call(tmp_path: Path, env: tuple[ShimScript, dict[str, str]], shim_dir: Path,
                                     monkeypatch: pytest.MonkeyPatch, read_only: bool):  # fmt: skip
    """In this process (the shim's call counters are per process): read-only reads every limit and clock and sets
    none; the same run in full mode calls every set entry point (so a zero count means something)."""
    from harness.gpucheck.phases import Check, run_all

    script, e = env
    script.set({"power_mw": 300000, "util_gpu": 100})
    lib = load_in_process(shim_dir)
    for k in ("NVML_SHIM_SCRIPT", "PATH"):
        monkeypatch.setenv(k, e[k])
    before = {f: call_count(lib, f) for f in (*SET_CALLS, "nvmlDeviceGetSupportedGraphicsClocks")}
    chk = Check(tmp_path / "gpu_check.json", 0, 4.0, force_cpu=True, only=("power_cap", "sm_clocks") if read_only else ("decode", "power_cap", "sm_clocks"), read_only=read_only,
                install_guard=False)  # fmt: skip
    try:
        run_all(chk)
    finally:
        chk.guard.restore_all()
        chk.rec.stop()
        chk.smi.stop()
        chk.probe.close()
    sets = {f: call_count(lib, f) - before[f] for f in SET_CALLS}
    assert call_count(lib, "nvmlDeviceGetSupportedGraphicsClocks") > before["nvmlDeviceGetSupportedGraphicsClocks"]
    assert chk.out["limits"]["min_w"] == 200.0 and chk.out["clocks"]["sm_mhz"][0] == 1980  # read in both modes
    status = {r["check"]: r for r in verdicts(chk.out)}
    if read_only:
        assert sets == dict.fromkeys(SET_CALLS, 0) and chk.out["findings"] == []
        assert status["power_cap_set"]["status"] == status["sm_clock_lock"]["status"] == "SKIP"
        assert status["power_cap_set"]["figure"] == "read-only: not attempted" and limit_file(script) is None
    else:
        assert status["cap_binds_decode"]["figure"] == "binds_only_far_below_default"  # from decode power vs the limits
        assert all(n >= 1 for n in sets.values()), sets
        assert (
            status["power_cap_set"]["status"] == "PASS" and limit_file(script) == 700000 and not clocks_locked(script)
        )


@pytest.mark.parametrize(
    ("installed", "version", "graph_flag"),
    [("0.5.23", "0.5.23", "--cuda-graph-max-bs-decode"), (None, "0.5.2", "--cuda-graph-max-bs"),
     ("0.4.6.post4", "0.5.2", "--cuda-graph-max-bs")],
)  # fmt: skip
def test_the_argv_check_judges_the_argv_the_sweep_launches(
    monkeypatch: pytest.MonkeyPatch, installed: str | None, version: str, graph_flag: str
) -> None:
    """Issue 46 (4): the kit judged 0.5.2's flags from a hand-built spec whatever sglang was installed. It now builds
    the sweep's own spec for the installed version (as ``--sglang-version auto`` finds it), else the default's."""
    from harness.engine.sglang_argv import build_argv
    from harness.gpucheck import argv_check
    from harness.grid import ACTIONS
    from harness.runs.options import SweepOptions

    monkeypatch.setattr(argv_check, "installed_sglang", lambda: installed)
    out = argv_check.launch_lines()
    assert out["sglang_version_flags"] == version
    source = {"0.5.23": "installed", None: "the default image's"}.get(installed, "the default image's (sglang 0.4.6")
    assert out["sglang_version_source"].startswith(source), out["sglang_version_source"]
    sweep = SweepOptions(engine="sglang", sglang_version=version).engine_spec()
    assert out["argv"] == [build_argv(sweep, c, 16, 0.65, 30000) for c in ACTIONS]
    assert all(graph_flag in argv and "--enable-metrics" in argv for argv in out["argv"])
