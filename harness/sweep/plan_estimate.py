"""What a sweep will cost before it spends any GPU time: ``harness sweep --plan`` and every sweep's first line.

The estimate runs the twin's model of the board (a twin profile: the one the twin world uses, else the one named by
the GPU NVML sees, else the datacenter profile) over the run's plan: each launch's phases (imports, weights, CUDA
graphs for the batch sizes the server will serve), each cell's warm-up and measured requests, the settle between
cells, a fixed teardown and memory wait per launch (``TEARDOWN_S``, ``MEMORY_WAIT_S``: ~9 s together on an H100 with
sglang 0.5.23), and the band probe's launches and waves. The phases are those of ``harness.runs.gpu_time``, so the
end of the sweep compares the estimate with what it spent, phase by phase. ``published_grid_s`` is the published
protocol's full grid (19 configs x bs 1,4,8,16 x 3 repeats, a launch per cell) on the same board and models, in the
same accounting: the yardstick a budget and a fraction are measured against.

Not modelled: power caps and locked clocks (each pass is estimated at the board's default limit), a workload the
band probe sizes later (``--min-window``: the measured phase may grow), the ladder's retries.
"""

from __future__ import annotations

import math
import shutil
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.grid import ACTIONS, SpecConfig
from harness.runs.gpu_time import PHASES, duration_text, time_record
from harness.runs.options import SweepOptions
from harness.runs.plan import Cell, plan_cells
from harness.twin.fit.calibrate import Protocol
from harness.twin.model import expected_accept_length, launch_seconds, prefill_ms, step_cost
from harness.twin.profile import TwinProfile
from harness.world.bench import load_prompts

TEARDOWN_S = 5.0
"""Device seconds to stop a server (SIGTERM to exit, sglang 0.5.23 on an H100; issue 48's read of its launch path)."""
MEMORY_WAIT_S = 4.0
"""Device seconds until a stopped server's memory is back (the launcher's gate waits for it before the next)."""
DATACENTER_PROFILE = "h100-sxm"
TOKENS_PER_WORD = 1.3
"""Prompt tokens per word of the prompts (Llama 3's tokenizer on English prose), for the prefill."""


@dataclass
class PlanEstimate:
    """Device seconds per phase of a planned sweep, with what they rest on."""

    cells: int
    launches: int
    seconds: dict[str, float]
    profile: str
    profile_source: str
    published_grid_s: float
    gpus: int = 1
    notes: list[str] = field(default_factory=list)
    launch_parts: dict[str, float] = field(default_factory=dict)
    """The launch phase by the twin's launch phases (imports, weights, cuda_graphs), device seconds."""

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())

    def record(self) -> dict[str, Any]:
        """The manifest's ``plan.estimate`` (and ``plan.published_grid_gpu_s`` beside it)."""
        return {
            "cells": self.cells,
            "launches": self.launches,
            "gpu_time": time_record(self.seconds),
            "launch_phases": {k: round(v, 1) for k, v in self.launch_parts.items()},
            "wall_s": round(self.total_s / max(1, self.gpus), 1),
            "gpus": self.gpus,
            "profile": self.profile,
            "profile_source": self.profile_source,
            "published_grid_gpu_s": round(self.published_grid_s, 1),
            "fraction_of_published_grid": round(self.total_s / self.published_grid_s, 4)
            if self.published_grid_s
            else None,
            "notes": self.notes,
        }


def plan_profile(opts: SweepOptions) -> tuple[TwinProfile, str]:
    """The twin profile the estimate runs on, and why that one."""
    from harness.engine.twin_profiles import DEFAULT_PROFILE
    from harness.twin.profile import load_profile

    if opts.engine == "twin":
        name = opts.twin_profile or DEFAULT_PROFILE
        return load_profile(name), "the twin world's profile"
    gpu = _nvml_name()
    if gpu and any(k in gpu.upper() for k in ("H100", "H200", "H800", "GH200")):
        return load_profile(DATACENTER_PROFILE), f"{gpu} (read through NVML)"
    if gpu:
        return load_profile(DATACENTER_PROFILE), f"{gpu} has no twin profile of its own: the datacenter one stands in"
    return load_profile(DATACENTER_PROFILE), "no GPU readable here: the datacenter profile (an H100 SXM)"


def _nvml_name() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no driver, no nvidia-ml-py, no GPU: the estimate says what it assumed
        return None
    return name.decode() if isinstance(name, bytes) else str(name)


