"""The policy I/O contract: the 19 actions, the state features, the reward, and the dataset policies learn from.

Actions come from ``harness.grid`` (never re-implemented). Rows come from ``harness.dataset.load`` (a run folder,
a native ``rows.jsonl`` or a published 26-key ``dataset.jsonl``). Rows whose ``error`` is truthy are skipped (this
also keeps agentic pilot rows out) and ``is_baseline`` rows give the per-batch-size baseline speed, as published.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.core.errors import DataError, InvalidConfigError
from harness.grid import ACTIONS, BASELINE, N_ACTIONS, REFERENCE, action_index, effective
from harness.runs.rows import SweepRow, throttling_flags

__all__ = [
    "ACTIONS", "N_ACTIONS", "REFERENCE", "BASELINE", "STATE_DIM", "StateKind", "RewardOptions", "PolicyDataset",
    "state_vector", "row_reward", "band_score", "throughput_score", "thermal_multiplier", "load_dataset",
    "dataset_from_rows",
]  # fmt: skip

STATE_DIM = 4
MEM_NORMALISER_MB = 8192.0
PUBLISHED_BOARD_TOLERANCE = 0.05
"""A board whose total memory is within 5 % of 8192 MB (the published 8 GB laptop reports 8188 MiB) keeps the
published memory term under ``memory_term="auto"``; an 80 GB board (81559 MiB) normalises by its own total."""
StateKind = Literal["hindsight", "pre"]

_STATE_FIELDS: dict[str, tuple[str, str, str]] = {
    # published hindsight form: temp before the run, mem and util read AFTER the config ran
    "hindsight": ("gpu_temp_c_before", "gpu_mem_used_mb", "gpu_util_pct"),
    # honest pre-decision form: the harness's snapshot before the measured window
    "pre": ("pre_gpu_temp_c", "pre_gpu_mem_used_mb", "pre_gpu_util_pct"),
}


class RewardOptions(BaseModel):
    """How a row is scored. Defaults reproduce the published reward exactly."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    power_limit_w: float = Field(
        80.0,
        gt=0,
        description="the cap for rows that record none (published files: 80 W); "
        "with limit_source fixed, the cap for every row",
    )
    limit_source: Literal["row", "fixed"] = "row"
    """``row``: utilization = avg power / the row's enforced cap (``power_limit_w`` of native rows), else the fallback
    above; ``fixed``: always the fallback (the published constant)."""
    memory_term: Literal["published", "total", "auto"] = "published"
    """State feature 3: ``published`` = mem / 8192 MB (as published); ``total`` = mem / ``memory_total_mb`` (the GPU's
    total, from the run's manifest); ``auto`` = ``total`` when the run's board is not an 8 GB one like the published
    laptop (``resolve_memory_term``), else ``published``. A state option, kept here so train.json and evaluation.json
    record it (resolved: they say ``published`` or ``total`` and the divisor)."""
    memory_total_mb: float | None = Field(None, gt=0)
    band: tuple[float, float] = (0.95, 0.98)
    energy_weight: float = Field(0.5, ge=0, le=1, description="w in band^w * throughput^(1-w)")
    baseline_rule: Literal["last", "per_repeat"] = "last"
    throttle: Literal["any", "power_thermal"] = "any"

    @model_validator(mode="after")
    def _band_ordered(self) -> "RewardOptions":
        lo, hi = self.band
        if not 0 < lo <= hi:
            raise ValueError(f"band must satisfy 0 < low <= high, got {self.band}")
        return self

    @property
    def memory_normaliser_mb(self) -> float:
        """The divisor of the memory feature: 8192 (published) or the GPU's total."""
        if self.memory_term == "auto":
            return self.resolved().memory_normaliser_mb
        if self.memory_term == "total":
            if self.memory_total_mb is None:
                raise DataError(
                    "--memory-term total needs the GPU's total memory, which the run does not record",
                    fix="pass --memory-total-mb MB, or train on a run folder whose manifest.json records memory_total_mb",
                )
            return float(self.memory_total_mb)
        return MEM_NORMALISER_MB

    def resolved(self, memory_total_mb: float | None = None) -> "RewardOptions":
        """``auto`` made explicit: ``total`` with the board's total (``memory_total_mb``, else the one given) when it
        is more than ``PUBLISHED_BOARD_TOLERANCE`` away from the published 8192 MB, else ``published``."""
        if self.memory_term != "auto":
            return self
        total = self.memory_total_mb or memory_total_mb
        if total is not None and abs(total / MEM_NORMALISER_MB - 1.0) > PUBLISHED_BOARD_TOLERANCE:
            return self.model_copy(update={"memory_term": "total", "memory_total_mb": float(total)})
        return self.model_copy(update={"memory_term": "published"})

    def limit_of(self, row: SweepRow) -> float:
        """The cap a row's utilization is measured against (its enforced limit, else the fallback)."""
        if self.limit_source == "row" and row.power_limit_w:
            return float(row.power_limit_w)
        return self.power_limit_w


