"""The driver side of ``--executor ray``: a Ray cluster, one GPU-slot worker per GPU, a work queue of cells.

Ray does the placement: each ``GpuSlot`` is a Ray actor created with ``num_gpus=1``, so Ray gives it a GPU of its own
(``CUDA_VISIBLE_DEVICES``) and never the same GPU to two slots; a slot runs one unit at a time (one cell, or one
config's cells in ``--launch-per config``), so no two cells ever share a GPU. The driver only queues units, hands each
to an idle slot (``slot.run.remote``) and writes what comes back through ``SweepRunner._commit``: it is the only
writer of the run folder (its lock, the RowStore's fsynced appends, the manifest), so resume, validation and the
published layout are the local executor's. A unit whose GPU was lost (twin device or sampler gone, failing GPU reads)
or whose worker or node died comes back without rows for the cells it did not finish: that slot is taken out and
those cells are queued again (at most ``MAX_ATTEMPTS`` times each); the other slots go on.

On the twin (``--engine twin``) the driver starts a local cluster whose GPUs are ``--twin-gpus`` logical Ray GPUs
(``ray.init(num_gpus=N)``) and each slot starts the twin GPU device of its index; with ``--ray-address`` it joins a
running cluster (``ray start --head --num-gpus N`` on a twin box, a real GPU cluster on GPU boxes).
"""

from __future__ import annotations

import os
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

from harness.core.clocks import mono_ns, wall_ns
from harness.core.errors import ServiceUnavailableError, UsageError
from harness.core.extras import needs
from harness.runs.manifest import SweepManifest

MAX_ATTEMPTS = 3
"""Times one cell may be started on a GPU that then fails before the run stops (resumable) instead."""
SLOT_START_TIMEOUT_S = 300.0
"""Wall seconds for every slot to open its world (a twin GPU and a sampler; an NVML sampler)."""
OBJECT_STORE_BYTES = 100 * 1024 * 1024
"""A local cluster's object store: rows are small; Ray's default (30 % of memory) is not needed."""


@dataclass
class Slot:
    """The driver's view of one GPU-slot worker."""

    actor: Any
    info: dict[str, Any]
    state: str = "idle"  # idle | busy | lost
    cell: str | None = None
    busy_s: float = 0.0
    units: int = 0
    since_ns: int = field(default_factory=mono_ns)

    @property
    def label(self) -> str:
        return f"gpu{self.info.get('gpu_id')}"


