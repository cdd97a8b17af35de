"""The plan of a sweep: its cells in execution order, each with its published index and cell id, and the requests per
cell the band probe sized (``sized_prompts``)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Mapping

from harness.gpu.gpu_pass import GpuPass
from harness.grid import SpecConfig
from harness.runs.options import SweepOptions
from harness.runs.rows import grid_index, make_cell_id


@dataclass(frozen=True)
class Cell:
    repeat: int
    batch_size: int
    config: SpecConfig
    index: int
    gpu_pass: GpuPass = GpuPass()
    """The GPU settings of the cell's pass (the ``--power-caps`` and ``--sm-clocks`` labels)."""

    @property
    def cell_id(self) -> str:
        prefix = [self.gpu_pass.slug] if self.gpu_pass.slug else []
        return "-".join([*prefix, make_cell_id(self.repeat, self.batch_size, self.config)])

    @property
    def pass_key(self) -> tuple[int, GpuPass]:
        """(repeat, GPU settings): the cells of one pass share it (the device settings are set once per pass)."""
        return self.repeat, self.gpu_pass


def plan_cells(opts: SweepOptions) -> list[Cell]:
    """Every cell in execution order: one whole pass per repeat; per cell: batch size then config; per config:
    config then batch size. Indexes follow the published order (repeat, batch size, config) in both modes."""
    configs, sizes = opts.spec_configs, opts.batch_sizes
    settings = GpuPass.grid(opts.power_caps, opts.sm_clocks)  # caps outer, clocks inner
    per_pass = len(configs) * len(sizes)
    cells: list[Cell] = []
    for r in range(opts.repeats):
        pairs = (
            [(bs, c) for bs in sizes for c in configs]
            if opts.launch_per == "cell"
            else [(bs, c) for c in configs for bs in sizes]
        )
        for i, gpu_pass in enumerate(settings):  # one pass per (repeat, cap, clock): each set once per pass
            offset = (r * (len(settings) - 1) + i) * per_pass  # passes after the first shift the published index
            cells += [Cell(r, bs, c, grid_index(r, bs, c, sizes, configs) + offset, gpu_pass) for bs, c in pairs]
    return cells


def derive_seed(seed: int, key: str) -> int:
    """A launch's twin seed from the run's seed and the launch key (the same cell gets the same seed on resume)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{key}".encode()).digest()[:4], "big")


PUBLISHED_MIN_REQUESTS = 16
"""The published protocol measures max(16, batch size) requests per cell."""


def measured_requests(batch_size: int, num_prompts: int | None = None, sized: Mapping[int, int] | None = None) -> int:
    """Requests a cell measures: the band probe's sized count for its batch size, else ``--num-prompts``, else the
    published max(16, batch size). The bench, the active sweep's estimate and the twin's calibration all ask here."""
    if sized and batch_size in sized:
        return sized[batch_size]
    return num_prompts if num_prompts is not None else max(PUBLISHED_MIN_REQUESTS, batch_size)


def sized_prompts(preflight: Mapping[str, Any] | None) -> dict[int, int]:
    """The probe's requests per batch size, from a manifest's ``preflight`` (empty: the published counts)."""
    workload = ((preflight or {}).get("probe") or {}).get("workload") or {}
    return {int(bs): int(n) for bs, n in (workload.get("num_prompts_by_bs") or {}).items()}
