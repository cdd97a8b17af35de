"""The GPU power cap as a sweep dimension: parse ``--power-caps``, set the limit per pass, restore it on exit.

A cap is watts (``60``) or a share of the board's default limit (``75%``). ``PowerCapController`` in ``set`` mode
sets each pass's cap through the device (NVML ``nvmlDeviceSetPowerManagementLimit``, root only, or the twin GPU's
``POST /v1/power_limit``), reads back the enforced limit, and restores the limit it found before the run's first set
on exit. That original limit is saved in the manifest before anything is changed, so a run killed with SIGKILL (no
cleanup) is restored by ``--resume`` at its end. ``record`` mode never sets anything: rows only record the enforced
limit the device reports (the fallback when the harness is not root).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Callable, Protocol, Sequence

from pydantic import BaseModel

from harness.core.errors import UsageError
from harness.core.option_values import checked_by, list_items, no_repeats, shown
from harness.gpu.device import NvmlDevice, TwinSettingDevice, setting_device
from harness.gpu.pass_setting import DeviceSettingError, PassSetting, SettingMode

PowerCapMode = SettingMode


class PowerCapError(DeviceSettingError):
    """The power limit could not be set (permission, range or device error)."""


class CapLimits(BaseModel):
    """A device's limits in watts: the set (management) limit, the enforced one, the constraints and the default."""

    current_w: float | None = None
    enforced_w: float | None = None
    min_w: float | None = None
    max_w: float | None = None
    default_w: float | None = None


class CapDevice(Protocol):
    """What the controller needs from a GPU: read its limits, set the management limit."""

    def limits(self) -> CapLimits: ...

    def set_limit(self, watts: float) -> None: ...


AUTO_CAPS = "auto"
"""``--power-caps auto``: the band probe (``harness.sweep.probe``) chooses the caps before the first cell."""
_CAP = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%|w)?\s*$", re.IGNORECASE)


def parse_power_caps(value: str | Sequence[Any]) -> list[str]:
    """``"60,80"`` or ``[60, 80]`` -> ``["60", "80"]``; ``"75%,100%"`` -> ``["75%", "100%"]`` (normalised labels,
    order kept; an empty item or a cap given twice is refused)."""
    fix = "give watts or a percentage of the default limit, e.g. --power-caps 60,70,80 or 75%,100%, or auto"
    out: list[str] = []
    items = list_items(value, "--power-caps", "60,80")
    if any(str(part).strip().lower() == AUTO_CAPS for part in items):
        if len(items) > 1:
            raise UsageError(
                f"--power-caps auto chooses every cap itself; it cannot be mixed with {shown(items)!r}",
                fix="give --power-caps auto alone, or only caps in watts",
            )
        return [AUTO_CAPS]
    for part in items:
        m = _CAP.match(part)
        if not m or float(m.group(1)) <= 0:
            raise UsageError(f"cannot parse power cap {part!r} in --power-caps {shown(items)!r}", fix=fix)
        out.append(f"{float(m.group(1)):g}" + ("%" if m.group(2) == "%" else ""))
    if not out:
        raise UsageError("--power-caps is empty", fix="e.g. --power-caps 60,80")
    no_repeats(out, "--power-caps", "power cap")
    return out


PowerCaps = Annotated[list[str] | None, checked_by(lambda v: v if v is None else parse_power_caps(v))]
"""Power cap labels swept per pass, checked at every door (``parse_power_caps``)."""


def cap_slug(label: str) -> str:
    """Filesystem-safe form of a cap label for cell ids: ``60`` -> ``cap60w``, ``75%`` -> ``cap75pct``."""
    return "cap" + label.replace("%", "pct").replace(".", "p") + ("" if label.endswith("%") else "w")


def resolve_cap(label: str, limits: CapLimits) -> float:
    """Watts of a cap label against the device's limits; refuses values outside its constraints (as NVML does)."""
    if label.endswith("%"):
        if not limits.default_w:
            raise PowerCapError(
                f"power cap {label} needs the GPU's default limit, which it does not report",
                fix="give the cap in watts, e.g. --power-caps 250",
            )
        watts = round(limits.default_w * float(label[:-1]) / 100.0, 3)
    else:
        watts = float(label)
    lo, hi = limits.min_w, limits.max_w
    if (lo is not None and watts < lo) or (hi is not None and watts > hi):
        raise PowerCapError(
            f"power cap {label} ({watts:g} W) is outside this GPU's limits [{lo:g}, {hi:g}] W",
            fix=f"choose caps between {lo:g} and {hi:g} W (nvidia-smi -q -d POWER shows the limits)",
        )
    return watts


