"""Reading a Harbor job folder: trial ``result.json`` files (UTC times), the job ``result.json`` (naive local time),
and the Terminus 2 trajectory (ATIF) for the last step's time.

``harbor run`` exits 0 even when every trial failed, so outcomes come only from these files. The pydantic models
below are the subset of Harbor 0.25's ``TrialResult`` / ``JobResult`` this pilot reads (extra fields allowed); the
tests check them against Harbor's own models in the Harbor venv.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field

from harness.core.clocks import parse_iso_ns
from harness.core.errors import DataError, MissingFileError


class TimingInfo(BaseModel):
    model_config = ConfigDict(extra="allow")
    started_at: str | None = None
    finished_at: str | None = None


class ExceptionInfo(BaseModel):
    model_config = ConfigDict(extra="allow")
    exception_type: str
    exception_message: str = ""
    occurred_at: str | None = None


class AgentContext(BaseModel):
    model_config = ConfigDict(extra="allow")
    n_input_tokens: int | None = None
    n_cache_tokens: int | None = None
    n_output_tokens: int | None = None
    cost_usd: float | None = None
    metadata: dict[str, Any] | None = None


class VerifierResult(BaseModel):
    model_config = ConfigDict(extra="allow")
    rewards: dict[str, float | int] | None = None


class ModelInfo(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str | None = None
    provider: str | None = None


class AgentInfo(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    version: str | None = None
    model_info: ModelInfo | None = None


class HarborTrialResult(BaseModel):
    """The fields of Harbor's ``TrialResult`` the pilot reads (trial times are UTC, written with ``Z``)."""

    model_config = ConfigDict(extra="allow")
    id: str
    task_name: str
    trial_name: str
    source: str | None = None
    agent_info: AgentInfo | None = None
    agent_result: AgentContext | None = None
    verifier_result: VerifierResult | None = None
    exception_info: ExceptionInfo | None = None
    started_at: str | None = None
    finished_at: str | None = None
    environment_setup: TimingInfo | None = None
    agent_setup: TimingInfo | None = None
    agent_execution: TimingInfo | None = None
    verifier: TimingInfo | None = None


class HarborJobResult(BaseModel):
    """Harbor's ``JobResult`` as written to disk (no ``trial_results``); its times are NAIVE LOCAL time."""

    model_config = ConfigDict(extra="allow")
    id: str
    started_at: str | None = None
    updated_at: str | None = None
    finished_at: str | None = None
    n_total_trials: int = 0
    stats: dict[str, Any] = Field(default_factory=dict)


class TrialOutcome(BaseModel):
    """One trial in harness units: wall-ns edges, success, tokens, per-call durations, failure cause."""

    trial_name: str
    task_name: str
    trial_dir: str
    agent_start_ns: int | None
    agent_end_ns: int | None
    trial_start_ns: int | None
    trial_end_ns: int | None
    reward: float | None
    success: bool | None
    exception_type: str | None
    exception_message: str | None
    n_input_tokens: int | None
    n_cache_tokens: int | None
    n_output_tokens: int | None
    api_request_times_msec: list[float]
    n_episodes: int | None
    summarization_count: int | None
    last_step_ns: int | None
    n_steps: int | None
    model_name: str | None

    @property
    def agent_wall_s(self) -> float | None:
        if self.agent_start_ns is None or self.agent_end_ns is None:
            return None
        return (self.agent_end_ns - self.agent_start_ns) / 1e9

    @property
    def timed_out(self) -> bool:
        return self.exception_type == "AgentTimeoutError"

    @property
    def status(self) -> str:
        if self.agent_start_ns is None:
            return "environment_error" if self.exception_type else "not_run"
        if self.timed_out:
            return "timeout"
        if self.exception_type:
            return "agent_error"
        return "completed"


def _iso(text: str | None) -> int | None:
    """UTC ns of a trial timestamp (Harbor writes these with ``Z``); naive input is rejected by ``parse_iso_ns``."""
    return parse_iso_ns(text) if text else None


def reward_of(verifier: VerifierResult | None) -> float | None:
    """``reward`` from reward.txt, or the single value of a one-key reward.json; None when the verifier did not run."""
    if verifier is None or not verifier.rewards:
        return None
    if "reward" in verifier.rewards:
        return float(verifier.rewards["reward"])
    if len(verifier.rewards) == 1:
        return float(next(iter(verifier.rewards.values())))
    return None


def last_step(trial_dir: Path) -> tuple[int | None, int | None]:
    """(UTC ns of the last ATIF step, number of steps) from ``agent/trajectory.json``; (None, None) when absent."""
    path = trial_dir / "agent" / "trajectory.json"
    if not path.exists():
        return None, None
    try:
        steps = json.loads(path.read_text()).get("steps") or []
    except (json.JSONDecodeError, OSError, AttributeError):
        return None, None
    stamps = [parse_iso_ns(s["timestamp"]) for s in steps if isinstance(s, dict) and s.get("timestamp")]
    return (max(stamps) if stamps else None), len(steps)