def state_vector(
    row: SweepRow | dict, kind: StateKind = "hindsight", mem_normaliser_mb: float = MEM_NORMALISER_MB
) -> list[float]:
    """``[bs/8, (temp or 40)/100, (mem or 0)/mem_normaliser_mb, (util or 0)/100]`` from the published or the
    pre-decision fields; the normaliser is 8192 as published, or the GPU's total (``RewardOptions.memory_term``)."""
    get: Callable[[str], Any] = row.get if isinstance(row, dict) else lambda k: getattr(row, k)
    t, m, u = _STATE_FIELDS[kind]
    return [get("batch_size") / 8.0, (get(t) or 40) / 100.0, (get(m) or 0) / mem_normaliser_mb, (get(u) or 0) / 100.0]


def band_score(u: float, band: tuple[float, float] = (0.95, 0.98)) -> float:
    """1 inside the band; u/low below it; max(0, 1 - 10 (u - high)) above it."""
    lo, hi = band
    if u < lo:
        return u / lo
    if u > hi:
        return max(0.0, 1.0 - 10.0 * (u - hi))
    return 1.0


def throughput_score(speed: float, baseline_speed: float) -> float:
    """clip((speed / baseline - 1) / 2, 0, 1)."""
    return float(np.clip((speed / baseline_speed - 1.0) / 2.0, 0.0, 1.0))


def thermal_multiplier(temp_c: float | None, throttled: bool) -> float:
    """x0.5 above 80 C, else x0.8 above 75 C; x0.3 when throttled (the factors multiply)."""
    t = temp_c or 0.0
    m = 0.5 if t > 80 else 0.8 if t > 75 else 1.0
    return m * (0.3 if throttled else 1.0)


def _throttled(row: SweepRow, rule: str) -> tuple[bool, bool]:
    """(throttled flag under ``rule``, whether the published any-bit flag had to stand in for the power/thermal one)."""
    if rule == "any":
        return bool(row.gpu_throttling), False
    if row.gpu_throttling_power_thermal is not None:
        return row.gpu_throttling_power_thermal, False
    _, power_thermal = throttling_flags(row.clock_event_reasons)
    if power_thermal is not None:
        return power_thermal, False
    return bool(row.gpu_throttling), True


def row_reward(row: SweepRow, baseline_speed: float, options: RewardOptions = RewardOptions()) -> float:
    """The published reward of one row in [0, 1], utilization against the row's enforced cap (``limit_of``); an
    errored row scores 0."""
    if row.error:
        return 0.0
    assert (
        row.avg_power_watts is not None and row.speed_tok_s is not None
    )  # a successful row has both (the loader checks)
    u = row.avg_power_watts / options.limit_of(row)
    w = options.energy_weight
    combined = band_score(u, options.band) ** w * throughput_score(row.speed_tok_s, baseline_speed) ** (1.0 - w)
    throttled, _ = _throttled(row, options.throttle)
    return float(np.clip(combined * thermal_multiplier(row.gpu_temp_c, throttled), 0.0, 1.0))


