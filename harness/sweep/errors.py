"""Why a sweep stops early: an interruption (Ctrl-C, SIGTERM) or a world service it could not bring back."""

from __future__ import annotations

import signal
from typing import Any

from harness.core.errors import HarnessError, ServiceUnavailableError
from harness.world.health import ServiceProblem


class Interrupted(BaseException):
    """SIGTERM received: stop cleanly, keep every written row. A BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` on the way (a probe read, an HTTP retry) can swallow it and let the run finish "complete"."""


class SweepInterrupted(HarnessError):
    """The sweep was stopped (Ctrl-C or SIGTERM) after writing every finished row."""

    exit_code = 130


FIX_BY_KIND = {
    "device": "bring the GPU back (twin: start `harness twin gpu`, or drop --twin-gpu to let the harness start one), "
    "then continue with: harness sweep --resume {run_dir}",
    "sampler": "start the sampler again (harness sampler serve ...), then continue with: harness sweep --resume {run_dir}",
    "probe": "check the GPU and its driver (nvidia-smi; twin: the device's faults), then continue with: "
    "harness sweep --resume {run_dir}",
}
"""What to do about each kind of lost service (``harness.world.health.ServiceProblem.kind``)."""


class InfrastructureLost(Exception):
    """A world service was lost while ``cell_id`` ran (or before it): the cell gets no row; recover or stop."""

    def __init__(self, problem: ServiceProblem, cell_id: str) -> None:
        super().__init__(problem.message)
        self.problem = problem
        self.cell_id = cell_id


class WorldLost(ServiceUnavailableError):
    """A lost world service the harness could not bring back: the run stops, not complete, resumable."""


class _Pending:
    """The stop signal a handler raised for, kept in case the raise was lost. A signal that lands while a server is
    being spawned runs its handler inside an at-fork hook (logging's ``_releaseLock``), where Python prints the
    exception as "Exception ignored" and drops it: a SIGTERMed sweep then ran its last cells and exited 0 (seen in a
    suite try under load). ``raise_if_interrupted`` raises it again at the next cell boundary."""

    signum: int | None = None


PENDING = _Pending()


def on_sigterm(signum: int, frame: Any) -> None:
    PENDING.signum = signum
    raise Interrupted()


def on_sigint(signum: int, frame: Any) -> None:
    PENDING.signum = signum
    raise KeyboardInterrupt


def raise_if_interrupted() -> None:
    """Raise the interruption a handler already raised once, if that raise was swallowed on its way."""
    if PENDING.signum is not None:
        raise Interrupted() if PENDING.signum == signal.SIGTERM else KeyboardInterrupt