def read_trial(trial_dir: Path) -> TrialOutcome:
    path = trial_dir / "result.json"
    if not path.exists():
        raise MissingFileError(
            f"no result.json in trial folder {trial_dir}", fix="the trial did not finish; rerun the job"
        )
    try:
        res = HarborTrialResult.model_validate_json(path.read_text())
    except ValueError as exc:
        raise DataError(
            f"{path}: not a Harbor trial result ({str(exc).splitlines()[0]})",
            fix="check the Harbor version (pinned 0.25.0)",
        ) from None
    ae = res.agent_execution
    ctx = res.agent_result
    meta = (ctx.metadata if ctx else None) or {}
    reward = reward_of(res.verifier_result)
    failure = res.exception_info
    last_ns, n_steps = last_step(trial_dir)
    return TrialOutcome(
        trial_name=res.trial_name,
        task_name=res.task_name,
        trial_dir=str(trial_dir),
        agent_start_ns=_iso(ae.started_at) if ae else None,
        agent_end_ns=_iso(ae.finished_at) if ae else None,
        trial_start_ns=_iso(res.started_at),
        trial_end_ns=_iso(res.finished_at),
        reward=reward,
        success=None if reward is None else reward >= 1.0,
        exception_type=failure.exception_type if failure else None,
        exception_message=(failure.exception_message[:500] if failure else None),
        n_input_tokens=ctx.n_input_tokens if ctx else None,
        n_cache_tokens=ctx.n_cache_tokens if ctx else None,
        n_output_tokens=ctx.n_output_tokens if ctx else None,
        api_request_times_msec=[float(x) for x in meta.get("api_request_times_msec") or []],
        n_episodes=meta.get("n_episodes"),
        summarization_count=meta.get("summarization_count"),
        last_step_ns=last_ns,
        n_steps=n_steps,
        model_name=(res.agent_info.model_info.name if res.agent_info and res.agent_info.model_info else None),
    )


def read_job(job_dir: Path) -> tuple[HarborJobResult | None, list[TrialOutcome]]:
    """The job result (None if Harbor died before writing it) and every trial with a ``result.json``, by start time."""
    if not job_dir.is_dir():
        raise MissingFileError(
            f"Harbor job folder {job_dir} does not exist", fix="see the harbor log in the run folder"
        )
    job = None
    if (job_dir / "result.json").exists():
        job = HarborJobResult.model_validate_json((job_dir / "result.json").read_text())
    trials = [read_trial(p.parent) for p in sorted(job_dir.glob("*/result.json"))]
    trials.sort(key=lambda t: (t.trial_start_ns or 0, t.trial_name))
    return job, trials


# ---- job-level times: naive local time of the machine (and TZ) that ran Harbor ------------------------------------


def zone_of(tz_name: str | None) -> tzinfo:
    """A tz from a ``TZ`` value (``UTC``, ``Asia/Kolkata``); None or unknown -> this process's local zone."""
    if tz_name:
        try:
            return ZoneInfo(tz_name.lstrip(":"))
        except (KeyError, ValueError, OSError):  # unknown (ZoneInfoNotFoundError is a KeyError) or malformed key
            pass
    return datetime.now().astimezone().tzinfo or timezone.utc


def infer_offset(naive_text: str, utc_ns: int, *, step_min: int = 15) -> timezone:
    """The UTC offset that maps a naive local timestamp onto a nearby UTC instant, rounded to ``step_min`` minutes.

    Harbor's job ``started_at`` is written a moment before the first trial's UTC ``started_at``; rounding the
    difference to the nearest quarter hour recovers the writer's offset without knowing its TZ.
    """
    naive = datetime.fromisoformat(naive_text)
    if naive.tzinfo is not None:
        return naive.tzinfo  # type: ignore[return-value]
    as_utc = naive.replace(tzinfo=timezone.utc)
    diff_min = (as_utc.timestamp() * 1e9 - utc_ns) / 60e9
    rounded = round(diff_min / step_min) * step_min
    return timezone(timedelta(minutes=rounded))


def job_window_ns(
    job: HarborJobResult, trials: list[TrialOutcome], tz_name: str | None = None
) -> tuple[int | None, int | None, str]:
    """UTC ns of the job's start and end, and how the naive times were resolved (``tz:<name>`` or ``inferred:<offset>``).

    With trials, the offset is inferred from the first trial's UTC start (robust to a TZ we do not know) and must agree
    with ``tz_name`` when that is given; without trials, ``tz_name`` (or the local zone) is used.
    """
    if not job.started_at:
        return None, None, "missing"
    first_utc = min((t.trial_start_ns for t in trials if t.trial_start_ns), default=None)
    if first_utc is not None:
        tz: tzinfo = infer_offset(job.started_at, first_utc)
        how = f"inferred:{tz.tzname(None)}"
    else:
        tz = zone_of(tz_name)
        how = f"tz:{tz_name or 'local'}"
    start = parse_iso_ns(job.started_at, assume_tz=tz)
    end = parse_iso_ns(job.finished_at, assume_tz=tz) if job.finished_at else None
    return start, end, how
