"""``harness serve --power-budget W``: hold the band against W by making W the board's enforced power limit.

The controller's utilization is power over the enforced limit (the sampler reads it), so with the limit set to W the
band is held against W with no other change. W is checked against the board's NVML constraints before anything is
set (``harness.gpu.power_cap.resolve_cap``: outside them is refused, naming them); setting needs root on NVML (the
refusal names the fix); the limit found before is written to ``OUT/power_budget.json`` before the set and put back
when the session ends. A SIGKILL runs no cleanup: the file says which limit to put back (``sudo nvidia-smi -pl W``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from harness.core.jsonl import write_json_atomic
from harness.gpu.power_cap import CapDevice, close_device, resolve_cap


class PowerBudget:
    """The board's limit set to the budget for one session; ``close()`` puts back the limit found before."""

    def __init__(self, device: CapDevice, watts: float, record: Path, log: Callable[[dict[str, Any]], None]) -> None:
        self.device, self.record, self.log = device, record, log
        self.state: dict[str, Any] = {}
        """What ``record`` holds (written whole after every change)."""
        limits = device.limits()
        self.original_w = limits.current_w if limits.current_w is not None else limits.default_w
        self.target_w = resolve_cap(f"{watts:g}", limits)  # refused outside the board's constraints
        self._save({"budget_w": self.target_w, "original_w": self.original_w, "limits": limits.model_dump()})
        device.set_limit(self.target_w)
        self.enforced_w = device.limits().enforced_w
        self._save({"enforced_w": self.enforced_w, "restored": False})
        log({"event": "power_budget", "budget_w": self.target_w, "enforced_w": self.enforced_w,
             "original_w": self.original_w})  # fmt: skip
        self._closed = False

    def _save(self, update: dict[str, Any]) -> None:
        self.state.update(update)
        write_json_atomic(self.record, self.state)

    def close(self) -> None:
        """Put the original limit back (once) and release the device; the record says whether it was put back."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.original_w is not None:
                self.device.set_limit(self.original_w)
                self._save({"restored": True, "restored_w": self.original_w})
                self.log({"event": "power_budget_restored", "restored_w": self.original_w})
        finally:
            close_device(self.device)


def open_power_budget(
    watts: float, device: CapDevice, run_dir: Path, log: Callable[[dict[str, Any]], None]
) -> PowerBudget:
    """The budget on the session's GPU (``device``: ``harness.gpu.power_cap.cap_device``, the engine's GPU)."""
    try:
        return PowerBudget(device, watts, run_dir / "power_budget.json", log)
    except BaseException:  # refused (outside the limits, no root): nothing was set; release the handle
        close_device(device)
        raise
