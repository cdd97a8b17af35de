"""The twin GPU's board settings: the power limit (``nvmlDeviceSetPowerManagementLimit``) and the locked SM clock
(``nvmlDeviceSetGpuLockedClocks`` / ``nvmlDeviceResetGpuLockedClocks``), a mixin of ``TwinGpu`` (``device.py``).

The twin model of a lock: locked / max SM clock is a clock ceiling beside the thermal one; ``TwinGpu`` turns it into
power with the same DVFS law as the cap (dynamic power x clock_factor^dvfs_exponent) and engines stretch only the
compute-bound share of a step by 1/clock_factor, so memory-bound decode slows less than the clock (docs/smclocks.md).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.twin.profile import DeviceParams


class BoardSettings:
    """Power limit and SM clock lock of a twin GPU (state and physics live in ``TwinGpu``)."""

    p: DeviceParams
    lock: threading.RLock
    limit_w: float
    locked_mhz: int | None

    def now_ns(self) -> int:
        raise NotImplementedError

    def _advance(self, now: int) -> None:
        raise NotImplementedError

    def _recompute(self) -> None:
        raise NotImplementedError

    # ---- power limit (nvmlDeviceSetPowerManagementLimit) ------------------------------------------------------
    def power_limits(self) -> dict:
        """The limit in force and the board's constraints, like NVML's limit getters."""
        return {
            "power_limit_w": self.limit_w,
            "power_limit_min_w": self.p.power_limit_min_w,
            "power_limit_max_w": self.p.power_limit_max_w,
            "power_limit_default_w": self.p.power_management_limit_w,
        }

    def set_power_limit(self, watts: float) -> dict:
        """Set the limit (as root does with NVML); a value outside [min, max] raises ValueError, like
        NVML_ERROR_INVALID_ARGUMENT. Power from now on is capped at the new limit."""
        lo, hi = self.p.power_limit_min_w, self.p.power_limit_max_w
        if not (lo <= watts <= hi):
            raise ValueError(f"power limit {watts:g} W is outside this GPU's constraints [{lo:g}, {hi:g}] W")
        with self.lock:
            self._advance(self.now_ns())
            self.limit_w = float(watts)
            self._recompute()
        return self.power_limits()

    # ---- locked SM clocks (nvmlDeviceSetGpuLockedClocks / nvmlDeviceResetGpuLockedClocks) -------------------------
    def supported_sm_clocks(self) -> list[int]:
        """The SM clocks a lock accepts, highest first (nvmlDeviceGetSupportedGraphicsClocks)."""
        p = self.p
        return list(range(p.max_sm_clock_mhz, p.min_sm_clock_mhz - 1, -max(1, p.sm_clock_step_mhz)))

    def lock_factor(self) -> float:
        """The clock ceiling of the SM clock lock (1.0 unlocked)."""
        return 1.0 if self.locked_mhz is None else min(1.0, self.locked_mhz / self.p.max_sm_clock_mhz)

    def clocks(self) -> dict:
        """The lock in force, the maximum and the supported SM clocks."""
        return {
            "sm_clock_locked_mhz": self.locked_mhz,
            "max_sm_clock_mhz": self.p.max_sm_clock_mhz,
            "supported_sm_clocks_mhz": self.supported_sm_clocks(),
            "mem_clock_mhz": self.p.mem_clock_mhz,
        }

    def lock_sm_clock(self, mhz: int | None) -> dict:
        """Lock the SM clock at ``mhz`` (None: unlock, as nvmlDeviceResetGpuLockedClocks); a clock the board does not
        support raises ValueError (NVML_ERROR_INVALID_ARGUMENT). Power and engines follow from now on."""
        if mhz is not None and mhz not in self.supported_sm_clocks():
            raise ValueError(
                f"SM clock {mhz} MHz is not a supported clock of this GPU "
                f"({self.p.min_sm_clock_mhz}-{self.p.max_sm_clock_mhz} MHz in {self.p.sm_clock_step_mhz} MHz steps)"
            )
        with self.lock:
            self._advance(self.now_ns())
            self.locked_mhz = None if mhz is None else int(mhz)
            self._recompute()
        return self.clocks()
