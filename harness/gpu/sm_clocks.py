"""The locked SM clock as a sweep dimension: parse ``--sm-clocks``, lock the clock per pass, unlock it on exit.

A clock is MHz (``1410``) or ``max`` / ``default`` (unlocked: the driver's own boost). Each locked clock must be one
the GPU supports (``nvmlDeviceGetSupportedGraphicsClocks``; the twin: its profile's max down to min in steps); a
clock that is not stops the sweep before the first cell, naming the nearest supported ones. ``SmClockController``
(``harness.gpu.pass_setting.PassSetting``) locks each pass's clock (``nvmlDeviceSetGpuLockedClocks(mhz, mhz)``, root
only, or the twin GPU's ``POST /v1/clocks``) and puts the original back on exit: on NVML, which has no getter for
a lock, the original is "unlocked" and restoring is ``nvmlDeviceResetGpuLockedClocks``; the twin reports its lock.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Protocol, Sequence

from pydantic import BaseModel, Field

from harness.core.errors import UsageError
from harness.core.option_values import checked_by, list_items, no_repeats, shown
from harness.gpu.device import NvmlDevice, TwinSettingDevice, setting_device
from harness.gpu.pass_setting import DeviceSettingError, PassSetting

UNLOCKED = "max"
"""The label of an unlocked pass (``max`` or ``default`` on the command line)."""


class SmClockError(DeviceSettingError):
    """The SM clock could not be locked or unlocked (permission, unsupported clock or device error)."""


class ClockInfo(BaseModel):
    """A device's SM clocks in MHz: the lock in force (None: unlocked, or unknown on NVML), the maximum, the supported."""

    locked_mhz: int | None = None
    max_mhz: int | None = None
    supported_mhz: list[int] = Field(default_factory=list)
    """Highest first; empty when the device does not say."""


class ClockDevice(Protocol):
    """What the controller needs from a GPU: read its clocks, lock the SM clock at one value, unlock it;
    ``lock_readable``: whether ``clocks().locked_mhz`` is the device's own (else only what this process set)."""

    lock_readable: bool

    def clocks(self) -> ClockInfo: ...

    def lock(self, mhz: int) -> None: ...

    def unlock(self) -> None: ...


def apply_clock(device: ClockDevice, mhz: int | None) -> None:
    """Lock ``device``'s SM clock at ``mhz``, or unlock it (None)."""
    if mhz is None:
        device.unlock()
    else:
        device.lock(mhz)


_CLOCK = re.compile(r"^\s*(\d+)\s*(mhz)?\s*$", re.IGNORECASE)


def parse_sm_clocks(value: str | Sequence[Any]) -> list[str]:
    """``"1980,1410,max"`` or ``[1980, 1410, "max"]`` -> ``["1980", "1410", "max"]`` (MHz, or ``max`` / ``default`` =
    unlocked; order kept; an empty item or a clock given twice is refused)."""
    out: list[str] = []
    items = list_items(value, "--sm-clocks", "1980,1410,990")
    for part in items:
        word = part.lower()
        m = _CLOCK.match(word)
        if word in ("max", "default"):
            out.append(UNLOCKED)
        elif m and int(m.group(1)) > 0:
            out.append(str(int(m.group(1))))
        else:
            raise UsageError(
                f"cannot parse SM clock {part!r} in --sm-clocks {shown(items)!r}",
                fix="give MHz or max (unlocked), e.g. --sm-clocks 1980,1410,990 or max,1410",
            )
    if not out:
        raise UsageError("--sm-clocks is empty", fix="e.g. --sm-clocks 1980,1410,990")
    no_repeats(out, "--sm-clocks", "SM clock", note=" (max and default both mean unlocked)")
    return out


SmClocks = Annotated[list[str] | None, checked_by(lambda v: v if v is None else parse_sm_clocks(v))]
"""Locked SM clock labels swept per pass, checked at every door (``parse_sm_clocks``)."""


def clock_slug(label: str) -> str:
    """Filesystem-safe form of a clock label for cell ids: ``1410`` -> ``clk1410mhz``, ``max`` -> ``clkmax``."""
    return "clkmax" if label == UNLOCKED else f"clk{label}mhz"


def nearest_supported(mhz: int, supported: list[int], n: int = 2) -> list[int]:
    """The ``n`` supported clocks nearest to ``mhz``, ascending."""
    return sorted(sorted(supported, key=lambda s: (abs(s - mhz), -s))[:n])


def resolve_clock(label: str, info: ClockInfo) -> int | None:
    """MHz of a clock label (None for ``max``: unlocked); refuses a clock the GPU does not support."""
    if label == UNLOCKED:
        return None
    mhz = int(label)
    sup = info.supported_mhz
    if sup and mhz not in sup:
        near = " or ".join(f"{c}" for c in nearest_supported(mhz, sup))
        raise SmClockError(
            f"SM clock {mhz} MHz is not one this GPU supports (nearest: {near} MHz; it supports "
            f"{min(sup)}-{max(sup)} MHz, {len(sup)} clocks)",
            fix=f"use a supported clock, e.g. --sm-clocks {near.split(' or ')[-1]} "
            "(nvidia-smi -q -d SUPPORTED_CLOCKS lists them)",
        )
    if info.max_mhz is not None and mhz > info.max_mhz:
        raise SmClockError(
            f"SM clock {mhz} MHz is above this GPU's maximum {info.max_mhz} MHz",
            fix=f"use clocks up to {info.max_mhz} MHz, or max (unlocked)",
        )
    return mhz


