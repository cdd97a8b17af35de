"""The probe-state fields every sample carries. Standard library only: the NVML probe and the GPU check import it
on machines without the project's dependencies (``benchmarks/gpu_check.py``)."""

from __future__ import annotations

from typing import Any

STATE_FIELDS = (
    "name",
    "uuid",
    "driver_version",
    "energy_mj",
    "power_w",
    "power_avg_w",
    "temperature_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "utilization_pct",
    "memory_total_mb",
    "memory_reserved_mb",
    "memory_used_mb",
    "memory_free_mb",
    "power_limit_w",
    "power_management_limit_w",
    "clock_event_reasons",
)
"""The probe-state fields of ``/v1/state`` copied into every sample (absent values are None, never 0)."""


def empty_reading(error: str | None = None) -> dict[str, Any]:
    """A probe reading with every state field None (never 0), no device clock, and ``error`` (if any) listed."""
    out: dict[str, Any] = dict.fromkeys(STATE_FIELDS)
    out["device_ns"] = None
    out["errors"] = [error] if error else []
    return out
