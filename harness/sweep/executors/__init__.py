"""Where a sweep's cells run: here, one after another (``local``, the default), or as Ray tasks, one GPU each (``ray``).

The seam is ``SweepRunner``: executing a cell (launch, measure, build the row or error row) is ``SweepRunner._run_pending``
with its ``_commit`` left to the caller; writing (row store, manifest, console) is ``SweepRunner._commit`` in the
driver, the only writer of the run folder. ``local`` runs both in one process as before; ``ray`` runs the first in a
GPU-slot worker (``slot.py``) and hands the rows back to the driver (``ray_driver.py``). Nothing here imports ray at
module level: the core install has no ray, and ``--executor ray`` without it exits 7 naming the ``[ray]`` extra.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ContextManager

from harness.core.errors import UsageError


def open_sweep_world(opts: Any, run_dir: Path, spec: Any, manifest: Any, console: Any) -> ContextManager[Any]:
    """The world a sweep runs in: ``open_world`` for ``local``; for ``ray`` a driver-side world whose ``executor``
    runs the cells on the cluster's GPUs."""
    if opts.executor == "ray":
        from harness.sweep.executors.ray_driver import open_ray_world

        return open_ray_world(opts, run_dir, spec, manifest, console)
    from harness.world.world import open_world_for

    return open_world_for(
        opts,
        run_dir,
        spec=spec,
        launch_timeout_s=opts.launch_timeout_s,
        request_timeout_s=opts.request_timeout_s,
        stop_timeout_s=opts.stop_timeout_s,
        hardware=opts.hardware,
    )


def check_executor_options(opts: Any) -> None:
    """Option combinations the executors cannot run (checked before a run folder exists)."""
    if opts.executor == "local":
        if opts.ray_address is not None or opts.twin_gpus is not None:
            flag = "--ray-address" if opts.ray_address is not None else "--twin-gpus"
            raise UsageError(f"{flag} only applies to --executor ray", fix=f"add --executor ray, or drop {flag}")
        return
    if opts.sampler_url is not None or opts.twin_gpu_url is not None:
        raise UsageError(
            "--executor ray starts a twin GPU (or an NVML sampler) per Ray GPU itself, so it takes no "
            "--sampler-url / --twin-gpu",
            fix="drop --sampler-url and --twin-gpu",
        )
    if opts.twin_gpus is not None and opts.engine != "twin":
        raise UsageError(
            "--twin-gpus only applies to --engine twin (real GPUs are the Ray cluster's own)",
            fix="drop --twin-gpus; start the cluster with the GPUs to use (ray start --num-gpus N)",
        )
    if opts.power_caps or opts.sm_clocks:
        flag = "--power-caps" if opts.power_caps else "--sm-clocks"
        raise UsageError(
            f"{flag} is not supported with --executor ray yet (a cap or clock is set per device, "
            "and the passes are not sharded)",
            fix=f"sweep {flag} with --executor local",
        )
