"""The check's phases. Each phase catches its own errors into ``findings`` (exact NVML error text) and the JSON is
rewritten after every phase, so one failure never loses the others' results."""

from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from harness.gpu.nvml_control import NvmlCallError, NvmlControl, pick_clocks
from harness.gpucheck.argv_check import launch_lines
from harness.gpucheck.guard import RestoreGuard
from harness.gpucheck.loads import Loads
from harness.gpucheck.record import Recorder, SmiPoller, window

BASE_BUDGET_S = 240.0
DURATIONS = {
    "idle": 12.0,
    "ramp": 20.0,
    "sustained": 25.0,
    "decode": 10.0,
    "cap": 20.0,
    "clock_matmul": 10.0,
    "clock_decode": 8.0,
}


UNTIMED = ("setup", "twin", "launch_argv")  # phases that run even past the budget (no GPU load, about a second)


def log(msg: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Check:
    """State shared by the phases: the project's probe, the recorder, the load, the guard and the JSON."""

    def __init__(self, out_path: Path, gpu_index: int, budget_s: float, force_cpu: bool, rate_hz: float = 10.0,
                 only: tuple[str, ...] = (), phase_hook: str | None = None, read_only: bool = False, install_guard: bool = True) -> None:  # fmt: skip
        from harness.telemetry.probes import NvmlProbe

        self.out_path, self.gpu_index = out_path, gpu_index
        self.scale = max(0.05, budget_s / BASE_BUDGET_S)
        self.out: dict[str, Any] = {"schema": 1, "started_wall_ns": time.time_ns(), "budget_s": budget_s, "phases": {}, "windows": {},
                                    "findings": [], "restores": [], "read_only": read_only}  # fmt: skip
        self.guard = RestoreGuard(log)
        if install_guard:  # atexit + SIGINT/SIGTERM handlers (off for an in-process test run)
            self.guard.install()
        self.read_only = read_only
        self.probe = NvmlProbe(gpu_index)
        self.ctl = NvmlControl(self.probe._nv, self.probe.handle, read_only=read_only)
        self.out["identity"] = self.probe.identity()
        self.target_uuid = str(self.out["identity"].get("uuid"))
        self.force_cpu = force_cpu
        self.only, self.phase_hook = only, phase_hook
        self.loads: Loads | None = None
        self.rec = Recorder(self.probe, rate_hz)
        self.smi = SmiPoller(gpu_index)
        self.deadline = time.monotonic() + budget_s * 1.1 + 30.0  # past it, load phases are skipped (findings say so)

    def secs(self, key: str) -> float:
        return DURATIONS[key] * self.scale

    def finding(self, phase: str, message: str) -> None:
        log(f"FINDING [{phase}] {message}")
        self.out["findings"].append({"phase": phase, "message": message})

    def save(self) -> None:
        self.out["restores"] = self.guard.results
        self.out["period"] = self.rec.period_stats()
        self.out["smi"] = {"error": self.smi.error, "fields": self.smi.fields, "samples": len(self.smi.samples)}
        tmp = self.out_path.with_name(self.out_path.name + ".tmp")
        tmp.write_text(json.dumps(self.out, indent=1, default=str))
        os.replace(tmp, self.out_path)

    def run(self, name: str, fn: Callable[[dict[str, Any]], object]) -> None:
        """Run one phase ``fn(record)``; its errors become findings; the JSON is saved after it, whatever happened.
        Past the time budget a load phase is skipped (a finding says so)."""
        rec: dict[str, Any] = {"status": "running"}
        self.out["phases"][name] = rec
        t0 = time.monotonic()
        if self.only and name != "setup" and name.split("_b")[0] not in self.only and name not in self.only:
            rec["status"] = "not selected"
            return
        if name not in UNTIMED and t0 > self.deadline:
            rec["status"] = "skipped"
            self.finding(name, f"skipped: the check is past its time budget ({self.out['budget_s']:g} s)")
            return
        log(f"phase {name}: start")
        try:
            if self.phase_hook:
                subprocess.run([*shlex.split(self.phase_hook), name], check=True, timeout=30)
            fn(rec)
            rec["status"] = "done"
        except NvmlCallError as exc:
            rec.update(status="error", error=str(exc))
            self.finding(name, f"NVML refused: {exc}")
        except Exception as exc:  # noqa: BLE001 - one phase's failure must not lose the others
            rec.update(status="error", error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(limit=4))
            self.finding(name, f"{type(exc).__name__}: {exc}")
        finally:
            rec["seconds"] = round(time.monotonic() - t0, 2)
            log(f"phase {name}: {rec['status']} in {rec['seconds']} s")
            self.save()

    def wait_past(self, t_ns: int, smi: bool = True, limit_s: float = 3.0) -> None:
        """Until the probe (and nvidia-smi, with ``smi``) has a sample after ``t_ns`` (to bracket a window's end), at most
        ``limit_s``."""
        stop = time.monotonic() + limit_s

        def after(samples: list[dict[str, Any]]) -> bool:
            return bool(samples) and samples[-1]["t_wall_ns"] >= t_ns

        while time.monotonic() < stop and not (
            after(self.rec.records) and (not smi or self.smi.error or not self.smi.exe or after(self.smi.samples))
        ):
            time.sleep(0.02)

    def measure(self, name: str, fn: Any, *args: Any) -> dict[str, Any]:
        """Run a load, then record its window (with the load's own result) under ``name``. The window starts after a
        fresh sample (what the phase hook or the previous phase changed is in force at the sample before it)."""
        self.wait_past(time.time_ns(), smi=False)
        t0 = time.time_ns()
        res = fn(*args)
        t1 = time.time_ns()
        self.wait_past(t1)
        w = window(self.rec.records, self.smi.samples, t0, t1)
        if res is not None and hasattr(res, "as_dict"):
            w["load"] = res.as_dict()
            if w.get("energy_counter_j") is not None and res.steps:
                w["energy_per_step_j"] = round(w["energy_counter_j"] / res.steps, 6)
        w["t0_ns"], w["t1_ns"] = t0, t1
        self.out["windows"][name] = w
        log(
            f"window {name}: {w.get('avg_power_w')} W avg, counter {w.get('energy_counter_j')} J, "
            f"integral err {w.get('err_integral_vs_counter')}, smi err {w.get('err_smi_power_draw_vs_counter')}"
        )
        return w


def run_all(chk: Check) -> None:
    """Every phase in order; the guard restores whatever is still changed at the end."""
    chk.run("setup", lambda rec: setup(chk, rec))
    loads = chk.loads
    if loads is None:
        return
    out = chk.out
    chk.run("uuid", lambda rec: out.update(uuid_map=uuid_map(chk)))
    chk.run("idle", lambda rec: chk.measure("idle", time.sleep, chk.secs("idle")))
    chk.run("ramp", lambda rec: ramp(chk, loads))
    chk.run("sustained", lambda rec: chk.measure("sustained", loads.matmul, chk.secs("sustained")))
    for batch in (1, 16):
        chk.run(f"decode_b{batch}", functools.partial(decode, chk, loads, batch))
    chk.run("power_cap", lambda rec: power_cap(chk, rec))
    chk.run("sm_clocks", lambda rec: sm_clocks(chk, rec))
    chk.guard.restore_all()
    chk.run("twin", lambda rec: out.update(twin=twin(chk)))
    chk.run("launch_argv", lambda rec: out.update(launch_argv=launch_lines()))


def decode(chk: Check, loads: Loads, batch: int, rec: dict[str, Any]) -> None:
    chk.measure(f"decode_b{batch}", loads.decode, chk.secs("decode"), batch)


def load_ordinal(chk: Check) -> int:
    """The CUDA ordinal of the GPU the probe watches (NVML's index is not CUDA's): without CUDA_VISIBLE_DEVICES the
    process is pinned to that GPU's UUID before torch starts CUDA, so it is cuda:0; with it, its place in CUDA's
    order (``harness.gpu.identity``), or a stop naming both when CUDA cannot see it."""
    from harness.core.errors import UsageError
    from harness.gpu.identity import list_gpus, visible_gpus

    if chk.force_cpu:
        return 0
    if os.environ.get("CUDA_VISIBLE_DEVICES") is None:
        os.environ["CUDA_VISIBLE_DEVICES"] = chk.target_uuid
        return 0
    shown = [g.uuid for g in visible_gpus(os.environ, list_gpus(chk.probe._nv))]
    if chk.target_uuid not in shown:
        raise UsageError(
            f"NVML GPU {chk.gpu_index} ({chk.target_uuid}) is not visible to CUDA with "
            f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']}: the load would heat another GPU",
            fix="unset CUDA_VISIBLE_DEVICES (the check pins the GPU it probes) or pass the --gpu-index it shows",
        )
    return shown.index(chk.target_uuid)


def setup(chk: Check, rec: dict[str, Any]) -> None:
    chk.rec.start()
    chk.smi.start()
    chk.loads = Loads(load_ordinal(chk), force_cpu=chk.force_cpu)
    rec["load_device"] = chk.loads.name
    if chk.loads.cuda:  # CUDA's own word on which GPU the load runs: it must be the one NVML watches
        got = "GPU-" + str(chk.loads.torch.cuda.get_device_properties(chk.loads.device).uuid)
        rec["load_gpu_uuid"] = got
        if got != chk.target_uuid:
            chk.finding("setup", f"the load runs on {got} but NVML watches {chk.target_uuid}: energy of another GPU")
    rec["weights_gb"] = round(chk.loads.weight_bytes / 1e9, 3)
    rec["limits"] = chk.out["limits"] = chk.ctl.limits()
    rec["clocks"] = chk.out["clocks"] = chk.ctl.clocks()
    print("READY", flush=True)  # tests synchronise on this line (the GPU may now be changed)


def ramp(chk: Check, loads: Loads) -> None:
    chk.wait_past(time.time_ns(), smi=False)
    t0 = time.time_ns()
    levels = loads.ramp(chk.secs("ramp"))
    t1 = time.time_ns()
    chk.wait_past(t1)
    chk.out["windows"]["ramp"] = {**window(chk.rec.records, chk.smi.samples, t0, t1), "t0_ns": t0, "t1_ns": t1,
                                  "duty_levels": [round(d, 2) for _, _, d in levels]}  # fmt: skip


def uuid_map(chk: Check) -> dict[str, Any]:
    """torch's device UUID vs NVML's, here and in a child under ``CUDA_VISIBLE_DEVICES=<NVML UUID>``."""
    nv = chk.probe._nv
    nvml = {
        i: chk.probe._call("uuid", "nvmlDeviceGetUUID", nv.nvmlDeviceGetHandleByIndex(i), errors=[])
        for i in range(nv.nvmlDeviceGetCount())
    }
    out: dict[str, Any] = {
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "nvml_uuids": nvml,
        "gpu_index": chk.gpu_index,
    }
    assert chk.loads is not None
    if not chk.loads.cuda:
        out["torch"] = "no CUDA device (stand-in run): torch UUID not available"
        return out
    import torch

    tu = "GPU-" + str(torch.cuda.get_device_properties(0).uuid)
    out["torch_uuid_cuda0"] = tu
    out["torch_cuda0_is_nvml_index"] = [i for i, u in nvml.items() if u == tu]
    code = "import torch;print('GPU-'+str(torch.cuda.get_device_properties(0).uuid), torch.cuda.device_count())"
    target = nvml.get(chk.gpu_index)
    try:
        r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "CUDA_VISIBLE_DEVICES": str(target)}, capture_output=True, text=True,
                           timeout=max(20.0, 60 * chk.scale))  # fmt: skip
        out["child_cuda_visible_devices"] = target
        out["child_torch_uuid_cuda0"], out["child_device_count"] = (r.stdout.split() + [None, None])[:2]
        out["child_error"] = r.stderr.strip()[-300:] if r.returncode else None
    except subprocess.TimeoutExpired:
        out["child_error"] = "child timed out"
    return out