class RayExecutor:
    """Runs a sweep's pending cells on the slots; ``run(runner, pending)`` is called by ``SweepRunner``."""

    def __init__(self, slots: list[Slot], manifest: SweepManifest, run_dir: Path, console: Any) -> None:
        self.slots = slots
        self.manifest = manifest
        self.run_dir = run_dir
        self.console = console
        manifest.executor = manifest.executor or {}
        self.record: dict[str, Any] = manifest.executor
        self.record.setdefault("events", [])
        manifest.cell_gpus = manifest.cell_gpus or {}
        self.placements: dict[str, Any] = manifest.cell_gpus

    # --- the queue -------------------------------------------------------------------------------------------------
    def run(self, runner: Any, pending: list[Any]) -> None:
        import ray

        units = [[c] for c in pending] if runner.opts.launch_per == "cell" else list(runner._config_groups(pending))
        queue: deque[tuple[list[Any], int]] = deque((u, 1) for u in units)
        inflight: dict[Any, tuple[Slot, list[Any], int, int]] = {}
        stop: str | None = None
        t0 = mono_ns()
        try:
            while queue or inflight:
                for slot in self.slots:
                    if stop is None and queue and slot.state == "idle":
                        unit, attempt = queue.popleft()
                        inflight[slot.actor.run.remote(unit)] = (slot, unit, attempt, mono_ns())
                        self._set(slot, "busy", unit[0].cell_id)
                        runner.console.cell_started(
                            unit[0].cell_id, unit[0].config.label, unit[0].batch_size, unit[0].repeat
                        )
                if not inflight:
                    break
                ready, _ = ray.wait(list(inflight), num_returns=1)
                for ref in ready:
                    slot, unit, attempt, started = inflight.pop(ref)
                    slot.busy_s += (mono_ns() - started) / 1e9
                    slot.units += 1
                    rest, lost = self._collect(runner, ref, slot, unit)
                    if lost is None:
                        self._set(slot, "idle", None)
                        continue
                    self._take_out(slot, lost)
                    if rest and attempt >= MAX_ATTEMPTS:
                        stop = stop or (
                            f"cell {rest[0].cell_id} was cut by a failing GPU {attempt} times (last: {lost['message']})"
                        )
                    elif rest:
                        queue.appendleft((rest, attempt + 1))
                if stop is None and queue and not any(s.state != "lost" for s in self.slots):
                    stop = "every GPU of the run was lost"
            if stop is not None:
                from harness.sweep.errors import WorldLost

                raise WorldLost(
                    f"{stop}: the sweep stopped with cells left (no row for them; every finished cell is kept)",
                    fix=f"bring the GPUs back, then continue with: harness sweep --resume {self.run_dir}",
                )
        finally:
            wall_s = (mono_ns() - t0) / 1e9
            self.record["wall_s"] = self.record.get("wall_s", 0.0) + wall_s
            self.record["gpu_busy_s"] = {s.label: round(s.busy_s, 3) for s in self.slots}
            live = [s for s in self.slots if s.state != "lost"] or self.slots
            self.record["gpu_idle_fraction"] = (
                round(1.0 - sum(s.busy_s for s in self.slots) / (len(live) * wall_s), 4) if wall_s > 0 else None
            )
            self.manifest.save(self.run_dir)

    def _collect(self, runner: Any, ref: Any, slot: Slot, unit: list[Any]) -> tuple[list[Any], dict[str, Any] | None]:
        """Write the unit's rows (driver side); return its cells without a row and why they have none."""
        import ray
        from ray.exceptions import RayError

        by_id = {c.cell_id: c for c in unit}
        try:
            report = ray.get(ref)
        except RayError as exc:  # the worker process or its node died, or the worker raised
            lost: dict[str, Any] | None = {
                "kind": "worker",
                "message": f"{type(exc).__name__}: {str(exc)[:300]}",
                "cell_id": unit[0].cell_id,
            }
            rows: list[Any] = []
        else:
            lost, rows = report.lost, report.rows
            runner.launches += report.launches
            self.manifest.launches_recorded(runner.launches)
            if report.engine_identity is not None and self.manifest.engine_identity is None:
                self.manifest.engine_identity = report.engine_identity
        for row in rows:
            placement = row.extras.get("executor", {})
            self.placements[row.cell_id] = {k: placement.get(k) for k in ("gpu_uuid", "gpu_id", "node_id", "host")}
            # the placement reaches the disk before its row: a driver killed between the two runs the cell again on
            # --resume (and places it anew), never leaves a row whose GPU the manifest does not name
            self.manifest.save(self.run_dir)
            runner._commit(row, by_id[row.cell_id])
        done = {r.cell_id for r in rows}
        return [c for c in unit if c.cell_id not in done], lost

    # --- slots -----------------------------------------------------------------------------------------------------
    def _take_out(self, slot: Slot, lost: dict[str, Any]) -> None:
        import ray

        self._set(slot, "lost", None)
        event = {
            "wall_ns": wall_ns(),
            "gpu_id": slot.info.get("gpu_id"),
            "gpu_uuid": slot.info.get("gpu_uuid"),
            "node_id": slot.info.get("node_id"),
            **lost,
            "action": "GPU taken out; its cell queued again",
        }
        self.record["events"].append(event)
        self.console.line(
            f"{slot.label} ({slot.info.get('gpu_uuid')}) lost while running {lost['cell_id']}: "
            f"{lost['message']}; taken out, the cell runs again on another GPU"
        )
        try:
            ray.kill(slot.actor)
        except Exception:  # noqa: BLE001 - already dead with its node
            pass

    def _set(self, slot: Slot, state: str, cell: str | None) -> None:
        slot.state, slot.cell, slot.since_ns = state, cell, mono_ns()
        parts = [f"{s.label} {s.state}" + (f" {s.cell}" if s.cell else "") for s in self.slots]
        self.console.line("GPUs: " + " | ".join(parts))


class RayWorld:
    """The driver's world for ``SweepRunner`` and ``_run_locked``: identity, hardware and the executor."""

    engine: str
    sampler_restarts = 0

    def __init__(self, engine: str, slots: list[Slot], executor: RayExecutor, address: str | None) -> None:
        self.engine = engine
        self.slots = slots
        self.executor = executor
        self.address = address
        first = slots[0].info
        self.hardware = first.get("hardware") or ""
        self.power_limit_w = first.get("power_limit_w")
        self.telemetry = SimpleNamespace(
            snapshot=lambda: SimpleNamespace(
                memory_total_mb=first.get("memory_total_mb"), power_w=first.get("idle_power_w")
            )
        )

    def identity(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "executor": "ray",
            "ray_address": self.address,
            "hardware": self.hardware,
            "power_limit_w": self.power_limit_w,
            "gpus": [
                {k: s.info.get(k) for k in ("gpu_id", "gpu_uuid", "gpu_name", "node_id", "host")} for s in self.slots
            ],
        }

    def check(self) -> None:
        return None  # each slot checks its own GPU; the driver has no device of its own