class TwinClockDevice(TwinSettingDevice):
    """The twin GPU's clock endpoints (``GET``/``POST``/``DELETE /v1/clocks``)."""

    route, what, error, fix = "/v1/clocks", "the SM clock lock", SmClockError, "choose a supported clock"
    lock_readable = True

    def clocks(self) -> ClockInfo:
        d = self._call("GET")
        return ClockInfo(
            locked_mhz=d.get("sm_clock_locked_mhz"),
            max_mhz=d.get("max_sm_clock_mhz"),
            supported_mhz=list(d.get("supported_sm_clocks_mhz") or []),
        )

    def lock(self, mhz: int) -> None:
        self._call("POST", {"sm_clock_locked_mhz": int(mhz)})

    def unlock(self) -> None:
        self._call("DELETE")


class NvmlClockDevice(NvmlDevice):
    """NVML through nvidia-ml-py: the maximum and supported SM clocks, and the (root-only) lock and reset. NVML has
    no getter for a lock: ``locked_mhz`` is the one this process set (None before any)."""

    error = SmClockError
    purpose = "SM clock locking"
    lock_readable = False

    def __init__(self, gpu: int | str = 0) -> None:
        super().__init__(gpu)
        self.locked_mhz: int | None = None

    def clocks(self) -> ClockInfo:
        from harness.gpu.nvml_control import NvmlControl  # the GPU check's reader of the same NVML calls

        got = NvmlControl(self.nv, self.handle).clocks()
        return ClockInfo(
            locked_mhz=self.locked_mhz, max_mhz=got.get("max_sm_mhz"), supported_mhz=got.get("sm_mhz") or []
        )

    def _set(self, what: str, call: Any, *args: int) -> None:
        self.set_call(
            call,
            *args,
            doing=what,
            refused=what,
            without_root="drop --sm-clocks and lock the clocks yourself beforehand (sudo nvidia-smi -lgc MHZ,MHZ)",
            refused_fix="choose a clock from nvmlDeviceGetSupportedGraphicsClocks (nvidia-smi -q -d SUPPORTED_CLOCKS)",
            unsupported_fix="drop --sm-clocks (locked clocks need a Volta or newer GPU)",
        )

    def lock(self, mhz: int) -> None:
        self._set(f"locking the SM clock at {mhz} MHz", self.nv.nvmlDeviceSetGpuLockedClocks, int(mhz), int(mhz))
        self.locked_mhz = int(mhz)

    def unlock(self) -> None:
        self._set("unlocking the SM clocks", self.nv.nvmlDeviceResetGpuLockedClocks)
        self.locked_mhz = None


class AgentClockDevice(TwinClockDevice):
    """The settings agent's clock routes: NVML's semantics (no getter for a lock), so ``locked_mhz`` is the lock this
    client set (None before any), not a lock an earlier session left through the agent."""

    lock_readable = False

    def __init__(self, url: str, **how: Any) -> None:
        super().__init__(url, **how)
        self.locked_mhz: int | None = None

    def clocks(self) -> ClockInfo:
        return super().clocks().model_copy(update={"locked_mhz": self.locked_mhz})

    def lock(self, mhz: int) -> None:
        super().lock(mhz)
        self.locked_mhz = int(mhz)

    def unlock(self) -> None:
        super().unlock()
        self.locked_mhz = None


def clock_device(twin_gpu_url: str | None, gpu: int | str, settings_url: str | None = None) -> ClockDevice:
    """The SM clock device of the engine's GPU (``harness.gpu.device.setting_device``)."""
    device: ClockDevice = setting_device(
        TwinClockDevice, AgentClockDevice, NvmlClockDevice, twin_gpu_url, gpu, settings_url
    )
    return device


class SmClockController(PassSetting):
    """The locked SM clock per pass: records under the manifest's ``sm_clocks`` (``original_mhz``: the lock found,
    None = unlocked; ``targets_mhz``, ``enforced_mhz``, ``clocks``, ``restored``)."""

    key, unit, what = "sm_clocks", "mhz", "the SM clocks"
    device: ClockDevice
    _info: ClockInfo

    def read(self) -> tuple[float | None, dict[str, Any]]:
        info = self._info = self.device.clocks()
        sup = info.supported_mhz
        facts = {
            "max_mhz": info.max_mhz,
            "supported_range_mhz": [min(sup), max(sup)] if sup else None,
            "supported_count": len(sup),
            "original_source": "device"
            if self.device.lock_readable
            else "assumed unlocked (NVML has no getter for a lock; restore = nvmlDeviceResetGpuLockedClocks)",
        }
        return info.locked_mhz, {"clocks": facts}

    def resolve(self, label: str, facts: dict[str, Any]) -> float | None:
        return resolve_clock(label, self._info)

    def put(self, value: float | None) -> None:
        apply_clock(self.device, None if value is None else int(value))

    def enforced(self) -> float | None:
        return self.device.clocks().locked_mhz

    def applied_text(self, label: str | None, value: float | None) -> str:
        return f"SM clock {label}: " + ("unlocked" if value is None else f"locked at {value:g} MHz")

    def restored_text(self, value: float | None) -> str:
        return "SM clocks unlocked" if value is None else f"SM clock locked back at {value:g} MHz"