def power_cap(chk: Check, rec: dict[str, Any]) -> None:
    lim = chk.ctl.limits()
    rec["before"] = lim
    sustained = chk.out["windows"].get("sustained", {}).get("avg_power_w")
    original = lim.get("management_w")
    if original is None:
        raise NvmlCallError(
            "nvmlDeviceGetPowerManagementLimit: unreadable, so a cap could not be restored; not setting one"
        )
    lo, default = lim.get("min_w") or 0.0, lim.get("default_w") or original
    target = round(max(lo, min(0.6 * default, 0.7 * sustained if sustained else 0.6 * default)))
    rec["target_w"] = target
    if chk.read_only:
        rec["read_only"] = "read-only: not attempted (the limits above were read; nothing was set)"
        return
    chk.guard.push("power_limit", lambda: _restore_limit(chk, original))
    try:
        chk.ctl.set_limit(target)
    except NvmlCallError as exc:
        chk.guard.discard("power_limit")  # nothing was changed
        rec["refused"] = str(exc)
        chk.finding("power_cap", f"setting the power limit to {target} W was refused: {exc}")
        return
    rec["enforced_after_set_w"] = chk.ctl.limits().get("enforced_w")
    log(f"power limit set to {target} W (enforced {rec['enforced_after_set_w']} W)")
    w = chk.measure("capped_matmul", chk.loads.matmul if chk.loads else time.sleep, chk.secs("cap"))
    rec["window"] = "capped_matmul"
    chk.guard.pop("power_limit")
    rec["after_restore"] = chk.ctl.limits()
    rec["follows_cap"] = w.get("avg_power_w") is not None and w["avg_power_w"] <= target * 1.05