@dataclass(frozen=True)
class PolicyDataset:
    """Usable rows of a sweep as arrays: one entry per non-error row, in file order."""

    states: np.ndarray  # (n, 4) float64
    actions: np.ndarray  # (n,) int, index into ACTIONS
    rewards: np.ndarray  # (n,) float64
    batch_sizes: np.ndarray  # (n,) int
    repeats: np.ndarray  # (n,) int, -1 when the row has none
    speeds: np.ndarray  # (n,) tok/s per sequence
    utilization: np.ndarray  # (n,) avg power / power limit
    rows: tuple[SweepRow, ...]
    state_kind: StateKind = "hindsight"
    reward_options: RewardOptions = field(default_factory=RewardOptions)
    source: str = "<memory>"
    skipped_errors: int = 0
    throttle_fallbacks: int = 0

    def __len__(self) -> int:
        return len(self.actions)

    @property
    def batch_size_list(self) -> list[int]:
        return sorted(set(int(b) for b in self.batch_sizes))

    @property
    def repeat_list(self) -> list[int]:
        return sorted(set(int(r) for r in self.repeats))

    def subset(self, mask: np.ndarray) -> "PolicyDataset":
        idx = np.flatnonzero(mask)
        arrays = {
            k: getattr(self, k)[idx]
            for k in ("states", "actions", "rewards", "batch_sizes", "repeats", "speeds", "utilization")
        }
        return replace(self, rows=tuple(self.rows[i] for i in idx), **arrays)

    def legal_mask(self, batch_size: int) -> np.ndarray:
        """(19,) bool: the actions present at this batch size (the only ones a pick may choose, as published)."""
        mask = np.zeros(N_ACTIONS, dtype=bool)
        mask[self.actions[self.batch_sizes == batch_size]] = True
        return mask

    def first_state(self, batch_size: int) -> np.ndarray:
        """The state of this batch size's first row (the published pick state)."""
        i = np.flatnonzero(self.batch_sizes == batch_size)
        if len(i) == 0:
            raise DataError(f"no usable rows at batch size {batch_size}", fix=f"use one of {self.batch_size_list}")
        return self.states[i[0]]

    def cell_means(self, values: np.ndarray | None = None) -> dict[int, np.ndarray]:
        """Per batch size, the (19,) mean of ``values`` (rewards by default) per action; NaN where never logged."""
        v = self.rewards if values is None else values
        out: dict[int, np.ndarray] = {}
        for bs in self.batch_size_list:
            sel = self.batch_sizes == bs
            sums = np.bincount(self.actions[sel], weights=v[sel], minlength=N_ACTIONS)
            counts = np.bincount(self.actions[sel], minlength=N_ACTIONS)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[bs] = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        return out

    def pscores(self) -> np.ndarray:
        """Known logging propensities: uniform over the actions logged at each row's batch size (1/19 on a full grid)."""
        n_legal = {bs: int(self.legal_mask(bs).sum()) for bs in self.batch_size_list}
        return np.array([1.0 / n_legal[int(b)] for b in self.batch_sizes])


def _action_of(row: SweepRow, where: str) -> int:
    try:
        return action_index(effective(row.steps, row.topk, row.num_draft_tokens))
    except InvalidConfigError as exc:
        raise DataError(
            f"{where}: unknown config ({exc.message})",
            fix="policies learn only the 19 published actions (harness.grid.ACTIONS)",
        ) from None


