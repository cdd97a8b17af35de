"""``TrainOptions``: the options of ``harness train``, one source for its flags, ``--config`` files,
``--print-config`` and the ``options`` that ``train.json`` records (``harness.core.model_options``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from harness.core.model_options import Flag, OptionsModel
from harness.core.option_values import check_band, checked_by, input_path
from harness.dataset.loader import WINDOW_RULE_HELP

DATA, REWARD, POLICIES = "Data", "Reward (the published scripts' options by default)", "Policies"
"""Help panels of ``harness train``."""


def one_cap(value: Any) -> str | None:
    """One pass's cap as a sweep labels it (``60W`` -> ``60``), so the label names the pass the sweep ran."""
    from harness.gpu.power_cap import parse_power_caps

    return None if value is None else parse_power_caps([value])[0]


def one_clock(value: Any) -> str | None:
    """One pass's SM clock as a sweep labels it (``default`` -> ``max``)."""
    from harness.gpu.sm_clocks import parse_sm_clocks

    return None if value is None else parse_sm_clocks([value])[0]


class TrainOptions(OptionsModel):
    """What to train on (dataset, state, rows), the reward the policies learn, and which policies with which
    hyper-parameters."""

    model_config = ConfigDict(extra="forbid")

    dataset: Annotated[Path, input_path("--dataset"), Flag(DATA)] = Field(
        description="run folder, native rows.jsonl or published dataset.jsonl"
    )
    out: Path = Field(description="models folder: <algo>/<artifact>, picks.json, train.json")
    algos: Annotated[str, Flag(POLICIES)] = Field("all", description="comma-separated algorithms, or 'all'")
    seed: Annotated[int, Flag(POLICIES)] = Field(0, description="seed for every algorithm")
    state: Annotated[Literal["hindsight", "pre"], Flag(DATA)] = Field(
        "hindsight", description="hindsight (published) or pre (pre-decision snapshot)"
    )
    tune: Annotated[bool, Flag(POLICIES, flag="--tune/--no-tune")] = Field(
        False, description="also train cql_tuned and bcq_tuned, tuned on held-out repeats"
    )
    power_limit: Annotated[float, Flag(REWARD)] = Field(
        80.0, gt=0, allow_inf_nan=False, description="watts; the cap of rows that record none (published files: 80)"
    )
    limit_source: Annotated[Literal["row", "fixed"], Flag(REWARD)] = Field(
        "row", description="row (each row's enforced cap) or fixed (--power-limit for every row)"
    )
    memory_term: Annotated[Literal["published", "total", "auto"], Flag(REWARD)] = Field(
        "auto",
        description="state memory term: published (mem/8192), total (mem/GPU total from the manifest) or auto (total "
        "on a board that is not 8 GB like the published laptop, else published; train.json records which)",
    )
    memory_total_mb: Annotated[float | None, Flag(REWARD, default_text="the manifest's")] = Field(
        None, gt=0, allow_inf_nan=False, description="GPU total memory for --memory-term total"
    )
    band: Annotated[tuple[float, float], checked_by(check_band), Flag(REWARD, default_text="0.95,0.98")] = Field(
        (0.95, 0.98), description="utilization band LOW,HIGH"
    )
    baseline_rule: Annotated[Literal["last", "per_repeat"], Flag(REWARD)] = Field(
        "last", description="last (published) or per_repeat"
    )
    throttle: Annotated[Literal["any", "power_thermal"], Flag(REWARD)] = Field(
        "any", description="any (published, idle bit counts) or power_thermal"
    )
    energy_weight: Annotated[float, Flag(REWARD)] = Field(0.5, ge=0, le=1, description="w in band^w * throughput^(1-w)")
    param: Annotated[list[str], Flag(POLICIES, repeat=True)] = Field(
        default_factory=list,
        description="ALGO.OPTION=VALUE, repeatable (e.g. linucb.alpha=1, cql.td_loss=huber); see docs/policies.md",
    )
    invalid_windows: Annotated[Literal["exclude", "keep", "fail"], Flag(DATA)] = Field(
        "exclude", description=WINDOW_RULE_HELP
    )
    power_cap: Annotated[str | None, checked_by(one_cap), Flag(DATA)] = Field(
        None, description="the cap pass to use when the sweep ran several (--power-caps), e.g. 60"
    )
    sm_clock: Annotated[str | None, checked_by(one_clock), Flag(DATA)] = Field(
        None, description="the SM clock pass to use when the sweep ran several (--sm-clocks), e.g. 1410 or max"
    )
