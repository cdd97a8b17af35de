"""Is the world a run measures with still there? Infrastructure failures, told apart from cell failures.

A cell failure (out of memory, a crashed or hung server, an HTTP error) belongs to the cell: it becomes an error row.
An infrastructure failure (the GPU device gone, the sampler gone, GPU reads failing) says nothing about the cell;
writing its row would fill the dataset with false errors or rows without energy. ``check_world`` names such a problem
(or returns None); the sweep asks it before each cell and before writing any error row or invalid-window row.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from harness.core.http import http_client

PROBE_RECHECK_S = 1.0
"""A failed GPU read is re-read for this long (wall s) before it counts: one glitch is not a lost probe."""
ANSWER_ATTEMPTS = 3
"""A service that does not answer is asked this many times (0.5 s apart) before it counts as lost: a busy host can
delay an answer past the 3 s timeout; a dead process refuses the connection at once."""
STALE_SAMPLE_S = 5.0
"""The sampler's newest sample older than this (wall s, or 5 sample periods when longer) means its loop stalled."""


@dataclass(frozen=True)
class ServiceProblem:
    """One lost world service: ``kind`` device | sampler | probe, what happened, whether the harness can restart it."""

    kind: Literal["device", "sampler", "probe"]
    message: str
    restartable: bool = False


def _answers(http: httpx.Client, url: str) -> str | None:
    """None when ``url`` answers 200 within ``ANSWER_ATTEMPTS`` tries, else what went wrong the last time."""
    detail = ""
    for attempt in range(ANSWER_ATTEMPTS):
        if attempt:
            time.sleep(0.5)
        try:
            r = http.get(url)
            if r.status_code == 200:
                return None
            detail = f"HTTP {r.status_code}"
        except httpx.HTTPError as exc:
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return detail


def _twin_device_problem(http: httpx.Client, url: str) -> ServiceProblem | None:
    detail = _answers(http, url.rstrip("/") + "/health")
    return None if detail is None else ServiceProblem("device", f"the twin GPU at {url} does not answer ({detail})")


def _sampler_alive(http: httpx.Client, telemetry: Any) -> str | None:
    """None when the sampler process/thread runs, else why not."""
    core = getattr(telemetry, "core", None)
    if core is not None:  # in-process sampler
        return None if core.healthy() else "the in-process sampler's loop stopped"
    url = getattr(telemetry, "url", None)
    if url is None:
        return None
    detail = _answers(http, url + "/-/healthy")
    return None if detail is None else f"the sampler at {url} does not answer ({detail})"


def _period_s(telemetry: Any) -> float:
    core = getattr(telemetry, "core", None)
    return float(getattr(core, "period_s", 0.1) or 0.1)


def _probe_problem(telemetry: Any, restartable: bool) -> ServiceProblem | None:
    """The newest sample is missing, stale, or carries no reading (neither energy nor power, with errors), still after
    ``PROBE_RECHECK_S``."""
    deadline = time.monotonic() + PROBE_RECHECK_S
    while True:
        sample = telemetry.snapshot()
        if sample is None:
            problem = ServiceProblem(
                "sampler", f"the sampler gives no samples ({getattr(telemetry, 'last_error', None)})", restartable
            )
        else:
            age_s = (time.time_ns() - sample.t_wall_ns) / 1e9
            if age_s > max(STALE_SAMPLE_S, 5 * _period_s(telemetry)):
                return ServiceProblem(
                    "sampler", f"the sampler's newest sample is {age_s:.1f} s old (its loop stalled)", restartable
                )
            if (
                not sample.errors or sample.usable
            ):  # one failing field (e.g. no permission for clock events) is not a lost GPU
                return None
            problem = ServiceProblem("probe", f"GPU reads fail: {sample.errors[0]}", restartable)
        if time.monotonic() >= deadline:
            return problem
        time.sleep(0.1)


def check_world(world: Any) -> ServiceProblem | None:
    """The first lost service of ``world`` (device, then sampler, then its GPU reads), or None when all answer."""
    with http_client(timeout=3.0, trust_env=False) as http:
        if getattr(world, "twin_gpu_url", None):
            problem = _twin_device_problem(http, world.twin_gpu_url)
            if problem is not None:
                return problem
        dead = _sampler_alive(http, world.telemetry)
    restartable = world.can_restart_sampler
    if dead is not None:
        return ServiceProblem("sampler", dead, restartable)
    return _probe_problem(world.telemetry, restartable)