def _launch_groups(cells: list[Cell], launch_per: str) -> list[tuple[SpecConfig, int]]:
    """(config, largest batch size served) per launch: one per cell, or one per (pass, config) in config mode."""
    if launch_per == "cell":
        return [(c.config, c.batch_size) for c in cells]
    groups: dict[tuple[Any, ...], int] = {}
    for c in cells:
        key = (c.repeat, c.gpu_pass, c.config.as_tuple())
        groups[key] = max(groups.get(key, 0), c.batch_size)
    return [(SpecConfig(*key[2]), bs) for key, bs in groups.items()]


def wave_seconds(profile: TwinProfile, cfg: SpecConfig, bs: int, output_tokens: int, prompt_tokens: int) -> float:
    """Device seconds of one wave of ``bs`` requests on the twin's model, in closed form (no simulation: a plan of
    the published grid costs milliseconds): the prefill, then ``output_tokens`` / the expected accept length decode
    steps at the full-clock step time."""
    perf = profile.perf
    accept = 1.0 if cfg.is_baseline else expected_accept_length(perf, cfg)
    steps = math.ceil(output_tokens / max(accept, 1.0))
    return (prefill_ms(perf, prompt_tokens * bs) + steps * step_cost(profile, cfg, bs).ms()) / 1000.0


def prompt_tokens_of(prompts: tuple[str, ...]) -> int:
    """The prompts' mean length in tokens (``TOKENS_PER_WORD`` per word), for the prefill."""
    return max(1, round(statistics.fmean(len(p.split()) for p in prompts) * TOKENS_PER_WORD))


def _cell_seconds(
    profile: TwinProfile, cfg: SpecConfig, bs: int, protocol: Protocol, prompt_tokens: int
) -> tuple[float, float]:
    """(warm-up, measured) device seconds of one cell: a warm-up wave, then the measured requests' waves."""
    wave = wave_seconds(profile, cfg, bs, protocol.output_tokens, prompt_tokens)
    return wave, wave * math.ceil(protocol.measured(bs) / bs)


def estimate_plan(opts: SweepOptions, gpus: int = 1, profile: TwinProfile | None = None) -> PlanEstimate:
    """The GPU time ``opts`` will cost (see the module doc); ``gpus``: the GPUs it runs on (wall time = total/gpus)."""
    from harness.sweep.probe import probe_wanted

    source = "given"
    if profile is None:
        profile, source = plan_profile(opts)
    protocol = Protocol(tuple(load_prompts(opts.prompts_file)), opts.output_tokens, opts.num_prompts)
    cells = plan_cells(opts)
    parts: dict[str, float] = {}
    seconds = _run_seconds(profile, opts, protocol, cells, parts)
    published = opts.model_copy(
        update={"configs": [c.as_tuple() for c in ACTIONS], "batch_sizes": [1, 4, 8, 16], "repeats": 3,
                "launch_per": "cell", "power_caps": None, "sm_clocks": None, "num_prompts": None, "probe": "off"}
    )  # fmt: skip
    published_s = sum(
        _run_seconds(profile, published, Protocol(protocol.prompts, opts.output_tokens), plan_cells(published)).values()
    )
    notes = []
    if opts.power_caps or opts.sm_clocks:
        notes.append("every pass is estimated at the board's default limit (caps and clocks slow decode)")
    if probe_wanted(opts) and opts.min_window_s and opts.num_prompts is None:
        notes.append(
            f"the band probe may size the workload for --min-window {opts.min_window_s:g} s: measured may grow"
        )
    return PlanEstimate(
        cells=len(cells),
        launches=len(_launch_groups(cells, opts.launch_per)),
        seconds=seconds,
        profile=profile.name,
        profile_source=source,
        published_grid_s=published_s,
        gpus=max(1, gpus),
        notes=notes,
        launch_parts=parts,
    )


