"""NVML control calls of the check (nvidia-ml-py): limits, clocks, with the exact NVML error text on failure."""

from __future__ import annotations

from typing import Any, Callable


class NvmlCallError(Exception):
    """An NVML call failed; ``str()`` is ``"<function>: <NVML error string>"``."""


class ReadOnlyError(Exception):
    """A set call asked of a read-only ``NvmlControl`` (a GPU whose settings must not change): never sent to NVML."""


SET_CALLS = ("nvmlDeviceSetPowerManagementLimit", "nvmlDeviceSetGpuLockedClocks", "nvmlDeviceResetGpuLockedClocks")


class NvmlControl:
    """One GPU's power limits and SM clocks (``pynvml`` already initialised by the project's ``NvmlProbe``)."""

    def __init__(self, nv: Any, handle: Any, read_only: bool = False) -> None:
        self.nv, self.h, self.read_only = nv, handle, read_only

    def call(self, fname: str, *args: Any) -> Any:
        if self.read_only and fname in SET_CALLS:
            raise ReadOnlyError(f"{fname}: not called (read-only: this GPU's settings must not change)")
        fn: Callable[..., Any] | None = getattr(self.nv, fname, None)
        if fn is None:
            raise NvmlCallError(f"{fname}: not in this nvidia-ml-py")
        try:
            return fn(self.h, *args)
        except self.nv.NVMLError as exc:
            raise NvmlCallError(f"{fname}: {exc}") from None

    def maybe(self, fname: str, *args: Any, scale: float = 1.0) -> tuple[Any, str | None]:
        """(value or None, error text or None)."""
        try:
            v = self.call(fname, *args)
        except NvmlCallError as exc:
            return None, str(exc)
        return (v / scale if scale != 1.0 and isinstance(v, (int, float)) else v), None

    def limits(self) -> dict[str, Any]:
        """Watts: enforced, management (the set one), default, min/max constraints; errors listed."""
        out: dict[str, Any] = {"errors": []}
        for key, fname in (("enforced_w", "nvmlDeviceGetEnforcedPowerLimit"), ("management_w", "nvmlDeviceGetPowerManagementLimit"),
                           ("default_w", "nvmlDeviceGetPowerManagementDefaultLimit")):  # fmt: skip
            out[key], err = self.maybe(fname, scale=1000.0)
            if err:
                out["errors"].append(err)
        cons, err = self.maybe("nvmlDeviceGetPowerManagementLimitConstraints")
        out["min_w"], out["max_w"] = (cons[0] / 1000.0, cons[1] / 1000.0) if cons else (None, None)
        if err:
            out["errors"].append(err)
        return out

    def set_limit(self, watts: float) -> None:
        self.call("nvmlDeviceSetPowerManagementLimit", int(round(watts * 1000)))

    def clocks(self) -> dict[str, Any]:
        """Max SM clock, the supported memory clocks and the SM clocks supported at the highest one (MHz)."""
        out: dict[str, Any] = {"errors": []}
        out["max_sm_mhz"], err = self.maybe("nvmlDeviceGetMaxClockInfo", getattr(self.nv, "NVML_CLOCK_SM", 1))
        if err:
            out["errors"].append(err)
        mems, err = self.maybe("nvmlDeviceGetSupportedMemoryClocks")
        out["memory_mhz"] = sorted(mems or [], reverse=True)
        if err:
            out["errors"].append(err)
        out["sm_mhz"] = []
        if out["memory_mhz"]:
            sms, err = self.maybe("nvmlDeviceGetSupportedGraphicsClocks", out["memory_mhz"][0])
            out["sm_mhz"] = sorted(sms or [], reverse=True)
            if err:
                out["errors"].append(err)
        return out

    def lock_sm(self, mhz: int) -> None:
        self.call("nvmlDeviceSetGpuLockedClocks", int(mhz), int(mhz))

    def reset_sm(self) -> None:
        self.call("nvmlDeviceResetGpuLockedClocks")


def pick_clocks(supported: list[int], max_mhz: int | None, want: tuple[float, ...] = (1.0, 0.71)) -> list[int]:
    """Supported SM clocks nearest to each share of the maximum (1980 and 1410 MHz on an H200), distinct, descending."""
    if not supported:
        return []
    top = max_mhz or max(supported)
    out: list[int] = []
    for share in want:
        c = min(supported, key=lambda s: (abs(s - share * top), -s))
        if c not in out:
            out.append(c)
    return sorted(out, reverse=True)