def _baselines(rows: Sequence[SweepRow], rule: str) -> dict[tuple[int, int | None], float]:
    """Baseline speed per batch size (``last``: the last baseline row wins) or per (batch size, repeat)."""
    out: dict[tuple[int, int | None], float] = {}
    for row in rows:
        if row.is_baseline and not row.error and row.speed_tok_s:
            out[(row.batch_size, row.repeat if rule == "per_repeat" else None)] = float(row.speed_tok_s)
    return out


def dataset_from_rows(
    rows: Sequence[SweepRow],
    *,
    state: StateKind = "hindsight",
    reward: RewardOptions = RewardOptions(),
    source: str = "<memory>",
) -> PolicyDataset:
    """Build the training arrays; raises DataError for datasets policies cannot learn from."""
    usable = [r for r in rows if not r.error]
    if not usable:
        raise DataError(
            f"{source}: no usable rows (every row has an error)", fix="train on a sweep with successful cells"
        )
    baselines = _baselines(usable, reward.baseline_rule)
    if not baselines:
        raise DataError(
            f"{source}: no baseline rows (is_baseline true with a speed)", fix="include the (0,0,0) config in the sweep"
        )
    if state == "pre":
        missing = [
            r.index
            for r in usable
            if r.pre_gpu_temp_c is None and r.pre_gpu_mem_used_mb is None and r.pre_gpu_util_pct is None
        ]
        if len(missing) == len(usable):
            raise DataError(
                f"{source}: --state pre needs the pre-decision fields (pre_gpu_temp_c ...), which no row carries",
                fix="train on the native rows.jsonl (or the run folder), or use --state hindsight for a published dataset.jsonl",
            )
    mem_norm = reward.memory_normaliser_mb
    cols: dict[str, list] = {k: [] for k in ("states", "actions", "rewards", "bs", "rep", "speed", "util")}
    fallbacks = 0
    for row in usable:
        where = f"{source}: row index {row.index}"
        if row.speed_tok_s is None or row.avg_power_watts is None:
            raise DataError(
                f"{where} has no speed_tok_s or avg_power_watts but no error either",
                fix="mark failed cells with an error",
            )
        key = (row.batch_size, row.repeat if reward.baseline_rule == "per_repeat" else None)
        if key not in baselines:
            what = f"batch size {row.batch_size}" + (
                f", repeat {row.repeat}" if reward.baseline_rule == "per_repeat" else ""
            )
            raise DataError(
                f"{source}: no baseline row for {what}",
                fix="every batch size (and repeat, with per_repeat) needs a (0,0,0) row",
            )
        cols["actions"].append(_action_of(row, where))
        cols["states"].append(state_vector(row, state, mem_norm))
        cols["rewards"].append(row_reward(row, baselines[key], reward))
        fallbacks += _throttled(row, reward.throttle)[1]
        cols["bs"].append(row.batch_size)
        cols["rep"].append(-1 if row.repeat is None else row.repeat)
        cols["speed"].append(float(row.speed_tok_s))
        cols["util"].append(row.avg_power_watts / reward.limit_of(row))
    return PolicyDataset(
        states=np.asarray(cols["states"], dtype=np.float64),
        actions=np.asarray(cols["actions"], dtype=np.int64),
        rewards=np.asarray(cols["rewards"], dtype=np.float64),
        batch_sizes=np.asarray(cols["bs"], dtype=np.int64),
        repeats=np.asarray(cols["rep"], dtype=np.int64),
        speeds=np.asarray(cols["speed"], dtype=np.float64),
        utilization=np.asarray(cols["util"], dtype=np.float64),
        rows=tuple(usable),
        state_kind=state,
        reward_options=reward,
        source=source,
        skipped_errors=len(rows) - len(usable),
        throttle_fallbacks=fallbacks,
    )


