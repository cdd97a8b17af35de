"""Trial windows and per-call timing.

A trial's GPU window is Harbor's ``agent_execution`` interval (UTC; every LLM call happens inside it), sent to the
sampler as wall-clock ns. Durations are reported in world seconds: the sampler window's device-clock duration when it
is valid, else the wall interval times the twin's time scale (1 with real sglang). Harbor's per-call durations
(``api_request_times_msec``) are wall milliseconds and are scaled the same way.

A *stuck call* is one LLM call that eats most of the trial (published: ~895 of 900 s in one never-returning call).
Calls cancelled by the agent timeout are missing from ``api_request_times_msec``, so the time from the last
trajectory step to the end of ``agent_execution`` of a timed-out trial counts as one in-flight call.
"""

from __future__ import annotations

from pydantic import BaseModel

from pilots.terminalbench.results import TrialOutcome

DEFAULT_STUCK_FRACTION = 0.5


class CallProfile(BaseModel):
    """Per-call durations of one trial (world seconds) and the stuck-call verdict."""

    n_calls: int
    call_s: list[float]
    total_call_s: float
    in_flight_s: float | None
    longest_s: float | None
    longest_kind: str | None
    """``completed`` (a recorded call) or ``in_flight`` (cancelled at the agent timeout, never returned)."""
    trial_s: float | None
    longest_share: float | None
    stuck: bool
    stuck_fraction: float


def call_profile(
    outcome: TrialOutcome,
    *,
    time_scale: float = 1.0,
    trial_s: float | None = None,
    stuck_fraction: float = DEFAULT_STUCK_FRACTION,
) -> CallProfile:
    """Per-call durations and whether one call took at least ``stuck_fraction`` of the trial's agent time."""
    calls = [ms / 1000.0 * time_scale for ms in outcome.api_request_times_msec]
    if trial_s is None and outcome.agent_wall_s is not None:
        trial_s = outcome.agent_wall_s * time_scale
    in_flight = None
    if outcome.timed_out and outcome.agent_end_ns is not None:
        ref = outcome.last_step_ns or outcome.agent_start_ns
        if ref is not None and outcome.agent_end_ns > ref:
            in_flight = (outcome.agent_end_ns - ref) / 1e9 * time_scale
    longest, kind = None, None
    if calls:
        longest, kind = max(calls), "completed"
    if in_flight is not None and (longest is None or in_flight > longest):
        longest, kind = in_flight, "in_flight"
    share = longest / trial_s if longest is not None and trial_s else None
    return CallProfile(
        n_calls=len(calls),
        call_s=calls,
        total_call_s=sum(calls),
        in_flight_s=in_flight,
        longest_s=longest,
        longest_kind=kind,
        trial_s=trial_s,
        longest_share=share,
        stuck=bool(share is not None and share >= stuck_fraction),
        stuck_fraction=stuck_fraction,
    )


class TrialWindow(BaseModel):
    """One trial's wall-ns window and how it sits among the others."""

    trial_name: str
    task_name: str
    start_ns: int | None
    end_ns: int | None
    wall_s: float | None
    problems: list[str]


def segment(
    outcomes: list[TrialOutcome],
    *,
    job_start_ns: int | None = None,
    job_end_ns: int | None = None,
    tolerance_s: float = 2.0,
) -> list[TrialWindow]:
    """The trials' agent windows in start order, each checked: present, positive, not overlapping the previous one,
    inside the job's interval (job times are naive local time: convert them first with ``results.job_window_ns``)."""
    out: list[TrialWindow] = []
    prev_end: int | None = None
    tol = int(tolerance_s * 1e9)
    for t in sorted(outcomes, key=lambda o: (o.agent_start_ns or o.trial_start_ns or 0, o.trial_name)):
        problems: list[str] = []
        s, e = t.agent_start_ns, t.agent_end_ns
        if s is None or e is None:
            problems.append("no_agent_execution")
        elif e <= s:
            problems.append("empty_window")
        else:
            if prev_end is not None and s < prev_end:
                problems.append("overlaps_previous_trial")
            if job_start_ns is not None and s < job_start_ns - tol:
                problems.append("starts_before_job")
            if job_end_ns is not None and e > job_end_ns + tol:
                problems.append("ends_after_job")
            prev_end = e
        out.append(
            TrialWindow(
                trial_name=t.trial_name,
                task_name=t.task_name,
                start_ns=s,
                end_ns=e,
                wall_s=t.agent_wall_s,
                problems=problems,
            )
        )
    return out
