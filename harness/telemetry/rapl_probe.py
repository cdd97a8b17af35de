"""``RaplProbe``: the host CPU as the measured device, for engines that run on the CPU (``--engine-device cpu``).

Energy comes from the Linux powercap RAPL counters, as Zeus reads them: every top-level package zone
``/sys/class/powercap/intel-rapl:<n>`` (``name`` ``package-<n>``; AMD Zen hosts expose the same tree), its
``energy_uj`` counter wrapping at ``max_energy_range_uj``. The probe sums the packages and unwraps each counter, so
``energy_mj`` is monotonic like NVML's total-energy counter and the sampler's window arithmetic is unchanged.

Where the kernel exposes no RAPL zone (most VMs, containers without /sys/class/powercap) or the counters are not
readable (``energy_uj`` is root-only since Linux 5.10), ``energy_mj`` and ``power_w`` stay None and
``identity()["energy_unavailable"]`` says why; rows then carry null energy and that reason, never a made-up number.
``utilization_pct`` is the host's CPU utilization (/proc/stat), ``power_limit_w`` the packages' long-term limit
(``constraint_0_power_limit_uw``, PL1) where the zones have one; the GPU-only fields (clocks, GPU memory,
clock-event mask) are None: a CPU has none of them.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Any

from harness.telemetry.fields import empty_reading

POWERCAP_ROOT = Path("/sys/class/powercap")
POWERCAP_ENV = "HARNESS_POWERCAP_ROOT"
"""Reads another powercap tree (a container's bind mount of the host's, or a test's stand-in of sysfs)."""


def cpu_model_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's marketing name (``model name`` of /proc/cpuinfo), else the platform's processor string."""
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


class _Zone:
    """One RAPL package zone: its counter file, wrap range, and the running unwrapped total."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = (path / "name").read_text().strip()
        self.range_uj = int((path / "max_energy_range_uj").read_text())
        limit = path / "constraint_0_power_limit_uw"  # the long-term package limit (PL1), where the zone has one
        self.limit_w = int(limit.read_text()) / 1e6 if limit.is_file() else None
        self.last_uj = self.read_uj()
        self.total_uj = 0

    def read_uj(self) -> int:
        return int((self.path / "energy_uj").read_text())

    def advance(self) -> int:
        """The unwrapped energy (µJ) since the probe opened this zone."""
        now = self.read_uj()
        delta = now - self.last_uj
        if delta < 0:  # the counter wrapped
            delta += self.range_uj + 1
        self.last_uj = now
        self.total_uj += delta
        return self.total_uj


def _package_zones(root: Path) -> tuple[list[_Zone], str | None]:
    """The readable package zones under ``root``, or none and the reason."""
    if not root.is_dir():
        return [], f"this host exposes no RAPL counters ({root} is absent: a VM or a kernel without powercap)"
    paths = sorted(p for p in root.glob("intel-rapl:*") if p.name.count(":") == 1)
    if not paths:
        return [], f"no RAPL package zone under {root} (no intel-rapl:<n>)"
    zones: list[_Zone] = []
    for path in paths:
        try:
            zone = _Zone(path)
        except PermissionError:
            return [], f"{path}/energy_uj is not readable (root-only since Linux 5.10): run the sweep as root"
        except (OSError, ValueError) as exc:
            return [], f"{path} cannot be read: {exc}"
        if zone.name.startswith("package"):
            zones.append(zone)
    if not zones:
        return [], f"no package-<n> zone under {root}"
    return zones, None


class _CpuBusy:
    """Host-wide CPU utilization (%) between two reads of /proc/stat's ``cpu`` line (idle and iowait count as idle)."""

    def __init__(self, stat: Path) -> None:
        self.stat = stat
        self.last = self._times()
        self.pct: float | None = None

    def _times(self) -> tuple[int, int] | None:
        try:
            fields = [int(x) for x in self.stat.read_text().split("\n", 1)[0].split()[1:]]
        except (OSError, ValueError):
            return None
        return sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0)

    def read(self) -> float | None:
        now = self._times()
        if now is not None and self.last is not None and now[0] > self.last[0]:
            total, idle = now[0] - self.last[0], now[1] - self.last[1]
            self.pct = 100.0 * max(0, total - idle) / total
        if now is not None:
            self.last = now
        return self.pct


class RaplProbe:
    """Reads the host CPU's package energy (RAPL) for a sampler; power is the energy rate between two reads."""

    kind = "rapl"

    def __init__(
        self,
        root: Path | str | None = None,
        cpuinfo: Path | str = Path("/proc/cpuinfo"),
        stat: Path | str = Path("/proc/stat"),
    ) -> None:
        self.root = Path(root or os.environ.get(POWERCAP_ENV) or POWERCAP_ROOT)
        self.model = cpu_model_name(Path(cpuinfo))
        self._busy = _CpuBusy(Path(stat))
        self._zones, self.unavailable = _package_zones(self.root)
        self._last: tuple[int, int] | None = None  # (mono ns, total µJ) of the previous read

    def read(self) -> dict[str, Any]:
        out = empty_reading()  # a CPU has no GPU clocks, GPU memory or clock-event mask
        out["name"] = self.model
        out["utilization_pct"] = self._busy.read()
        if not self._zones:
            return out
        try:
            total_uj = sum(z.advance() for z in self._zones)
        except OSError as exc:
            out["errors"] = [f"rapl: {exc}"]
            return out
        now = time.monotonic_ns()
        out["energy_mj"] = total_uj / 1000.0
        limits = [z.limit_w for z in self._zones if z.limit_w is not None]
        out["power_limit_w"] = sum(limits) if len(limits) == len(self._zones) else None
        if self._last is not None and now > self._last[0]:
            out["power_w"] = (total_uj - self._last[1]) / 1e6 / ((now - self._last[0]) / 1e9)
        self._last = (now, total_uj)
        return out

    def capabilities(self) -> dict[str, Any]:
        return {"energy_source": "rapl" if self._zones else None, "energy_unavailable": self.unavailable}

    def identity(self) -> dict[str, Any]:
        return {
            "backend": "rapl",
            "name": self.model,
            "device": "cpu",
            "cpu_count": os.cpu_count(),
            "rapl_zones": [f"{z.path.name} ({z.name})" for z in self._zones],
            "energy_unavailable": self.unavailable,
        }

    def close(self) -> None:
        self._zones = []