def _restore_limit(chk: Check, watts: float) -> str:
    chk.ctl.set_limit(watts)
    return f"power limit {watts:g} W (enforced now {chk.ctl.limits().get('enforced_w')} W)"


def sm_clocks(chk: Check, rec: dict[str, Any]) -> None:
    clocks = chk.out.get("clocks") or chk.ctl.clocks()
    picks = pick_clocks(clocks.get("sm_mhz") or [], clocks.get("max_sm_mhz"))
    rec["picked_mhz"] = picks
    if not picks:
        chk.finding("sm_clocks", f"no supported SM clocks reported: {clocks.get('errors')}")
        return
    assert chk.loads is not None
    if chk.read_only:
        rec["read_only"] = "read-only: not attempted (the supported clocks were read; nothing was locked)"
        return
    chk.guard.push("sm_clocks", lambda: _reset_clocks(chk))
    for mhz in picks:
        try:
            chk.ctl.lock_sm(mhz)
        except NvmlCallError as exc:
            (chk.guard.pop if mhz != picks[0] else chk.guard.discard)(
                "sm_clocks"
            )  # unlock only if an earlier lock held
            rec["refused"] = str(exc)
            chk.finding("sm_clocks", f"locking SM clocks at {mhz} MHz was refused: {exc}")
            return
        log(f"SM clocks locked at {mhz} MHz")
        chk.measure(f"clock{mhz}_matmul", chk.loads.matmul, chk.secs("clock_matmul"))
        chk.measure(f"clock{mhz}_decode_b1", chk.loads.decode, chk.secs("clock_decode"), 1)
    chk.guard.pop("sm_clocks")


