"""The band probe: a short measured look at the board before the first cell, the manifest's ``preflight.probe``.

Two launches (the baseline and the grid's heaviest speculative config, each launched once for the largest batch size)
measure three waves of requests at every planned batch size (the draw of the middle one: ``PROBE_WAVES``). From the draws and the board's limits it tells

- whether the band (``harness.gpu.band``) can be reached at the limit in force (or at each ``--power-caps``): when it
  cannot, one console line before the first cell says so and names the fix (``--power-caps auto``, or caps inside
  the board's constraints; a locked SM clock only lowers power, so it is never the fix);
- ``--power-caps auto``: the caps to sweep (the limit in force when the band is reached there);
- the workload: how many requests each batch size needs for its measured window to last ``--min-window`` world seconds
  (``MIN_WINDOW_WHY``); the runner measures that many (``num_prompts_by_bs``).

Its GPU time (launches, warm-ups, windows, teardown, in device seconds) is recorded with its draws.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Mapping

from harness.core.errors import HarnessError
from harness.engine.launch import LadderExhausted
from harness.gpu.band import BAND, choose_caps, reachable
from harness.gpu.power_cap import AUTO_CAPS as AUTO
from harness.gpu.power_cap import CapLimits, PowerCapError, cap_device, close_device, resolve_cap
from harness.grid import BASELINE, SpecConfig
from harness.runs.options import SweepOptions
from harness.runs.plan import derive_seed, measured_requests
from harness.world.bench import BenchSettings, CellError, load_prompts, run_cell

PROBE_WAVES = 3
"""Requests per probe cell, in waves of the batch size: the draw is the steady-state window's (from the B-th to the
(N-B)-th first token, ``harness.telemetry.steady``), what a long sized window draws, without one wave's ramp and tail."""
SIZING_MARGIN = 1.25
"""Requests above the probe's fastest wave: a config of the grid the probe did not launch may decode faster."""
MIN_WINDOW_WHY = (
    "the energy counter updates every ~100 ms, so a window's two edges can misplace up to 2 x 0.1 s of its power: "
    "0.7 % of a 30 s window, a quarter of the band's 0.03 width (docs/powercap.md, 'The band probe')"
)


def probe_wanted(opts: SweepOptions) -> bool:
    """``--probe on``; ``auto``: every real engine on a GPU, and ``--power-caps auto`` (which needs the draws)."""
    if opts.power_caps == [AUTO] or opts.probe == "on":
        return True
    return opts.probe == "auto" and opts.engine != "twin" and opts.engine_device != "cpu"


def probe_configs(opts: SweepOptions) -> list[SpecConfig]:
    """The baseline (when planned) and the heaviest speculative config planned (most draft tokens, then steps)."""
    configs = list(opts.spec_configs)
    spec = [c for c in configs if not c.is_baseline]
    out = [c for c in configs if c.is_baseline][:1]
    if spec:
        out.append(max(spec, key=lambda c: (c.draft_tokens, c.steps, c.topk)))
    return out or [BASELINE]


def board_limits(opts: SweepOptions, world: Any) -> CapLimits:
    """The board's power limits (reading them needs no root): the twin GPU's or NVML's, by the engine's GPU."""
    device = cap_device(world.twin_gpu_url if opts.engine == "twin" else None, world.gpu_index, opts.gpu_settings_url)
    try:
        return device.limits()
    finally:
        close_device(device)


def run_probe(opts: SweepOptions, world: Any, run_dir: Path, limit_w: float | None) -> dict[str, Any]:
    """Launch each probe config once and measure ``PROBE_WAVES`` waves at every planned batch size; the draws and
    GPU time."""
    sizes = sorted(set(opts.batch_sizes))
    prompts = load_prompts(opts.prompts_file)
    t0 = time.monotonic()
    measured: list[dict[str, Any]] = []
    configs = probe_configs(opts)
    for config in configs:
        stem = f"probe-s{config.steps}k{config.topk}d{config.draft_tokens}"
        try:
            server, _ = world.launcher.launch_with_ladder(
                config,
                max(sizes),
                opts.mem_fractions,
                log_stem=run_dir / "logs" / stem,
                seed=derive_seed(opts.seed, stem),
            )
        except LadderExhausted as exc:
            measured.append({"config": config.as_list(), "error": exc.message})
            continue
        try:
            for bs in sizes:
                settings = BenchSettings(
                    output_tokens=opts.output_tokens,
                    num_prompts=PROBE_WAVES * bs,
                    prompts=prompts,
                    request_timeout_s=opts.request_timeout_s,
                    stream=opts.stream_requests,
                )
                entry: dict[str, Any] = {"config": config.as_list(), "batch_size": bs}
                try:
                    server.client.flush_cache()
                    r = run_cell(server, bs, settings, world.telemetry, world.clock)
                except (CellError, HarnessError) as exc:
                    entry["error"] = getattr(exc, "message", str(exc))
                except Exception as exc:  # noqa: BLE001 - a failed flush is this probe cell's error, not the run's
                    entry["error"] = f"{type(exc).__name__}: {exc}"
                else:
                    steady = r.steady.avg_power_w if r.steady is not None and r.steady.valid else None
                    power = steady if steady is not None else r.avg_power_watts
                    entry |= {
                        "power_w": power,
                        "power_window": "steady" if steady is not None else "measured",
                        "window_power_w": r.avg_power_watts,
                        "utilization": None if not (limit_w and power) else power / limit_w,
                        "wave_s": r.wall_clock_s * bs / max(r.n_requests, 1),
                        "tokens": r.total_output_tokens,
                    }
                measured.append(entry)
        finally:
            server.stop()
    gpu_time_s = (time.monotonic() - t0) * world.clock.scale
    return {"configs": [c.as_list() for c in configs], "measured": measured, "gpu_time_s": gpu_time_s}