class TwinCapDevice(TwinSettingDevice):
    """The twin GPU's limit endpoints (``GET``/``POST /v1/power_limit``)."""

    error = PowerCapError

    def limits(self) -> CapLimits:
        d = self._call("GET")
        return CapLimits(
            current_w=d.get("power_limit_w"),
            enforced_w=d.get("power_limit_w"),
            min_w=d.get("power_limit_min_w"),
            max_w=d.get("power_limit_max_w"),
            default_w=d.get("power_limit_default_w"),
        )

    def set_limit(self, watts: float) -> None:
        self._call("POST", {"power_limit_w": watts})


class NvmlCapDevice(NvmlDevice):
    """NVML through nvidia-ml-py: the limit getters, the constraints, and the (root-only) setter."""

    error = PowerCapError

    def _w(self, fn: Callable[..., Any]) -> float | None:
        try:
            return fn(self.handle) / 1000.0
        except self.nv.NVMLError:
            return None

    def limits(self) -> CapLimits:
        nv = self.nv
        try:
            lo, hi = (x / 1000.0 for x in nv.nvmlDeviceGetPowerManagementLimitConstraints(self.handle))
        except nv.NVMLError:
            lo = hi = None
        return CapLimits(
            current_w=self._w(nv.nvmlDeviceGetPowerManagementLimit),
            enforced_w=self._w(nv.nvmlDeviceGetEnforcedPowerLimit),
            min_w=lo,
            max_w=hi,
            default_w=self._w(nv.nvmlDeviceGetPowerManagementDefaultLimit),
        )

    def set_limit(self, watts: float) -> None:
        self.set_call(
            self.nv.nvmlDeviceSetPowerManagementLimit,
            int(round(watts * 1000)),
            doing=f"setting the power limit to {watts:g} W",
            refused=f"the power limit {watts:g} W",
            without_root="pass --power-cap-mode record to only record the limit in force (set it beforehand with "
            "sudo nvidia-smi -pl WATTS)",
            refused_fix="choose a cap within nvmlDeviceGetPowerManagementLimitConstraints",
        )


def cap_device(twin_gpu_url: str | None, gpu: int | str, settings_url: str | None = None) -> CapDevice:
    """The power-limit device of the engine's GPU (``harness.gpu.device.setting_device``)."""
    device: CapDevice = setting_device(TwinCapDevice, TwinCapDevice, NvmlCapDevice, twin_gpu_url, gpu, settings_url)
    return device


def close_device(device: CapDevice) -> None:
    """Release a device's handle where it holds one (NVML's; the twin's endpoint holds none)."""
    close = getattr(device, "close", None)
    if close is not None:
        close()


class PowerCapController(PassSetting):
    """The power cap per pass (``harness.gpu.pass_setting.PassSetting``): records under the manifest's ``power_cap``
    (``original_w``, ``targets_w``, ``enforced_w``, ``limits``, ``restored``)."""

    key, unit, what = "power_cap", "w", "the power limit"
    _limits: CapLimits

    def read(self) -> tuple[float | None, dict[str, Any]]:
        limits = self.device.limits()
        if self.mode == "set" and limits.current_w is None:
            raise PowerCapError(
                "the GPU does not report its current power limit, so a cap set now could not be restored",
                fix="pass --power-cap-mode record and set the limit yourself (sudo nvidia-smi -pl WATTS)",
            )
        self._limits = limits
        return limits.current_w, {"limits": {k: v for k, v in limits.model_dump().items() if k != "enforced_w"}}

    def resolve(self, label: str, facts: dict[str, Any]) -> float:
        return resolve_cap(label, self._limits)

    def put(self, value: float | None) -> None:
        if value is not None:
            self.device.set_limit(float(value))

    def enforced(self) -> float | None:
        return self.device.limits().enforced_w

    def applied_text(self, label: str | None, value: float | None) -> str:
        return f"power cap {label}: {'unknown' if value is None else f'{value:g}'} W enforced"

    def restored_text(self, value: float | None) -> str:
        return f"power limit restored to {value:g} W" if value is not None else "power limit restored"
