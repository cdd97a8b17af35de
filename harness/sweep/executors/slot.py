"""One GPU slot of a Ray sweep: a worker that holds one GPU, opens the world for it and measures cells.

Ray places the worker (``ray_driver`` creates it with ``num_gpus=1``) and tells it which GPU it got
(``ray.get_gpu_ids()``, the same index Ray puts in ``CUDA_VISIBLE_DEVICES``, which the servers it launches inherit).
The worker opens the world for that GPU: on the twin a twin GPU device with that index (its own NVML-style UUID) and
its own sampler; on a GPU box the in-process NVML sampler of that GPU index. It measures cells with the sweep's own
code (``CellRunner``, a ``SweepRunner`` that writes nothing) and returns the rows: the driver writes them.

This module never imports ray at module level (``assigned_gpu`` and ``node_identity`` import it when called).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.clocks import wall_ns
from harness.core.errors import HarnessError
from harness.engine.spec import EngineSpec
from harness.runs.manifest import SweepManifest
from harness.runs.options import SweepOptions
from harness.runs.plan import Cell
from harness.runs.rows import SweepRow
from harness.sweep.console import SweepConsole
from harness.sweep.errors import InfrastructureLost
from harness.sweep.runner import SweepRunner


class CellRunner(SweepRunner):
    """A ``SweepRunner`` that measures cells and keeps their rows for the driver instead of writing them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rows: list[SweepRow] = []

    def _commit(self, row: SweepRow, cell: Cell) -> None:
        self.rows.append(row)

    def execute(self, cells: list[Cell]) -> None:
        """Run ``cells`` (one cell, or one config's cells in ``--launch-per config``) into ``self.rows``."""
        self._run_pending(cells)


@dataclass
class SlotReport:
    """What one unit of work returns: the rows measured (in order), and why the rest did not run, if they did not."""

    rows: list[SweepRow]
    lost: dict[str, Any] | None = None
    """``{"kind", "message", "cell_id"}`` when the GPU (device, sampler, GPU reads) or the worker failed."""
    launches: int = 0
    engine_identity: dict[str, Any] | None = None
    started_ns: int = 0
    ended_ns: int = 0


def assigned_gpu() -> int:
    """The GPU index Ray assigned to this worker (``num_gpus=1``)."""
    import ray

    ids = ray.get_gpu_ids()
    if len(ids) != 1:
        raise HarnessError(
            f"a GPU slot worker needs exactly one Ray GPU, got {ids!r}", fix="create the slot with num_gpus=1"
        )
    return int(ids[0])


def node_identity() -> dict[str, Any]:
    """Which node this worker runs on (Ray node id, host name, pid)."""
    import ray

    return {"node_id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(), "worker_pid": os.getpid()}


class GpuSlot:
    """The worker of one GPU (a Ray actor: ``ray.remote(GpuSlot)``); every call runs on its one GPU, one at a time."""

    def __init__(
        self,
        opts: dict[str, Any],
        spec: dict[str, Any],
        run_dir: str,
        run_id: str,
        gpu_id: int | None = None,
        node: dict[str, Any] | None = None,
    ) -> None:
        from harness.world.world import open_world_for

        self.opts = SweepOptions.model_validate(opts)
        self.gpu_id = assigned_gpu() if gpu_id is None else gpu_id
        self.node = node if node is not None else node_identity()
        slot_dir = Path(run_dir) / "logs" / "ray" / f"gpu{self.gpu_id}-{str(self.node['node_id'])[:8]}"
        slot_dir.mkdir(parents=True, exist_ok=True)
        o = self.opts
        self.world = open_world_for(  # a slot starts its own services (no --sampler-url/--twin-gpu under Ray)
            o,
            slot_dir,
            spec=EngineSpec.model_validate(spec),
            launch_timeout_s=o.launch_timeout_s,
            request_timeout_s=o.request_timeout_s,
            stop_timeout_s=o.stop_timeout_s,
            gpu_index=self.gpu_id,
            hardware=o.hardware,
        )
        ident = self.world.gpu_identity
        sample = self.world.telemetry.snapshot()
        self.uuid = ident.get("uuid") or (ident.get("sampler") or {}).get("uuid") or getattr(sample, "uuid", None)
        self.runner = CellRunner(
            self.opts, self.world, slot_dir, SweepManifest(run_id=run_id), SweepConsole(quiet=True)
        )
        self._memory_total_mb = getattr(sample, "memory_total_mb", None)
        self._idle_power_w = getattr(sample, "power_w", None)  # before any server: the manifest's idle_power_w

    def info(self) -> dict[str, Any]:
        """The slot's GPU and node, for the manifest and the driver's progress."""
        return {
            "gpu_id": self.gpu_id,
            "gpu_uuid": self.uuid,
            **self.node,
            "gpu_name": self.world.gpu_identity.get("name"),
            "hardware": self.world.hardware,
            "power_limit_w": self.world.power_limit_w,
            "memory_total_mb": self._memory_total_mb,
            "idle_power_w": self._idle_power_w,
            "twin_gpu_url": self.world.twin_gpu_url,
            "sampler_url": self.world.sampler_url,
            "services": self.world.child_pids,
            "world": self.world.identity(),
        }

    def run(self, cells: list[Cell]) -> SlotReport:
        """Measure ``cells`` on this GPU; a lost GPU or sampler stops the unit (no row for the cell it cut)."""
        report = SlotReport(rows=[], started_ns=wall_ns())
        before = self.runner.launches
        self.runner.rows = []
        try:
            self.runner.execute(cells)
        except InfrastructureLost as exc:
            report.lost = {"kind": exc.problem.kind, "message": exc.problem.message, "cell_id": exc.cell_id}
        except HarnessError as exc:  # the world refused a call outside a cell's own error handling
            done = {r.cell_id for r in self.runner.rows}
            cut = next((c.cell_id for c in cells if c.cell_id not in done), cells[-1].cell_id)
            report.lost = {"kind": "worker", "message": exc.message, "cell_id": cut}
        report.rows = [self._stamp(r) for r in self.runner.rows]
        report.launches = self.runner.launches - before
        report.engine_identity = self.runner.manifest.engine_identity
        report.ended_ns = wall_ns()
        return report

    def _stamp(self, row: SweepRow) -> SweepRow:
        """Which GPU (UUID, index, node) measured the row."""
        placement = {"kind": "ray", "gpu_id": self.gpu_id, "gpu_uuid": self.uuid, **self.node}
        return row.model_copy(
            update={"gpu_uuid": row.gpu_uuid or self.uuid, "extras": {**row.extras, "executor": placement}}
        )

    def pids(self) -> dict[str, int]:
        """This worker's pid and its services' pids (tests kill one to fail a GPU)."""
        return {"worker": os.getpid(), **self.world.child_pids}

    def close(self) -> None:
        self.world.close()
