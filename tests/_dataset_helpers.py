"""Programmatic sweep datasets for the dataset, report and rows tests (no committed fixture files)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Sequence

from harness.grid import ACTIONS, PUBLISHED_BATCH_SIZES, SpecConfig
from harness.runs.rows import SweepRow, error_row, grid_index, make_cell_id, pilot_row, to_native, to_published

HW = "twin:rtx4060-laptop"


def cell_truth(bs: int, cfg: SpecConfig) -> tuple[float, float, float]:
    """(accept length, speed, avg power) of a made-up but plausible cell."""
    if cfg.is_baseline:
        accept = 1.0
    else:
        accept = 1.0 + 1.5 * (1 - 0.6**cfg.steps) * (1 - 0.5**cfg.topk) * min(1.0, cfg.draft_tokens / 6)
    cost = 1.0 + 0.04 * cfg.steps * max(cfg.topk, 1) + 0.01 * cfg.draft_tokens * bs / 4
    speed = 100.0 * accept / cost * (1.0 - 0.01 * bs)
    power = min(79.0, 60.0 + 1.2 * cfg.steps * max(cfg.topk, 1) / 2 + 0.5 * bs + 0.2 * cfg.draft_tokens)
    return accept, speed, power


def grid_rows(
    *,
    repeats: int = 3,
    batch_sizes: Sequence[int] = PUBLISHED_BATCH_SIZES,
    configs: Sequence[SpecConfig] = ACTIONS,
    noise: float = 0.01,
    seed: int = 0,
    scale: float = 1.0,
    failing: Sequence[tuple[int, int, SpecConfig]] = ((0, 16, SpecConfig(5, 4, 16)),),
) -> list[SweepRow]:
    """A complete grid in published index order; ``failing`` cells (repeat, bs, config) are error rows."""
    rng = random.Random(seed)
    rows = []
    fail = set(failing)
    for rep in range(repeats):
        for bs in batch_sizes:
            for cfg in configs:
                idx = grid_index(rep, bs, cfg, batch_sizes, configs)
                cid = make_cell_id(rep, bs, cfg)
                if (rep, bs, cfg) in fail:
                    rows.append(
                        error_row(
                            hardware=HW,
                            index=idx,
                            repeat=rep,
                            batch_size=bs,
                            config=cfg,
                            error="EngineLaunchError: out of memory at mem_fraction 0.65",
                            cell_id=cid,
                            mem_fraction=0.65,
                        )
                    )
                    continue
                accept, speed, power = cell_truth(bs, cfg)
                speed *= scale * (1 + rng.gauss(0, noise))
                power *= 1 + rng.gauss(0, noise)
                tokens = max(16, bs) * 512
                wall = tokens / (speed * bs)
                energy = power * wall
                rows.append(
                    SweepRow(
                        hardware=HW,
                        index=idx,
                        repeat=rep,
                        batch_size=bs,
                        steps=cfg.steps,
                        topk=cfg.topk,
                        num_draft_tokens=cfg.draft_tokens,
                        is_baseline=cfg.is_baseline,
                        accept_length=round(accept, 3),
                        speed_tok_s=round(speed, 3),
                        speed_source="step_time",
                        step_time_s=round(accept / speed, 6),
                        wall_clock_s=round(wall, 3),
                        wall_clock_tok_s=round(tokens / wall, 3),
                        total_output_tokens=tokens,
                        energy_joules=round(energy, 2),
                        avg_power_watts=round(power, 2),
                        joules_per_token=round(energy / tokens, 5),
                        gpu_temp_c_before=55,
                        gpu_temp_c=70,
                        gpu_power_w=round(power, 1),
                        gpu_util_pct=95,
                        gpu_mem_used_mb=5300,
                        gpu_throttling=False,
                        cell_id=cid,
                        run_id="test",
                        power_limit_w=80.0,
                        mem_fraction=0.65,
                    )
                )
    return rows


def pilots(n_tb: int = 2, n_sb: int = 2, start: int = 0) -> list[SweepRow]:
    out = []
    for i in range(n_tb + n_sb):
        suite = "terminalbench" if i < n_tb else "swebench"
        cfg = [SpecConfig(0, 0, 0), SpecConfig(3, 4, 8), SpecConfig(3, 2, 4)][i % 3]
        out.append(
            pilot_row(
                suite=suite,
                hardware=HW,
                index=start + i,
                config=cfg,
                speed_tok_s=50.0 + i,
                wall_clock_s=900.0,
                total_output_tokens=40000,
                avg_power_watts=70.0,
                gpu_temp_c=70.0,
                accept_length=1.17,
                pilot_server_batch_size=16,
                pilot_task=f"task{i}",
            )
        )
    return out


def write_published(path: Path, rows: Sequence[SweepRow]) -> Path:
    path.write_text("".join(json.dumps(to_published(r)) + "\n" for r in rows))
    return path


def write_native(path: Path, rows: Sequence[SweepRow]) -> Path:
    path.write_text("".join(json.dumps(to_native(r)) + "\n" for r in rows))
    return path
