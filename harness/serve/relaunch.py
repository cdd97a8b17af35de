"""One engine at a time, for a GPU where only one instance fits: a switch drains the running instance (the front
stops giving it requests; the new ones wait at the front's admission), stops it, and launches the routed config.

``RelaunchPool`` keeps ``Pool``'s interface: ``instances`` has one ``Instance`` per config (``idle`` until launched),
``alive()`` is the set of configs that can still serve (the running one and every one not lost), ``activate(config)``
is what the control loop calls when it routes elsewhere. A worker thread does the relaunches in order; if the routed
config changes again while one is under way, the worker goes on to the newest. A launch that fails marks that
config lost (the controller then routes to no_spec, which is launched in turn), as does an instance that dies. Each
relaunch is one JSONL event (``"event": "relaunch"``) in the switch log: old, new, drain, stop and launch seconds, the downtime (no instance
taking requests) and the error if any, written (and stamped) when the relaunch ends.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.core.clocks import wall_ns
from harness.core.errors import EngineLaunchError, UsageError
from harness.engine.launch import EngineLauncher
from harness.grid import SpecConfig
from harness.serve.pool import Instance, Pool

DEFAULT_DRAIN_TIMEOUT_S = 120.0
"""Wall seconds a draining instance gets to finish its requests; then it is stopped and they are sent again."""


class RelaunchPool(Pool):
    """The configs' instances, at most one running (see the module doc)."""

    one_at_a_time = True

    def __init__(
        self,
        launcher: EngineLauncher,
        configs: Sequence[SpecConfig],
        max_batch_size: int,
        mem_fraction: float,
        log_dir: str | Path,
        *,
        drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S,
    ) -> None:
        super().__init__([Instance(c, "", state="idle") for c in configs])
        self.launcher = launcher
        self.max_batch_size = max_batch_size
        self.mem_fraction = mem_fraction
        self.log_dir = Path(log_dir)
        self.drain_timeout_s = drain_timeout_s
        self._on_event: Callable[[dict[str, Any]], None] | None = None
        self._on_lost: Callable[[], None] | None = None
        self.relaunches: list[dict[str, Any]] = []
        self.current: Instance | None = None
        self._target: SpecConfig | None = None
        self._cond = threading.Condition()
        self._cancel = threading.Event()
        self._closed = False
        self._worker = threading.Thread(target=self._run, name="serve-relaunch", daemon=True)
        self._worker.start()

    def attach(self, on_lost: Callable[[], None], on_event: Callable[[dict[str, Any]], None]) -> None:
        self._on_lost, self._on_event = on_lost, on_event

    def activate(self, config: SpecConfig) -> None:
        with self._cond:
            if config != self._target:
                self._target = config
                self._cond.notify_all()

    def wait_ready(self, timeout_s: float) -> None:
        """Until the routed instance takes requests; ``EngineLaunchError`` when every config was lost, or on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not (self.current is not None and self.current.config == self._target and self.current.ready()):
                if not self.alive():
                    lost = "; ".join(f"{c}: {i.lost_reason}" for c, i in sorted(self.instances.items()))
                    raise EngineLaunchError(
                        f"no engine instance could be launched ({lost})",
                        fix="read the engine logs under the serve folder's logs/",
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise EngineLaunchError(
                        f"no engine instance was ready within {timeout_s:g} s",
                        fix="raise the launch timeout or read the engine logs",
                    )
                self._cond.wait(min(left, 0.2))

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._pending():
                    self._cond.wait()
                if self._closed:
                    return
                target = self._target
            assert target is not None
            self._relaunch(target)

    def _pending(self) -> bool:
        """A relaunch is due: the routed config is not the running one and can still be launched."""
        t = self._target
        running = self.current.config if self.current is not None and self.current.alive() else None
        return t is not None and t != running and self.instances[t].lost_reason is None

    def _relaunch(self, target: SpecConfig) -> None:
        t0 = time.monotonic()
        rec: dict[str, Any] = {
            "event": "relaunch",
            "old": self.current.config.as_list() if self.current else None,
            "new": target.as_list(),
        }
        old = self.current
        if old is not None:
            old.state = "draining"
            if not self._drain(old, target):
                old.state = "ready"  # routed back to the running config while it drained: keep it
                return
            rec["drain_s"] = round(time.monotonic() - t0, 3)
            t1 = time.monotonic()
            server, old.server = old.server, None
            old.state = "idle"
            with self._cond:
                self.current = None
            if server is not None:
                server.stop()
            rec["stop_s"] = round(time.monotonic() - t1, 3)
        inst = self.instances[target]
        inst.state = "launching"
        t2 = time.monotonic()
        try:
            server = self.launcher.launch(
                target,
                self.max_batch_size,
                self.mem_fraction,
                cancel=self._cancel,
                log_path=self.log_dir / f"engine-{target.label.replace(':', '-')}-{wall_ns()}.log",
            )
        except Exception as exc:  # noqa: BLE001 - any failed launch loses that config, whatever raised
            inst.state = "idle"
            if not self._closed:
                inst.lost_reason = f"launch failed: {str(exc)[:300] or type(exc).__name__}"
            self._finish(rec, t0, t2, error=inst.lost_reason)
            if self._on_lost is not None and not self._closed:
                self._on_lost()
            return
        if self._closed:
            server.stop()
            return
        inst.server, inst.base_url = server, server.base_url
        with self._cond:
            inst.state = "ready"
            self.current = inst
            self._cond.notify_all()
        self._finish(rec, t0, t2)

    def _drain(self, old: Instance, target: SpecConfig) -> bool:
        """Wait until ``old`` has no request in flight (or the drain timeout, or it died); False when routed back to
        it (or closing): then it is kept."""
        deadline = time.monotonic() + self.drain_timeout_s
        with self._cond:
            while old.in_flight > 0 and old.alive() and time.monotonic() < deadline:
                if self._target == old.config or self._closed:
                    break
                self._cond.wait(0.02)
            return self._target != old.config and not self._closed

    def _finish(self, rec: dict[str, Any], t0: float, t_launch: float, error: str | None = None) -> None:
        rec.update(
            launch_s=round(time.monotonic() - t_launch, 3),
            downtime_s=round(time.monotonic() - t0, 3),
            ok=error is None,
            error=error,
        )
        self.relaunches.append(rec)
        if self._on_event is not None:
            self._on_event(rec)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cancel.set()
            self._cond.notify_all()
        self._worker.join(timeout=30.0)
        for inst in self.instances.values():
            if inst.server is not None:
                inst.server.stop()
                inst.server = None


def relaunch_pool(
    launcher: EngineLauncher,
    configs: Sequence[SpecConfig],
    max_batch_size: int,
    mem_fraction: float,
    log_dir: str | Path,
    drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S,
) -> RelaunchPool:
    if not configs:
        raise UsageError("no config to serve", fix="give --picks or --configs")
    return RelaunchPool(launcher, configs, max_batch_size, mem_fraction, log_dir, drain_timeout_s=drain_timeout_s)