def _reset_clocks(chk: Check) -> str:
    chk.ctl.reset_sm()
    return "SM clocks unlocked (nvmlDeviceResetGpuLockedClocks)"


def twin(chk: Check) -> dict[str, Any]:
    from harness.gpucheck.twin_replay import derive_params, replay, validate_with_pydantic

    ws = chk.out["windows"]
    idle, sus = ws.get("idle", {}), ws.get("sustained", {})
    if idle.get("avg_power_w") is None or sus.get("avg_power_w") is None:
        return {"error": "idle or sustained window missing: nothing to derive a profile from"}
    clocks = [(int(k[5:-7]), w) for k, w in ws.items() if k.startswith("clock") and k.endswith("_matmul")]
    gamma = None
    if len(clocks) == 2:
        import math

        (f1, w1), (f2, w2) = sorted(clocks, reverse=True)
        d1, d2 = (w1["avg_power_w"] or 0) - idle["avg_power_w"], (w2["avg_power_w"] or 0) - idle["avg_power_w"]
        if d1 > 0 and d2 > 0 and f1 != f2:
            gamma = math.log(d1 / d2) / math.log(f1 / f2)
    temps = (idle["avg_temp_c"], sus["avg_temp_c"]) if idle.get("avg_temp_c") and sus.get("avg_temp_c") else None
    lim = chk.out.get("limits") or {}
    mem_total = next((r["memory_total_mb"] for r in reversed(chk.rec.records) if r.get("memory_total_mb")), None)
    params = derive_params(idle["avg_power_w"], sus["avg_power_w"], lim, mem_total, temps, gamma,
                           (chk.out.get("clocks") or {}).get("max_sm_mhz"), str(chk.out["identity"].get("name")))  # fmt: skip
    default = lim.get("default_w") or lim.get("enforced_w") or 700.0
    segs = [(ws[k]["t0_ns"], ws[k]["t1_ns"], default) for k in ("idle", "ramp", "sustained") if k in ws]
    cap_target = chk.out["phases"].get("power_cap", {}).get("target_w")
    if "capped_matmul" in ws and cap_target:
        segs.append((ws["capped_matmul"]["t0_ns"], ws["capped_matmul"]["t1_ns"], float(cap_target)))
    res = replay(params, chk.rec.records, segs)
    return {
        "profile_device_params": params,
        "dvfs_exponent_fit": gamma,
        "replay": res,
        "validation": validate_with_pydantic(params),
    }