def load_dataset(
    path: str | Path,
    *,
    state: StateKind = "hindsight",
    reward: RewardOptions = RewardOptions(),
    windows: str = "exclude",
    power_cap: str | None = None,
    sm_clock: str | None = None,
) -> PolicyDataset:
    """Load a run folder, a native rows.jsonl or a published dataset.jsonl into a PolicyDataset.

    Rows come from the one loader (``harness.dataset.load``, validate's checks): a torn line, NaN/inf or duplicate
    cells stop training; invalid-window rows are excluded unless ``windows="keep"`` (``"fail"`` refuses them). With
    ``memory_term="total"`` and no ``memory_total_mb``, the total comes from the run's manifest.json.
    """
    from harness.dataset import load, print_notes

    if reward.memory_term in ("total", "auto") and reward.memory_total_mb is None:
        total = manifest_memory_total_mb(path)
        if total is not None:
            reward = reward.model_copy(update={"memory_total_mb": total})
    reward = reward.resolved()
    loaded = load(path, windows=windows)  # type: ignore[arg-type]
    print_notes(loaded)
    try:
        return dataset_from_rows(
            rows_of_one_cap(loaded.rows, power_cap, path, sm_clock), state=state, reward=reward, source=str(path)
        )
    except DataError as exc:
        hidden = [r for r in loaded.excluded if r.is_baseline]
        if "no baseline row" not in exc.message or not hidden:
            raise
        sizes = ", ".join(str(bs) for bs in sorted({r.batch_size for r in hidden}))
        raise DataError(
            f"{exc.message}: the baseline rows of batch size {sizes} were excluded for an invalid measurement window",
            fix="pass --invalid-windows keep to use them (their window flags say what went wrong; a loaded host "
            "flags windows it still measured), or measure those cells again",
        ) from None


def rows_of_one_cap(
    rows: list[SweepRow], power_cap: str | None, path: str | Path, sm_clock: str | None = None
) -> list[SweepRow]:
    """The rows of one sweep pass: one power cap (``harness sweep --power-caps``) and one locked SM clock
    (``--sm-clocks``). A policy's state has neither and baselines are per batch size, so rows of several passes are
    never pooled: naming none of several caps (or clocks) is a DataError."""
    from harness.runs.rows import pass_of

    for dimension, want, what, flag in (
        ("cap", power_cap, "power cap", "--power-cap"),
        ("clock", sm_clock, "SM clock", "--sm-clock"),
    ):
        labels = sorted({p for p in (pass_of(r).get(dimension) for r in rows) if p is not None})
        if want is None:
            if len(labels) > 1:
                raise DataError(
                    f"{path}: rows from {len(labels)} {what}s ({', '.join(labels)}); a policy's state has no "
                    f"{what} and its baselines are per batch size, so they are never pooled",
                    fix=f"train and evaluate one {what} at a time: {flag} {labels[0]}",
                )
            continue
        if want not in labels:
            raise DataError(
                f"{path}: no rows at {what} {want!r}", fix=f"one of: {', '.join(labels) or f'(no rows with a {what})'}"
            )
        rows = [r for r in rows if pass_of(r).get(dimension) == want]
    return rows


def manifest_memory_total_mb(path: str | Path) -> float | None:
    """``memory_total_mb`` recorded in the manifest.json of a run folder (or of the folder holding a rows file)."""
    import json

    p = Path(path)
    manifest = (p if p.is_dir() else p.parent) / "manifest.json"
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return None
    for where in (data.get("world", {}).get("gpu", {}), data.get("world", {}).get("gpu", {}).get("sampler", {}), data):
        v = where.get("memory_total_mb") if isinstance(where, dict) else None
        if isinstance(v, (int, float)) and v > 0:
            return float(v)
    return None


def batch_sizes_of(states: np.ndarray) -> np.ndarray:
    """Batch sizes encoded in states (feature 0 is bs/8)."""
    return np.rint(np.atleast_2d(states)[:, 0] * 8.0).astype(np.int64)


def nearest(batch_size: int, known: Sequence[int]) -> int:
    """The known batch size closest to ``batch_size`` (ties go to the smaller one)."""
    return min(known, key=lambda b: (abs(b - batch_size), b))
