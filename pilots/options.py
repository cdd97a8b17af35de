"""The pilot configs and the options every pilot suite shares (``harness pilot swebench|terminalbench``)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, Sequence

from pydantic import ConfigDict, Field, field_validator, model_validator

from harness.core.errors import InvalidConfigError, UsageError
from harness.core.model_options import build
from harness.core.option_values import Seconds, refusal
from harness.engine.options import EngineOptions
from harness.grid import SpecConfig, parse_config
from harness.runs.rows import PILOT_SPEED_SOURCES

PILOT_CONFIGS: dict[str, SpecConfig] = {
    "no_spec": SpecConfig(0, 0, 0),
    "chosen": SpecConfig(3, 4, 8),
    "chosen_bs16": SpecConfig(3, 2, 4),
}
"""The published pilot configs: the baseline, the recipe for bs 1-8, and the recipe for bs 16."""

DEFAULT_CONFIGS: tuple[str, ...] = tuple(PILOT_CONFIGS)
PUBLISHED_SERVER_BATCH_SIZE = 16
PUBLISHED_PILOT_MEM_FRACTION = 0.55
SUITES: tuple[str, ...] = tuple(PILOT_SPEED_SOURCES)
"""The pilot suites: the ones ``harness.runs.rows`` knows a pilot speed source for."""


def select_configs(items: str | Sequence[str]) -> dict[str, SpecConfig]:
    """``"no_spec,chosen"`` (names) or ``"3:2:4"`` (raw triples, named by their label) -> ordered {name: config}."""
    parts = items.replace(";", ",").split(",") if isinstance(items, str) else list(items)
    out: dict[str, SpecConfig] = {}
    for raw in (p.strip() for p in parts):
        if not raw:
            continue
        if raw in PILOT_CONFIGS:
            out.setdefault(raw, PILOT_CONFIGS[raw])
        elif raw.count(":") == 2:
            cfg = parse_config(raw)
            out.setdefault(cfg.label, cfg)
        else:
            raise InvalidConfigError(
                f"unknown pilot config {raw!r}",
                fix="use names from " + ", ".join(PILOT_CONFIGS) + " or a triple like 3:4:8, comma-separated",
            )
    if not out:
        raise InvalidConfigError("--configs is empty", fix="e.g. --configs no_spec,chosen")
    return out


def _utc_stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


class PilotOptions(EngineOptions):
    """The options every pilot suite shares (the same flags and meanings as ``harness sweep`` where they overlap).

    Each field's description is its ``--help`` text (``pilots.cli`` builds the flags from this model).
    """

    model_config = ConfigDict(extra="forbid")

    suite: Literal["swebench", "terminalbench"]
    out: Path | None = Field(None, description="RUN_DIR (default results/<suite>-<utc>).")
    configs: list[str] = Field(
        default_factory=lambda: list(DEFAULT_CONFIGS),
        description="Pilot configs: names (no_spec,chosen,chosen_bs16) or s:k:d.",
    )
    fixture: bool = Field(False, description="Run the project's own offline instances/tasks.")
    server_batch_size: int = Field(
        PUBLISHED_SERVER_BATCH_SIZE, ge=1, description="Batch size the server is launched for (published 16)."
    )
    mem_fraction: float = Field(
        PUBLISHED_PILOT_MEM_FRACTION,
        gt=0,
        lt=1,
        description="--mem-fraction-static of the server (published pilot 0.55).",
    )
    request_timeout: Seconds = Field(1800.0, description="Seconds per LLM request.")
    launch_timeout: Seconds = Field(900.0, description="Seconds to wait for a server.")
    twin_faults: list[str] = Field(
        default_factory=list, description="Twin faults NAME or NAME@BS/s:k:d, comma-separated (e.g. runaway@16/3:2:4)."
    )
    run_id: str = Field(default_factory=_utc_stamp)

    @field_validator("engine")
    @classmethod
    def _pilot_engine(cls, engine: str) -> str:
        if engine == "vllm":
            raise refusal(UsageError("the pilots run the twin or sglang, not vllm", fix="use --engine twin or sglang"))
        return engine

    @field_validator("configs", "twin_faults", mode="before")
    @classmethod
    def _split_configs(cls, v: Any) -> Any:
        if isinstance(v, (list, tuple)):  # repeated flags, each possibly comma-separated
            v = ",".join(str(x) for x in v)
        if isinstance(v, str):
            return [p.strip() for p in v.replace(";", ",").split(",") if p.strip()]
        return v

    @model_validator(mode="after")
    def _check(self) -> "PilotOptions":
        select_configs(self.configs)  # raises InvalidConfigError naming the bad item
        if self.engine == "sglang" and self.time_scale != 1.0:
            raise UsageError("--time-scale only applies to the twin", fix="drop --time-scale or use --engine twin")
        if self.engine == "sglang" and self.twin_faults:
            raise UsageError("--twin-fault only applies to the twin", fix="drop --twin-fault or use --engine twin")
        return self

    @property
    def run_dir(self) -> Path:
        """``--out``, or ``results/<suite>-<run_id>``."""
        return Path(self.out) if self.out is not None else Path("results") / f"{self.suite}-{self.run_id}"

    def selected_configs(self) -> dict[str, SpecConfig]:
        return select_configs(self.configs)


def options_from_flags(flags: dict[str, Any], suite: str | None = None) -> PilotOptions:
    """``PilotOptions`` from parsed flag values (validation errors become ``UsageError`` naming the field)."""
    data = dict(flags)
    if suite is not None:
        data["suite"] = suite
    if data.get("suite") not in SUITES:
        raise UsageError(
            f"unknown or missing suite {data.get('suite')!r}",
            fix="use `harness pilot swebench` or `harness pilot terminalbench`",
        )
    return validated(PilotOptions, data)


def validated(model: type[Any], data: dict[str, Any]) -> Any:
    """``model(**data)``; a bad value is an ``OptionError`` naming its flag and the fix (as every options model)."""
    return build(model, data)