def draws_by_bs(probe: Mapping[str, Any]) -> dict[int, list[float]]:
    """Each batch size's measured draws (watts), errors left out."""
    out: dict[int, list[float]] = {}
    for m in probe.get("measured", []):
        if m.get("power_w") is not None:
            out.setdefault(int(m["batch_size"]), []).append(float(m["power_w"]))
    return out


def reference_caps(opts: SweepOptions, limits: CapLimits, limit_w: float) -> list[float]:
    """The caps the band will be relative to: each ``--power-caps`` value, else the limit in force."""
    if not opts.power_caps or opts.power_caps == [AUTO]:
        return [limit_w]
    out = []
    for label in opts.power_caps:
        try:
            out.append(resolve_cap(label, limits))
        except PowerCapError:
            continue  # refused with its own message when the pass is set
    return out or [limit_w]


def judge(opts: SweepOptions, probe: Mapping[str, Any], limits: CapLimits, limit_w: float) -> dict[str, Any]:
    """Whether every batch size reaches the band under a reference cap; the caps that would put it there."""
    draws = draws_by_bs(probe)
    refs = reference_caps(opts, limits, limit_w)
    short = sorted(bs for bs, ws in draws.items() if not any(reachable(ws, cap) for cap in refs))
    choice = choose_caps(draws, limits.min_w, limits.max_w)
    return {
        "limits": limits.model_dump(),
        "limit_in_force_w": limit_w,
        "reference_caps_w": refs,
        "highest_draw_w": {str(bs): max(ws) for bs, ws in sorted(draws.items())},
        "unreachable_batch_sizes": short,
        "suggested_caps_w": list(choice.caps),
        "caps_cover": {f"{c:g}": list(bss) for c, bss in choice.covers.items()},
        "no_cap_reaches": list(choice.uncovered),
        "why": choice.why,
    }


def band_line(verdict: Mapping[str, Any]) -> str | None:
    """The one line before the first cell when some batch size cannot reach the band; None when all can."""
    short = verdict["unreachable_batch_sizes"]
    if not short:
        return None
    refs = verdict["reference_caps_w"]
    highest = verdict["highest_draw_w"]
    lim = verdict["limits"]
    where = ", ".join(f"{highest[str(bs)]:.0f} W at bs {bs} (u {highest[str(bs)] / max(refs):.2f})" for bs in short)
    at = f"the {refs[0]:g} W limit in force" if len(refs) == 1 else "any of --power-caps " + _caps(refs)
    line = f"preflight: bs {_list(short)} cannot reach the band ({BAND[0]:g}-{BAND[1]:g} of the cap) at {at}: {where}."
    caps = verdict["suggested_caps_w"]
    if caps:
        line += (
            f" Fix: --power-caps auto, or caps inside this GPU's {lim['min_w']:g}-{lim['max_w']:g} W limits such as "
            f"--power-caps {_caps(caps)}"
        )
    none = verdict["no_cap_reaches"]
    if none:
        line += f"; bs {_list(none)} draws too little for any cap down to {lim['min_w']:g} W"
    return line + " (a locked SM clock only lowers power: it cannot lift a board into its band)."


