"""One pilot trial (an instance or task at one config) and its dataset row."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.core.clocks import wall_ns
from harness.grid import SpecConfig
from harness.runs.measurement import measurement
from harness.runs.rows import make_pilot_cell_id, pilot_row, to_native
from harness.telemetry.windows import GpuSample, WindowStats
from pilots.telemetry import gpu_metrics


class PilotTrial(BaseModel):
    """One pilot trial, whatever the suite, in harness units.

    ``telemetry_mode`` says how the row's GPU fields are filled: ``snapshots`` (SWE-bench: the samples ``before`` and
    ``after`` the request) or ``window_average`` (Terminal-Bench: averages over the trial window, with null
    ``gpu_temp_c_before``, ``gpu_mem_used_mb`` and ``gpu_throttling``); see ``harness.runs.measurement``.
    """

    model_config = ConfigDict(extra="forbid")

    suite: Literal["swebench", "terminalbench"]
    config_name: str
    steps: int
    topk: int
    num_draft_tokens: int
    task_id: str
    status: str = "completed"
    success: bool | None = None
    start_ns: int | None = None
    end_ns: int | None = None
    elapsed_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    accept_length: float | None = None
    accept_length_source: str | None = None
    energy_joules: float | None = None
    avg_power_watts: float | None = None
    window: WindowStats | None = None
    before: GpuSample | None = None
    after: GpuSample | None = None
    telemetry_mode: Literal["snapshots", "window_average"] = "snapshots"
    note: str = ""
    record: dict[str, Any] = Field(default_factory=dict)
    """The suite's full per-trial record (written to ``telemetry/<config>.jsonl``)."""
    evaluation: dict[str, Any] | None = None

    @property
    def config(self) -> SpecConfig:
        return SpecConfig(self.steps, self.topk, self.num_draft_tokens)

    @property
    def gpu_metrics_before(self) -> dict[str, Any] | None:
        return gpu_metrics(self.before)

    @property
    def gpu_metrics_after(self) -> dict[str, Any] | None:
        return gpu_metrics(self.after)

    @property
    def output_tokens_per_s(self) -> float | None:
        if not self.completion_tokens or not self.elapsed_s:
            return None
        return self.completion_tokens / self.elapsed_s

    @property
    def joules_per_output_token(self) -> float | None:
        if self.energy_joules is None or not self.completion_tokens:
            return None
        return self.energy_joules / self.completion_tokens

    @property
    def window_valid(self) -> bool:
        return self.window is not None and self.window.valid


def trial_row(trial: PilotTrial, *, hardware: str, index: int, run_id: str, **extras: Any) -> dict[str, Any]:
    """The dataset row of one trial, as a native record: measurement fields from ``harness.runs.measurement`` (as the
    sweep's), the pilot semantics from ``harness.runs.rows.pilot_row`` (the one place for them).

    ``index`` is the trial's position in this run; ``harness dataset merge --pilots`` renumbers after the grid.
    ``extras`` are further row fields (an ``extras`` dict is merged into the row's ``extras``).
    """
    tps = trial.output_tokens_per_s
    note = (
        f"{trial.suite} {trial.task_id} at {trial.config_name} {trial.config}"
        f" ({trial.status}): {trial.note or 'end-to-end agentic request (prefill, decode and HTTP), not controlled decode throughput'}"
    )
    m = measurement(
        trial.window,
        trial.before,
        trial.after,
        window_power_w=trial.avg_power_watts,
        gpu_from="window" if trial.telemetry_mode == "window_average" else "after",
    )
    fields: dict[str, Any] = dict(
        accept_length=trial.accept_length,
        speed_tok_s=tps,
        wall_clock_s=trial.elapsed_s,
        wall_clock_tok_s=tps,
        total_output_tokens=trial.completion_tokens,
        energy_joules=trial.energy_joules,
        avg_power_watts=trial.avg_power_watts,
        joules_per_token=trial.joules_per_output_token,
        run_id=run_id,
        cell_id=make_pilot_cell_id(trial.suite, trial.config_name, trial.task_id),
        recorded_wall_ns=wall_ns(),
        window_start_ns=trial.start_ns,
        window_end_ns=trial.end_ns,
        accept_length_source=trial.accept_length_source,
        pilot_task=trial.task_id,
        pilot_config_name=trial.config_name,
        pilot_success=trial.success,
        extras={"prompt_tokens": trial.prompt_tokens, "status": trial.status},
        **m.model_dump(),
    )
    for k, v in extras.items():
        if k == "extras":
            fields["extras"].update(v)
        else:
            fields[k] = v
    return to_native(
        pilot_row(suite=trial.suite, hardware=hardware, index=index, config=trial.config, note=note, **fields)
    )
