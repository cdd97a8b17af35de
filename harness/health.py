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

PROBE_RECHECK_S = 1.0
"""A failed GPU read is re-read for this long (wall s) before it counts: one glitch is not a lost probe."""
STALE_SAMPLE_S = 5.0
"""The sampler's newest sample older than this (wall s, or 5 sample periods when longer) means its loop stalled."""


@dataclass(frozen=True)
class ServiceProblem:
    """One lost world service: ``kind`` device | sampler | probe, what happened, whether the harness can restart it."""

    kind: Literal["device", "sampler", "probe"]
    message: str
    restartable: bool = False


def _twin_device_problem(http: httpx.Client, url: str) -> ServiceProblem | None:
    try:
        r = http.get(url.rstrip("/") + "/health")
        if r.status_code == 200:
            return None
        detail = f"HTTP {r.status_code}"
    except httpx.HTTPError as exc:
        detail = f"{type(exc).__name__}: {exc}"
    return ServiceProblem("device", f"the twin GPU at {url} does not answer ({detail})")


def _sampler_alive(http: httpx.Client, telemetry: Any) -> str | None:
    """None when the sampler process/thread runs, else why not."""
    core = getattr(telemetry, "core", None)
    if core is not None:  # in-process sampler
        return None if core.healthy() else "the in-process sampler's loop stopped"
    url = getattr(telemetry, "url", None)
    if url is None:
        return None
    try:
        r = http.get(url + "/-/healthy")
        return None if r.status_code == 200 else f"the sampler at {url} is unhealthy (HTTP {r.status_code})"
    except httpx.HTTPError as exc:
        return f"the sampler at {url} does not answer ({type(exc).__name__})"


def _period_s(telemetry: Any) -> float:
    core = getattr(telemetry, "core", None)
    return float(getattr(core, "period_s", 0.1) or 0.1)


def _probe_problem(telemetry: Any, restartable: bool) -> ServiceProblem | None:
    """The newest sample carries no reading (errors) for ``PROBE_RECHECK_S``, or is stale."""
    deadline = time.monotonic() + PROBE_RECHECK_S
    while True:
        sample = telemetry.snapshot()
        if sample is None:
            return ServiceProblem("sampler", f"the sampler gives no samples ({getattr(telemetry, 'last_error', None)})",
                                  restartable)
        age_s = (time.time_ns() - sample.t_wall_ns) / 1e9
        if age_s > max(STALE_SAMPLE_S, 5 * _period_s(telemetry)):
            return ServiceProblem("sampler", f"the sampler's newest sample is {age_s:.1f} s old (its loop stalled)",
                                  restartable)
        if not sample.errors:
            return None
        if time.monotonic() >= deadline:
            return ServiceProblem("probe", f"GPU reads fail: {sample.errors[0]}", restartable)
        time.sleep(0.1)


def check_world(world: Any) -> ServiceProblem | None:
    """The first lost service of ``world`` (device, then sampler, then its GPU reads), or None when all answer."""
    with httpx.Client(timeout=3.0, trust_env=False) as http:
        if getattr(world, "twin_gpu_url", None):
            problem = _twin_device_problem(http, world.twin_gpu_url)
            if problem is not None:
                return problem
        dead = _sampler_alive(http, world.telemetry)
    restartable = world.can_restart_sampler
    if dead is not None:
        return ServiceProblem("sampler", dead, restartable)
    return _probe_problem(world.telemetry, restartable)