def auto_caps(verdict: Mapping[str, Any]) -> tuple[list[str], str]:
    """``--power-caps auto`` resolved: the limit in force when every batch size reaches the band there, else the
    chosen caps; and the line that says which and why."""
    limit = verdict["limit_in_force_w"]
    if not verdict["unreachable_batch_sizes"]:
        kept = f"--power-caps auto keeps the {limit:g} W limit in force: every batch size reaches the band there"
        return [f"{limit:g}"], kept
    caps = verdict["suggested_caps_w"]
    if not caps:
        raise HarnessError(
            "--power-caps auto found no cap inside this GPU's limits that puts a measured config in the band "
            f"(highest draws {verdict['highest_draw_w']} W, limits {verdict['limits']['min_w']}-"
            f"{verdict['limits']['max_w']} W)",
            fix="sweep at the limit in force (drop --power-caps): the rows still rank configs by speed and J/token",
        )
    parts = "; ".join(f"{c} W for bs {_list(verdict['caps_cover'][c])}" for c in map("{:g}".format, caps))
    line = f"--power-caps auto chose {_caps(caps)} W ({parts}): {verdict['why']}"
    if verdict["no_cap_reaches"]:
        line += f"; bs {_list(verdict['no_cap_reaches'])} reaches the band under none"
    return [f"{c:g}" for c in caps], line


def size_workload(opts: SweepOptions, probe: Mapping[str, Any]) -> dict[str, Any]:
    """Requests per batch size so that every measured window lasts ``--min-window`` world seconds (from the probe's
    fastest wave at that batch size, with ``SIZING_MARGIN``); the published count where that already suffices."""
    waves: dict[int, float] = {}
    for m in probe.get("measured", []):
        if m.get("wave_s"):
            bs = int(m["batch_size"])
            waves[bs] = min(waves.get(bs, math.inf), float(m["wave_s"]))
    published = {bs: measured_requests(bs, opts.num_prompts) for bs in sorted(set(opts.batch_sizes))}
    projected = {bs: waves[bs] * published[bs] / bs for bs in published if bs in waves}
    out: dict[str, Any] = {
        "min_window_s": opts.min_window_s,
        "why": MIN_WINDOW_WHY,
        "projected_window_s": {str(bs): round(s, 3) for bs, s in projected.items()},
    }
    if opts.min_window_s <= 0:
        return out | {"sized": False, "unsized_because": "--min-window 0"}
    if opts.num_prompts is not None:
        return out | {"sized": False, "unsized_because": "--num-prompts given"}
    sized = {
        bs: max(published[bs], bs * math.ceil(SIZING_MARGIN * opts.min_window_s / waves[bs]))
        for bs in published
        if waves.get(bs)
    }
    return out | {"sized": True, "num_prompts_by_bs": {str(bs): n for bs, n in sized.items()}}


def workload_line(workload: Mapping[str, Any]) -> str | None:
    """One line when the probe grew the workload (what it measured and why), else None."""
    if not workload.get("sized"):
        return None
    grown = {bs: n for bs, n in workload["num_prompts_by_bs"].items() if n > measured_requests(int(bs))}
    if not grown:
        return None
    shown = ", ".join(
        f"bs {bs}: {n} ({workload['projected_window_s'].get(bs, 0):.1f} s at the published count)"
        for bs, n in grown.items()
    )
    return f"preflight: requests per cell sized for windows of at least {workload['min_window_s']:g} s: {shown}"


def _caps(caps: list[float]) -> str:
    return ",".join(f"{c:g}" for c in caps)


def _list(items: list[int]) -> str:
    return ",".join(map(str, items))


def apply_probe(opts: SweepOptions, world: Any, run_dir: Path, preflight: dict[str, Any], say: Any) -> SweepOptions:
    """Run the probe when wanted (once per run: a resumed run keeps the probe it saved in ``preflight``), record it
    under ``preflight["probe"]``, say its lines, and return the options with ``--power-caps auto`` resolved."""
    found = preflight.get("probe")
    if found is None and probe_wanted(opts):
        if getattr(world, "launcher", None) is None:
            found = {"skipped": "the Ray executor launches on its workers; the probe runs with --executor local"}
        else:
            limits = board_limits(opts, world)
            limit_w = limits.enforced_w or limits.current_w or limits.default_w
            found = run_probe(opts, world, run_dir, limit_w)
            if limit_w:
                found["band"] = judge(opts, found, limits, limit_w)
            found["workload"] = size_workload(opts, found)
        preflight["probe"] = found
    if found is None or "skipped" in found:
        if found is not None:
            say(f"preflight: no band probe ({found['skipped']})")
        return opts
    verdict = found.get("band")
    lines = [workload_line(found.get("workload") or {})]
    if opts.power_caps == [AUTO]:
        if verdict is None:
            raise HarnessError(
                "--power-caps auto needs the board's power limit, which it does not report",
                fix="give the caps in watts, e.g. --power-caps 250,300",
            )
        caps, chose = auto_caps(verdict)
        found["caps_auto"] = {"caps": caps, "line": chose}
        opts = opts.model_copy(update={"power_caps": caps})
        lines.insert(0, chose)
    elif verdict is not None:
        lines.insert(0, band_line(verdict))
    for text in lines:
        if text:
            say(text)
    return opts
