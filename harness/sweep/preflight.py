"""The sweep's stages before its first cell, and the manifest sections they fill.

``plan_section``: what the run will measure (passes, batch sizes, configs, cells), the manifest's ``plan``.
``run_preflight``: what the run checked about its world once it is open and before any GPU setting changes or any
server starts, the manifest's ``preflight``: one entry per check of ``CHECKS``, after those of ``STATIC_CHECKS``
(``run_static_preflight``: files on disk, e.g. the draft/target pairing, checked before the world opens). A later
check (the band on a datacenter GPU, the GPU time a plan will cost) is one more function there, not a new branch in
the runner.
"""

from __future__ import annotations

from typing import Any, Callable

from harness.engine.model_pair import check_pair
from harness.gpu.gpu_pass import GpuPass
from harness.runs.options import SweepOptions
from harness.runs.plan import plan_cells
from harness.runs.writable import check_writable, engine_cache_roots

PreflightCheck = Callable[[SweepOptions, Any, Any], dict[str, Any]]
"""A check: (options, the open world, the sampler's first snapshot) -> what it found (JSON)."""


def plan_section(opts: SweepOptions) -> dict[str, Any]:
    """The manifest's ``plan``: the passes (GPU settings), batch sizes, configs and the cells they make."""
    passes = GpuPass.grid(opts.power_caps, opts.sm_clocks)
    return {
        "passes": [{"cap": p.cap, "clock": p.clock, "label": p.label} for p in passes],
        "repeats": opts.repeats,
        "batch_sizes": list(opts.batch_sizes),
        "configs": [c.as_list() for c in opts.spec_configs],
        "cells": len(plan_cells(opts)),
        "launch_per": opts.launch_per,
        "strategy": opts.strategy,
    }


def gpu_facts(opts: SweepOptions, world: Any, snapshot: Any) -> dict[str, Any]:
    """The GPU the run measures, as the sampler reads it before any server starts: its identity, power limit in
    force (the band's reference without --power-caps), memory and idle power."""
    return {
        "name": getattr(snapshot, "name", None),
        "uuid": getattr(snapshot, "uuid", None),
        "hardware": getattr(world, "hardware", None),
        "power_limit_w": getattr(snapshot, "power_limit_w", None),
        "memory_total_mb": getattr(snapshot, "memory_total_mb", None),
        "idle_power_w": getattr(snapshot, "power_w", None),
    }


def model_pair(opts: SweepOptions) -> dict[str, Any]:
    """The target and its draft, and whether their configs pair (``harness.engine.model_pair``; a mismatch stops
    the run before its world opens). A grid without speculative configs launches no draft."""
    if not any(not c.is_baseline for c in opts.spec_configs):
        return {"target": opts.target_model, "draft": None, "checked": False, "unchecked_because": "no draft launched"}
    return check_pair(opts.target_model, opts.draft_model)


def writable_caches(opts: SweepOptions) -> dict[str, Any]:
    """The engines' caches (``~/.cache/sglang``, ``huggingface``, the JIT caches) are this user's to write
    (``harness.runs.writable``); a root-owned one left by a run as root stops the run before its first launch."""
    if opts.engine == "twin":
        return {"checked": False, "unchecked_because": "the twin engine fills no engine cache"}
    roots = engine_cache_roots()
    check_writable(roots, "the engines' caches")
    return {"checked": True, "roots": [str(r) for r in roots if r.exists()]}


CHECKS: dict[str, PreflightCheck] = {"gpu": gpu_facts}
STATIC_CHECKS: dict[str, Callable[[SweepOptions], dict[str, Any]]] = {"models": model_pair, "caches": writable_caches}
"""Checks that need no world (files on disk): they run before the world opens, so a refusal costs no GPU time."""


def run_static_preflight(opts: SweepOptions) -> dict[str, Any]:
    """Every check of ``STATIC_CHECKS``, before the world opens; each one's findings under its name."""
    return {name: check(opts) for name, check in STATIC_CHECKS.items()}


def run_preflight(
    opts: SweepOptions, world: Any, snapshot: Any, static: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Every preflight check, in order, after the static ones' findings (``static``); each under its name."""
    return {**(static or {}), **{name: check(opts, world, snapshot) for name, check in CHECKS.items()}}