def _run_seconds(
    profile: TwinProfile,
    opts: SweepOptions,
    protocol: Protocol,
    cells: list[Cell],
    launch_parts: dict[str, float] | None = None,
) -> dict[str, float]:
    from harness.runs.options import parse_settle
    from harness.sweep.probe import PROBE_WAVES, probe_configs, probe_wanted

    out = {p: 0.0 for p in PHASES}
    prompt_tokens = prompt_tokens_of(protocol.prompts)
    groups = _launch_groups(cells, opts.launch_per)
    for cfg, graph_bs in groups:
        for part, secs in launch_seconds(profile, cfg, graph_bs).items():
            out["launch"] += secs
            if launch_parts is not None:
                launch_parts[part] = launch_parts.get(part, 0.0) + secs
    out["teardown"] = TEARDOWN_S * len(groups)
    out["memory_wait"] = MEMORY_WAIT_S * max(0, len(groups) - 1)
    for c in cells:
        warm, measured = _cell_seconds(profile, c.config, c.batch_size, protocol, prompt_tokens)
        out["warmup"] += warm
        out["measured"] += measured
    kind, value = parse_settle(opts.settle)
    if kind == "sleep":
        out["flush_settle"] = value * max(0, len(cells) - 1)
    if probe_wanted(opts):
        top = max(opts.batch_sizes)
        for cfg in probe_configs(opts):
            out["preflight"] += sum(launch_seconds(profile, cfg, top).values()) + TEARDOWN_S + MEMORY_WAIT_S
            for bs in opts.batch_sizes:
                wave = Protocol(protocol.prompts, opts.output_tokens, bs)
                out["preflight"] += PROBE_WAVES * _cell_seconds(profile, cfg, bs, wave, prompt_tokens)[1]
    return out


def plan_gpus(opts: SweepOptions) -> int:
    """The GPUs the run will use: ``--twin-gpus`` under Ray, else 1 (a real cluster's count is known once it runs)."""
    return int(opts.twin_gpus or 1) if opts.executor == "ray" else 1


def model_disk(opts: SweepOptions) -> str:
    """The models' weights on disk against the free space where they are cached (a line)."""
    from harness.engine.model_pair import footprint_mb, hub_cache

    draft = opts.draft_model if any(not c.is_baseline for c in opts.spec_configs) else None
    need = footprint_mb(opts.target_model, draft)
    cache = Path(opts.target_model) if Path(opts.target_model).exists() else hub_cache()
    free = shutil.disk_usage(_existing(cache)).free / 1e9
    what = f"{opts.target_model}" + (f" + {draft}" if draft else "")
    if need is None:
        return f"models: {what}: not on disk yet (downloaded at the first launch); {free:.0f} GB free under {_existing(cache)}"
    return f"models: {what}: {need / 1024:.1f} GB on disk; {free:.0f} GB free under {_existing(cache)}"


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def plan_lines(est: PlanEstimate, disk: str | None = None) -> list[str]:
    """The plan in words: cells and launches, GPU time per phase, wall time on its GPUs, the published yardstick."""
    from harness.runs.gpu_time import gpu_time_line

    rec = est.record()
    spent = gpu_time_line(rec["gpu_time"]) or "GPU time 0 s"
    lines = [
        f"plan: {est.cells} cells, {est.launches} launches; twin model {est.profile} ({est.profile_source})",
        "plan: " + spent.replace("GPU time", "GPU time ~", 1),
        f"plan: wall ~{duration_text(est.total_s / est.gpus)} on {est.gpus} GPU{'s' if est.gpus > 1 else ''}; the published "
        f"protocol's grid on this board ~{duration_text(est.published_grid_s)} (this plan: "
        f"{100 * (rec['fraction_of_published_grid'] or 0):.1f} % of it)",
    ]
    if est.launch_parts:
        lines.append(
            "plan: launches = "
            + " + ".join(f"{k.replace('_', ' ')} {duration_text(v)}" for k, v in est.launch_parts.items())
            + f" ({duration_text(est.seconds['launch'] / max(1, est.launches))} per launch)"
        )
    if disk:
        lines.append("plan: " + disk)
    lines += [f"plan: not modelled: {n}" for n in est.notes]
    return lines


def plan_line(est: PlanEstimate) -> str:
    """The estimate in one line: every sweep's first."""
    rec = est.record()
    share = rec["gpu_time"]["measured_share"]
    return (
        f"plan: {est.cells} cells, {est.launches} launches, GPU time ~{duration_text(est.total_s)}"
        + (f" (measured share {100 * share:.0f} %)" if share is not None else "")
        + f", wall ~{duration_text(est.total_s / est.gpus)} on {est.gpus} GPU{'s' if est.gpus > 1 else ''}; "
        f"{100 * (rec['fraction_of_published_grid'] or 0):.1f} % of the published grid (twin model {est.profile}; "
        "harness sweep --plan for the phases)"
    )
