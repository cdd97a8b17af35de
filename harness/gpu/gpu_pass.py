"""``GpuPass``: the GPU settings one pass of a sweep runs under, as one typed value from the option to the row, the
report and the policies: the power cap label (``--power-caps``: watts or a share of the default limit) and the locked
SM clock label (``--sm-clocks``: MHz or ``max``, unlocked). None: that dimension is not swept. The labels are the
options' canonical ones (``harness.gpu.power_cap.parse_power_caps``, ``harness.gpu.sm_clocks.parse_sm_clocks``), so
a pass named on any command line (``harness train --power-cap 60W``) is the pass a sweep ran (``60``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from harness.gpu.power_cap import cap_slug
from harness.gpu.sm_clocks import UNLOCKED, clock_slug


@dataclass(frozen=True)
class GpuPass:
    """One pass's settings: ``cap`` and ``clock`` labels (None: not swept)."""

    cap: str | None = None
    clock: str | None = None

    @classmethod
    def grid(cls, caps: Sequence[str] | None, clocks: Sequence[str] | None) -> list["GpuPass"]:
        """Every pass of a sweep, caps outer and clocks inner (one pass when neither is swept)."""
        cap_labels: list[str | None] = list(caps) if caps else [None]
        clock_labels: list[str | None] = list(clocks) if clocks else [None]
        return [cls(cap, clock) for cap in cap_labels for clock in clock_labels]

    @classmethod
    def of_extras(cls, extras: Mapping[str, Any]) -> "GpuPass":
        """The pass a native row ran in, from the ``power_cap`` / ``sm_clock`` records of its extras."""
        return cls((extras.get("power_cap") or {}).get("label"), (extras.get("sm_clock") or {}).get("label"))

    @property
    def slug(self) -> str:
        """The cell-id prefix: ``cap60w``, ``cap60w-clk1410mhz``, ``clkmax``; empty for the default pass."""
        parts = ([cap_slug(self.cap)] if self.cap is not None else []) + (
            [clock_slug(self.clock)] if self.clock is not None else []
        )
        return "-".join(parts)

    @property
    def label(self) -> str:
        """For people: ``cap 60, SM 1410 MHz``; ``SM unlocked``; ``default settings``."""
        parts = ([f"cap {self.cap}" + ("" if self.cap.endswith("%") else " W")] if self.cap is not None else []) + (
            [f"SM {'unlocked' if self.clock == UNLOCKED else self.clock + ' MHz'}"] if self.clock is not None else []
        )
        return ", ".join(parts) or "default settings"

    @property
    def swept(self) -> bool:
        """Whether this pass sets anything (a cap or a clock) rather than the default settings."""
        return self.cap is not None or self.clock is not None

    def get(self, dimension: str) -> str | None:
        """The label of ``dimension`` (``cap`` or ``clock``)."""
        return self.cap if dimension == "cap" else self.clock
