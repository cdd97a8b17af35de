"""The locked SM clock actuator of ``harness serve --clock-control``: ``clock_trim.clock_step`` decides, this applies
it through the one GPU abstraction of the sweeps (``harness.gpu.sm_clocks``: the twin GPU's ``/v1/clocks`` or NVML's
``nvmlDeviceSetGpuLockedClocks``), logs every actuation with its reason and puts the clock back on exit.

A refused lock (no permission: NVML without root, the twin's ``settings_denied`` fault) is logged once with the fix;
the actuator then stays off and serving goes on with speculation only. The power cap is never touched.
"""

from __future__ import annotations

from typing import Any, Callable

from harness.core.errors import HarnessError
from harness.gpu.sm_clocks import ClockDevice, apply_clock
from harness.serve.clock_trim import ClockChange, ClockParams, ClockState, clock_step

WITHOUT_CLOCKS = "or serve without --clock-control (speculation only)"


class ClockActuator:
    """Owns the SM clock lock while enabled (``device``: opens the GPU's clock device; a failure there is a refusal
    too). ``log`` gets one dict per actuation or refusal (``{"event": "clock",
    old_mhz, new_mhz, reason, ...}`` / ``{"event": "clock_refused", message, fix}``)."""

    def __init__(
        self,
        device: Callable[[], ClockDevice],
        band: tuple[float, float],
        log: Callable[[dict[str, Any]], None],
        params: ClockParams | None = None,
    ) -> None:
        self.band, self.log = band, log
        self.params = params or ClockParams()
        self.state = ClockState()
        self.changes = 0
        self.refused: str | None = None
        """Why the actuator is off for good (None: it works)."""
        self.enabled = True
        self.supported: list[int] = []
        self.original_mhz: int | None = None
        self.device: ClockDevice | None = None
        try:
            self.device = device()
            info = self.device.clocks()
        except HarnessError as exc:
            self._refuse(exc)
            return
        self.supported = sorted(info.supported_mhz or ([info.max_mhz] if info.max_mhz else []), reverse=True)
        self.original_mhz = info.locked_mhz if self.device.lock_readable else None
        if not self.supported:
            self._refuse(HarnessError("this GPU lists no supported SM clocks", fix=WITHOUT_CLOCKS))

    @property
    def active(self) -> bool:
        return self.enabled and self.refused is None

    @property
    def locked_mhz(self) -> int | None:
        return self.state.locked_mhz

    def tick(
        self, t_s: float, utilization: float | None, running_mhz: float | None, clean: bool, sample_age_s: float = 0.0
    ) -> None:
        """One control tick at device time ``t_s``: decide, apply, log (nothing while off)."""
        if not self.active:
            return
        state, change = clock_step(
            self.state,
            t_s=t_s,
            utilization=utilization,
            running_mhz=running_mhz,
            clean=clean,
            supported=self.supported,
            band=self.band,
            params=self.params,
            sample_age_s=sample_age_s,
        )
        if change is not None:
            self._apply(state, change)

    def _apply(self, state: ClockState, change: ClockChange) -> None:
        assert self.device is not None  # active
        try:
            apply_clock(self.device, change.new_mhz)
        except HarnessError as exc:
            self._refuse(exc, change)
            return
        self.state = state
        self.changes += 1
        self.log({"event": "clock", "old_mhz": change.old_mhz, "new_mhz": change.new_mhz, "reason": change.reason,
                  **change.detail})  # fmt: skip

    def _refuse(self, exc: HarnessError, change: ClockChange | None = None) -> None:
        fix = f"{exc.fix}; {WITHOUT_CLOCKS}" if exc.fix else WITHOUT_CLOCKS
        self.refused = f"{exc.message}; serving goes on with speculation only"
        self.log({"event": "clock_refused", "message": self.refused, "fix": fix,
                  "wanted_mhz": None if change is None else change.new_mhz})  # fmt: skip

    def restore(self, reason: str = "restore") -> None:
        """Put the clock back as found (NVML: unlocked) if this loop changed it; logged."""
        if self.state.locked_mhz is None or self.refused is not None or self.device is None:
            return
        old = self.state.locked_mhz
        try:
            apply_clock(self.device, self.original_mhz)
        except HarnessError as exc:
            self.log({"event": "clock_restore_failed", "message": exc.message, "fix": exc.fix})
            return
        self.state = ClockState()
        self.changes += 1
        self.log({"event": "clock", "old_mhz": old, "new_mhz": self.original_mhz, "reason": reason})

    def set_enabled(self, on: bool) -> None:
        """Turn the trim on or off (off restores the clock); the benchmark's modes with and without clocks."""
        if not on:
            self.restore()
        self.enabled = on
        self.state = ClockState(locked_mhz=self.state.locked_mhz)

    def describe(self) -> dict[str, Any]:
        return {
            "clock_control": self.active,
            "clock_locked_mhz": self.state.locked_mhz,
            "clock_changes": self.changes,
            "clock_refused": self.refused,
        }
