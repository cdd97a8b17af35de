"""NVML clock-event reason bits (``nvmlClocksEventReasons``, the former throttle reasons): the one definition.

The twin device sets them, the sampler's windows and ``/metrics`` read them, rows classify them. Standard library
only, so the fast-starting twin device can import it. The idle bit never counts as throttling.
"""

from __future__ import annotations

IDLE = 0x1
APPLICATIONS_CLOCKS_SETTING = 0x2
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SYNC_BOOST = 0x10
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
DISPLAY_CLOCK_SETTING = 0x100

NAMES: dict[int, str] = {
    IDLE: "gpu_idle",
    APPLICATIONS_CLOCKS_SETTING: "applications_clocks_setting",
    SW_POWER_CAP: "sw_power_cap",
    HW_SLOWDOWN: "hw_slowdown",
    SYNC_BOOST: "sync_boost",
    SW_THERMAL: "sw_thermal_slowdown",
    HW_THERMAL: "hw_thermal_slowdown",
    HW_POWER_BRAKE: "hw_power_brake_slowdown",
    DISPLAY_CLOCK_SETTING: "display_clock_setting",
}
"""Label of each bit in ``/metrics`` (``gpu_clock_event_active{reason=...}``)."""

POWER_MASK = SW_POWER_CAP | HW_POWER_BRAKE
"""A window's ``power_capped``."""
THERMAL_MASK = SW_THERMAL | HW_THERMAL
"""A window's ``thermal``."""
POWER_THERMAL_MASK = SW_POWER_CAP | HW_SLOWDOWN | SW_THERMAL | HW_THERMAL | HW_POWER_BRAKE
"""A row's ``gpu_throttling_power_thermal`` (the corrected meaning; ``gpu_throttling`` is any bit, idle included)."""
