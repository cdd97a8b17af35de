"""The pre-launched engine instances the front routes between: one per speculative config, launched through
``harness.engine.launch.EngineLauncher`` (sglang on a GPU box, the twin engine here) or given by URL.
``harness/serve/relaunch.py`` keeps the same interface with one engine at a time (where only one fits)."""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

from harness.core.errors import UsageError
from harness.core.http import http_get
from harness.engine.launch import EngineLauncher, RunningServer
from harness.grid import SpecConfig

InstanceState = Literal["ready", "idle", "draining", "launching"]
"""``ready``: takes requests. The rest only occur with one engine at a time (``relaunch.py``): ``idle`` (not
running, can be launched), ``draining`` (finishing its requests before it is stopped), ``launching``."""


@dataclass
class Instance:
    """One engine instance: its config and URL, the process when the harness launched it, whether it was lost."""

    config: SpecConfig
    base_url: str
    server: RunningServer | None = None
    lost_reason: str | None = None
    in_flight: int = 0
    served: int = 0
    state: InstanceState = "ready"
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def alive(self) -> bool:
        """Not marked lost and, when launched here, its process still running (for one engine at a time: a config
        not running now is alive while it can still be launched)."""
        if self.lost_reason is not None:
            return False
        if self.server is not None and not self.server.alive():
            self.lost_reason = f"process exited with code {self.server.returncode}"
            return False
        return True

    def ready(self) -> bool:
        """Alive and taking requests now."""
        return self.state == "ready" and self.alive()

    def confirm_dead(self, timeout_s: float = 1.0) -> bool:
        """After a broken connection: has the instance died (its process exited, or it no longer answers /health)?
        One the harness is taking down (not ``ready``) counts as dead: its requests go to the next route."""
        if self.state != "ready":
            return True
        if self.server is not None:
            try:
                self.server.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return False
            return True
        import httpx

        try:
            return http_get(self.base_url + "/health", timeout=timeout_s, trust_env=False).status_code >= 500
        except httpx.HTTPError:
            return True

    def mark_lost(self, reason: str) -> None:
        """Lost for good; ignored for an instance the harness is taking down itself (its requests broke on purpose)."""
        with self._lock:
            if self.lost_reason is None and self.state == "ready":
                self.lost_reason = reason

    def enter(self) -> None:
        with self._lock:
            self.in_flight += 1

    def leave(self) -> None:
        with self._lock:
            self.in_flight -= 1
            self.served += 1


class Pool:
    """The instances by config; ``close()`` stops those the pool launched."""

    one_at_a_time = False
    relaunches: list[dict[str, Any]] = []
    """Relaunch records (only with one engine at a time)."""

    def __init__(self, instances: Sequence[Instance]) -> None:
        self.instances: dict[SpecConfig, Instance] = {}
        for inst in instances:
            if inst.config in self.instances:
                raise UsageError(f"two instances for config {inst.config}", fix="give each config once")
            self.instances[inst.config] = inst

    def alive(self) -> frozenset[SpecConfig]:
        return frozenset(c for c, inst in self.instances.items() if inst.alive())

    def get(self, config: SpecConfig) -> Instance:
        return self.instances[config]

    def describe(self) -> list[dict[str, object]]:
        return [
            {
                "config": c.as_list(),
                "url": i.base_url,
                "alive": i.alive(),
                "state": i.state,
                "lost_reason": i.lost_reason,
                "in_flight": i.in_flight,
                "served": i.served,
                "pid": i.server.pid if i.server else None,
            }
            for c, i in sorted(self.instances.items())
        ]

    def attach(self, on_lost: Callable[[], None], on_event: Callable[[dict[str, Any]], None]) -> None:
        """The control loop's hooks: ``on_lost`` when an instance is found lost outside a request, ``on_event`` for a
        record of the switch log (only ``relaunch.py`` calls them)."""

    def activate(self, config: SpecConfig) -> None:
        """The control loop routes to ``config`` from now on: nothing to do when every instance is running."""

    def wait_ready(self, timeout_s: float) -> None:
        """Return once the routed instance takes requests: at once when every instance was launched before."""

    def close(self) -> None:
        for inst in self.instances.values():
            if inst.server is not None:
                inst.server.stop()

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def launch_pool(
    launcher: EngineLauncher,
    configs: Sequence[SpecConfig],
    max_batch_size: int,
    mem_fraction: float,
    log_dir: str | Path,
    adaptive: EngineLauncher | None = None,
) -> Pool:
    """Launch one instance per config (each sized for ``max_batch_size``); ``adaptive``, when given, launches the
    topk == 1 configs (its spec carries sglang's ``--speculative-adaptive`` flags). A failed launch stops the others."""
    launched: list[Instance] = []
    try:
        for cfg in configs:
            use = adaptive if adaptive is not None and cfg.topk == 1 else launcher
            server = use.launch(
                cfg, max_batch_size, mem_fraction, log_path=Path(log_dir) / f"engine-{cfg.label.replace(':', '-')}.log"
            )
            launched.append(Instance(cfg, server.base_url, server))
    except BaseException:
        for inst in launched:
            assert inst.server is not None
            inst.server.stop()
        raise
    return Pool(launched)
