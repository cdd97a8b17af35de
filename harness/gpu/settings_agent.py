"""The GPU settings agent: the one privileged process that sets power limits and locks SM clocks, so nothing else
has to run as root.

NVML's setters need root (and, in a container, CAP_SYS_ADMIN). A sweep run as root writes its run folder, the
model cache and the engines' JIT caches (sglang 0.5.23's flashinfer workspace and locks under ``~/.cache``) as root,
and a later non-root sweep can then neither build a kernel nor download a model. The agent holds the privilege
instead: it serves, per GPU (``/gpus/{gpu}``: a UUID or an NVML index), the same setting routes as the twin GPU
device (``GET``/``POST /v1/power_limit``, ``GET``/``POST``/``DELETE /v1/clocks``), so the sweep's and serve's
``--gpu-settings-url`` client is the twin's client (``harness.gpu.device.TwinSettingDevice``). It writes no file.

Every route but ``/health`` needs the key (``HARNESS_SETTINGS_KEY``, a bearer token, as sglang's and vLLM's
``--api-key``): whoever can reach the agent can change the board. On exit (SIGTERM, SIGINT, any return) the agent
puts back every limit it changed to the one it found before its first set, and unlocks every clock it locked.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from harness.core.httpserve import BadRequest, Request, Response, Router, error
from harness.gpu.device import KEY_ENV
from harness.gpu.pass_setting import DeviceSettingError
from harness.gpu.power_cap import NvmlCapDevice
from harness.gpu.sm_clocks import NvmlClockDevice, apply_clock

__all__ = ["KEY_ENV", "SettingsAgent", "agent_router"]


class _Gpu:
    """One GPU the agent owns: its NVML cap and clock devices and the limit it found (to put back on exit); the
    clock device itself knows the lock it set (``locked_mhz``)."""

    def __init__(self, gpu: int | str) -> None:
        self.cap = NvmlCapDevice(gpu)
        self.clock = NvmlClockDevice(gpu)
        self.original_limit_w: float | None = None
        self.limit_changed = False


class SettingsAgent:
    """The GPUs' settings behind one lock; ``restore_all`` undoes every change this agent made."""

    def __init__(self) -> None:
        self._gpus: dict[str, _Gpu] = {}
        self._lock = threading.Lock()

    def _gpu(self, key: str) -> _Gpu:
        gpu = self._gpus.get(key)
        if gpu is None:
            gpu = self._gpus[key] = _Gpu(int(key) if key.isdigit() else key)
        return gpu

    def power_limit(self, key: str) -> dict[str, Any]:
        with self._lock:
            return _limit_body(self._gpu(key))

    def set_power_limit(self, key: str, watts: float) -> dict[str, Any]:
        with self._lock:
            gpu = self._gpu(key)
            if not gpu.limit_changed:
                gpu.original_limit_w = gpu.cap.limits().current_w
            gpu.cap.set_limit(watts)
            gpu.limit_changed = True
            return _limit_body(gpu)

    def clocks(self, key: str) -> dict[str, Any]:
        with self._lock:
            return _clock_body(self._gpu(key))

    def lock_clock(self, key: str, mhz: int | None) -> dict[str, Any]:
        with self._lock:
            gpu = self._gpu(key)
            apply_clock(gpu.clock, mhz)
            return _clock_body(gpu)

    def restore_all(self) -> list[str]:
        """Put back every limit changed and unlock every clock locked; one line per GPU (errors included)."""
        lines = []
        with self._lock:
            for key, gpu in self._gpus.items():
                done = []
                try:
                    if gpu.limit_changed and gpu.original_limit_w is not None:
                        gpu.cap.set_limit(gpu.original_limit_w)
                        gpu.limit_changed = False
                        done.append(f"power limit back at {gpu.original_limit_w:g} W")
                    if gpu.clock.locked_mhz is not None:
                        gpu.clock.unlock()
                        done.append("SM clocks unlocked")
                except DeviceSettingError as exc:
                    done.append(f"could not restore: {exc.message} ({exc.fix})")
                if done:
                    lines.append(f"GPU {key}: " + "; ".join(done))
        return lines

    def close(self) -> None:
        for gpu in self._gpus.values():
            gpu.cap.close()
            gpu.clock.close()


def _limit_body(gpu: _Gpu) -> dict[str, Any]:
    """The twin device's ``/v1/power_limit`` answer, from NVML (watts)."""
    lim = gpu.cap.limits()
    return {
        "power_limit_w": lim.current_w,
        "power_limit_enforced_w": lim.enforced_w,
        "power_limit_min_w": lim.min_w,
        "power_limit_max_w": lim.max_w,
        "power_limit_default_w": lim.default_w,
    }


def _clock_body(gpu: _Gpu) -> dict[str, Any]:
    """The twin device's ``/v1/clocks`` answer, from NVML; the lock is the one this agent set (NVML has no getter)."""
    info = gpu.clock.clocks()
    return {
        "sm_clock_locked_mhz": info.locked_mhz,
        "max_sm_clock_mhz": info.max_mhz,
        "supported_sm_clocks_mhz": info.supported_mhz,
    }


def _refusal(exc: DeviceSettingError) -> Response:
    """NVML's no-permission is a 403 (the clients name the fix: run the agent as root); anything else a 400."""
    status = 403 if exc.no_permission else 400
    return error(status, f"{exc.message} (fix: {exc.fix})", code="no_permission" if status == 403 else "refused")


def agent_router(agent: SettingsAgent) -> Router:
    """The agent's routes; every NVML refusal is a 4xx naming NVML's error and the fix."""
    r = Router()

    def guarded(fn: Callable[[Request], dict[str, Any]]) -> Callable[[Request], Any]:
        def handle(req: Request) -> Any:
            try:
                return fn(req)
            except DeviceSettingError as exc:
                return _refusal(exc)

        return handle

    def set_limit(req: Request) -> dict[str, Any]:
        raw = req.json().get("power_limit_w")
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not 0 < raw < 100_000:
            raise BadRequest(f"power_limit_w (watts, a positive number) is required, got {raw!r}")
        return agent.set_power_limit(req.params["gpu"], float(raw))

    def lock(req: Request) -> dict[str, Any]:
        raw = req.json().get("sm_clock_locked_mhz", "missing")
        if raw is not None and (isinstance(raw, bool) or not isinstance(raw, int) or raw <= 0):
            raise BadRequest(f"sm_clock_locked_mhz (MHz, a positive integer; null unlocks) is required, got {raw!r}")
        return agent.lock_clock(req.params["gpu"], raw)

    r.add("GET", "/health", lambda req: {"status": "ok"})
    r.add("GET", "/gpus/{gpu}/v1/power_limit", guarded(lambda req: agent.power_limit(req.params["gpu"])))
    r.add("POST", "/gpus/{gpu}/v1/power_limit", guarded(set_limit))
    r.add("GET", "/gpus/{gpu}/v1/clocks", guarded(lambda req: agent.clocks(req.params["gpu"])))
    r.add("POST", "/gpus/{gpu}/v1/clocks", guarded(lock))
    r.add("DELETE", "/gpus/{gpu}/v1/clocks", guarded(lambda req: agent.lock_clock(req.params["gpu"], None)))
    return r
