"""A SYNTHETIC 3-repeat grid (19 actions x 4 batch sizes x 3 repeats = 228 rows) for tests and benchmarks.

Not measured on any GPU and not produced by the twin: numbers are drawn from a seeded generator so that the best
action per batch size is known (the published recipe: (3,4,8) at bs 1, 4, 8 and (3,2,4) at bs 16). Rows are native
``SweepRow`` records (the 26 published keys plus the pre-decision snapshot and the raw clock-event mask).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.grid import ACTIONS, PUBLISHED_BATCH_SIZES, SpecConfig, action_index
from harness.runs.rows import PUBLISHED_KEYS, SweepRow, from_native

RECIPE: dict[int, SpecConfig] = {
    1: SpecConfig(3, 4, 8),
    4: SpecConfig(3, 4, 8),
    8: SpecConfig(3, 4, 8),
    16: SpecConfig(3, 2, 4),
}
FAILING_CELL = (16, SpecConfig(5, 4, 16))  # fails to launch in every repeat, as in the published sweep


def synthetic_records(seed: int = 0, *, errors: bool = True, power_limit_w: float = 80.0) -> list[dict[str, Any]]:
    """228 native row dicts in published index order (whole pass per repeat, then batch size, then action)."""
    rng = np.random.default_rng(seed)
    table = np.random.default_rng(1234)  # the fixed "physics" of the synthetic GPU, independent of ``seed``
    ratio = {bs: table.uniform(1.05, 1.9, len(ACTIONS)) for bs in PUBLISHED_BATCH_SIZES}
    util = {bs: table.uniform(0.80, 1.03, len(ACTIONS)) for bs in PUBLISHED_BATCH_SIZES}
    for bs, cfg in RECIPE.items():
        ratio[bs][action_index(cfg)], util[bs][action_index(cfg)] = 2.7, 0.965
        ratio[bs][0], util[bs][0] = 1.0, 0.85
    base_speed = {1: 97.0, 4: 95.0, 8: 93.0, 16: 90.0}
    records: list[dict[str, Any]] = []
    temp = 45.0
    for repeat in range(3):
        for bs in PUBLISHED_BATCH_SIZES:
            for a, cfg in enumerate(ACTIONS):
                index = len(records)
                failed = errors and (bs, cfg) == FAILING_CELL
                records.append(
                    _record(
                        index,
                        repeat,
                        bs,
                        cfg,
                        failed,
                        ratio[bs][a],
                        util[bs][a],
                        base_speed[bs],
                        temp,
                        rng,
                        power_limit_w,
                    )
                )
                temp = min(78.0, temp + 0.15) if not failed else temp
    return records


def _record(index: int, repeat: int, bs: int, cfg: SpecConfig, failed: bool, ratio: float, util: float,
            base: float, temp: float, rng: np.random.Generator, power_limit_w: float) -> dict[str, Any]:  # fmt: skip
    rec: dict[str, Any] = {k: None for k in PUBLISHED_KEYS}
    rec.update(hardware="synthetic", index=index, repeat=repeat, batch_size=bs, steps=cfg.steps, topk=cfg.topk,
               num_draft_tokens=cfg.draft_tokens, is_baseline=cfg.is_baseline)  # fmt: skip
    if failed:
        rec.update(error="synthetic launch failure: out of memory", retry_mem_fraction=0.55)
        return rec
    speed = base * ratio * (1 + rng.normal(0, 0.02))
    u = util + rng.normal(0, 0.004)
    power = u * power_limit_w
    tokens = 512 * max(16, bs)
    wall = tokens / (speed * bs)
    mask = int(rng.choice([0, 0, 0, 0, 0x1, 0x4])) if not (cfg.is_baseline or RECIPE[bs] == cfg) else 0
    rec.update(
        accept_length=round(1.0 if cfg.is_baseline else min(ratio * 1.05, cfg.draft_tokens), 4),
        speed_tok_s=round(speed, 4), speed_source="step_time", step_time_s=round(1 / speed, 6), wall_clock_s=round(wall, 4),
        wall_clock_tok_s=round(tokens / wall, 4), total_output_tokens=tokens, energy_joules=round(power * wall, 4),
        avg_power_watts=round(power, 4), joules_per_token=round(power * wall / tokens, 6),
        gpu_temp_c_before=round(temp, 1), gpu_temp_c=round(temp + 2 * u, 1), gpu_power_w=round(power * 0.97, 3),
        gpu_util_pct=round(min(100.0, 100 * u), 1), gpu_mem_used_mb=round(4200 + 40 * cfg.steps * max(cfg.topk, 1) + 10 * bs, 1),
        gpu_throttling=mask != 0, clock_event_reasons=mask, gpu_throttling_power_thermal=bool(mask & 0x4),
        pre_gpu_temp_c=round(temp - 0.5, 1), pre_gpu_mem_used_mb=310.0, pre_gpu_util_pct=0.0, power_limit_w=power_limit_w,
    )  # fmt: skip
    return rec


def synthetic_rows(seed: int = 0, **kwargs: Any) -> list[SweepRow]:
    return [from_native(r, where=f"synthetic row {r['index']}") for r in synthetic_records(seed, **kwargs)]