def _connect(opts: Any) -> tuple[bool, int]:
    """Join ``--ray-address`` or start a local cluster; (whether this call connected, GPUs of the cluster)."""
    import ray

    if ray.is_initialized():
        return False, int(ray.cluster_resources().get("GPU", 0))
    common: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
    if opts.ray_address is not None:
        try:
            ray.init(address=opts.ray_address, **common)
        except (ConnectionError, ValueError) as exc:
            raise ServiceUnavailableError(
                f"cannot join the Ray cluster at {opts.ray_address}: {exc}",
                fix="start it (ray start --head ...) or fix --ray-address",
            ) from None
    else:
        gpus = (opts.twin_gpus or 1) if opts.engine == "twin" else None
        ray.init(
            address="local",
            num_gpus=gpus,
            num_cpus=os.cpu_count() or 1,
            include_dashboard=False,
            object_store_memory=OBJECT_STORE_BYTES,
            **common,
        )
    return True, int(ray.cluster_resources().get("GPU", 0))


def _start_slots(opts: Any, spec: Any, run_dir: Path, run_id: str, n: int) -> list[Slot]:
    import ray
    from ray.exceptions import GetTimeoutError, RayError

    from harness.sweep.executors.slot import GpuSlot

    remote: Any = ray.remote(GpuSlot).options(num_gpus=1, num_cpus=0, max_restarts=0)  # ray's stubs type actors loosely
    actors: list[Any] = [
        remote.remote(opts.model_dump(), spec.model_dump(), str(run_dir.resolve()), run_id) for _ in range(n)
    ]
    try:
        infos = ray.get([a.info.remote() for a in actors], timeout=SLOT_START_TIMEOUT_S)
    except (RayError, GetTimeoutError) as exc:
        for a in actors:
            ray.kill(a)
        raise ServiceUnavailableError(
            f"the GPU slots did not start: {type(exc).__name__}: {str(exc)[:500]}",
            fix=f"see the worker logs under {run_dir}/logs/ray and Ray's own logs (/tmp/ray/session_latest/logs)",
        ) from None
    return [Slot(actor=a, info=i) for a, i in zip(actors, infos)]


@contextmanager
def open_ray_world(opts: Any, run_dir: Path, spec: Any, manifest: SweepManifest, console: Any) -> Iterator[RayWorld]:
    """Join or start the cluster, start one GPU slot per GPU (``--twin-gpus`` on the twin), yield the driver's world;
    on exit close the slots (their servers, twin devices and samplers stop) and leave the cluster."""
    with needs("--executor ray"):
        import ray
    connected, cluster_gpus = _connect(opts)
    slots: list[Slot] = []
    try:
        n = opts.twin_gpus if opts.engine == "twin" and opts.twin_gpus else cluster_gpus
        if n < 1 or n > cluster_gpus:
            raise UsageError(
                f"the Ray cluster has {cluster_gpus} GPU(s), the sweep asks for {n}",
                fix="start the cluster with more GPUs (ray start --num-gpus N) or ask for fewer (--twin-gpus)",
            )
        t0 = time.monotonic()
        slots = _start_slots(opts, spec, run_dir, manifest.run_id, n)
        console.line(
            f"ray: {n} GPU slot(s) ready in {time.monotonic() - t0:.1f} s: "
            + ", ".join(f"gpu{s.info['gpu_id']}={s.info['gpu_uuid']}@{s.info['host']}" for s in slots)
        )
        executor = RayExecutor(slots, manifest, run_dir, console)
        executor.record.update(
            kind="ray",
            address=opts.ray_address or "local",
            slots=[{k: v for k, v in s.info.items() if k != "world"} for s in slots],
            slots_start_s=round(time.monotonic() - t0, 3),
        )
        manifest.save(run_dir)  # the slots (GPU UUIDs, nodes, service pids) are on disk before any row
        yield RayWorld(opts.engine, slots, executor, opts.ray_address)
    finally:
        for s in slots:
            if s.state == "idle":  # stop its servers, twin device and sampler in order
                try:
                    ray.get(s.actor.close.remote(), timeout=60)
                except Exception:  # noqa: BLE001 - closing must not hide the run's own error
                    pass
            if s.state != "lost":  # a busy one (Ctrl-C, SIGTERM) is killed: its children die with it (PDEATHSIG)
                ray.kill(s.actor)
        if connected:
            ray.shutdown()
