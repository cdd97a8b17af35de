"""Traffic replay for ``harness serve`` on the twin: does the band controller hold utilization in the band better
than any static config, without losing more than 5 % tokens/s?

    .venv/bin/python benchmarks/serve_band.py [--time-scale 5] [--phase-s 20] [--out results/bench-serve] [--quick]

One twin GPU, one sampler, one twin engine instance per config, one front; every mode routes the same traces over
the same instances:

- ``static C``: every request to config C (each candidate config, ``(0,0,0)`` being no_spec);
- ``controller``: the band controller over a pick table derived first, in the same run, by the recipe rule (the
  fastest config whose utilization is inside the band, else the closest) from short closed-loop measurements at
  batch sizes 1, 2, 4, 8, 16 (a serving-side mini sweep; a policy artifact or recipe.json plugs in the same way);
- ``adaptive``: the emulation of sglang's ``--speculative-adaptive`` (``harness/serve/adaptive.py``) over the topk-1
  tiers (1,1,2), (3,1,4), (5,1,6), (7,1,8) and no_spec.

Traces (twin seconds): ``bursty``: Poisson arrivals whose rate steps so the offered concurrency goes 1, 4, 8, 16, 8, 4,
1 (rate = concurrency / the no_spec latency measured at that concurrency); ``pilot``: the agentic pilots' pattern, one
session, long prompts, 200-700 output tokens, 2-8 s of tool time between calls.

Figures per (trace, mode): share of 1-twin-second windows whose utilization (energy / duration / enforced cap, from the
sampler's counter) is in the band, tokens/s (twin), J/token, p50/p99 latency (twin s), switches. Writes
``OUT/serve_band.json`` and ``OUT/serve_band_<trace>.png`` (utilization with the band, batch size, switches).
Everything here runs on the twin: figures of the twin model, not of a GPU.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.clocks import wall_ns
from harness.grid import BASELINE, SpecConfig
from harness.serve.adaptive import tier_config
from harness.serve.band_feedback import LoopParams
from harness.serve.control_loop import AdaptiveDecider, BandDecider
from harness.serve.controller import ControllerParams
from harness.serve.loadgen import ClosedLoop, Recorder, replay
from harness.serve.session import ServeSession, SessionOptions, open_session
from harness.serve.utilization_model import model_pick
from harness.world.bench import load_prompts

TIERS = [tier_config(s) for s in (1, 3, 5, 7)]
CANDIDATES = [
    BASELINE,
    SpecConfig(3, 4, 8),
    SpecConfig(3, 2, 4),
    SpecConfig(5, 4, 16),
    SpecConfig(5, 2, 8),
    SpecConfig(1, 4, 4),
    *TIERS,
]
"""Every instance is a static mode and a config the controller may route to (the adaptive tiers included)."""
CALIB_BS = (1, 2, 4, 8, 16)
BAND = (0.95, 0.98)
OUTPUT_TOKENS = 256
Model = dict[int, dict[SpecConfig, tuple[float, float]]]


def closed_loop_params(model: Model) -> ControllerParams:
    """The closed-loop controller as the benchmark runs it: a load-driven switch at most every 3 twin s (about one
    request's drain at these batch sizes), the defaults of ``closed_loop.LoopParams`` otherwise."""
    return ControllerParams(band=BAND, model=model, min_hold_s=3.0, loop=LoopParams())


PILOT_PROMPT = " ".join(["def parse(line):  # the agent's long context: files, diffs, tool output"] * 320)


@dataclass
class Timeline:
    """What one mode's replay left behind: wall edges, requests, in-flight samples, switch records."""

    start_ns: int
    end_ns: int
    done: list[Any]
    in_flight: list[tuple[int, int]]
    switches: list[dict[str, Any]]


def run_mode(s: ServeSession, decider: Any, drive: Any, ask_accept: bool = False) -> Timeline:
    """Install ``decider``, run ``drive(url, recorder)`` while sampling the in-flight count, return the timeline."""
    s.loop.set_decider(decider)
    s.front.ask_accept = ask_accept
    rec, flight = Recorder(), []
    n0 = len(s.loop.log_path.read_text().splitlines())
    start = wall_ns()
    import threading

    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.02):
            flight.append((wall_ns(), s.loop.in_flight))

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    drive(s.url, rec)
    end = wall_ns()
    stop.set()
    t.join()
    recs = [json.loads(x) for x in s.loop.log_path.read_text().splitlines()[n0:]]
    return Timeline(start, end, rec.snapshot(), flight, [r for r in recs if r["reason"] != "start"])


def bins(s: ServeSession, tl: Timeline, bin_twin_s: float, scale: float) -> list[tuple[int, float | None]]:
    """(bin start wall ns, utilization) per ``bin_twin_s`` of the timeline, from the sampler's energy counter."""
    step = int(bin_twin_s / scale * 1e9)
    out = []
    for a in range(tl.start_ns, tl.end_ns - step + 1, step):
        w = s.world.telemetry.window(a, a + step, wait_s=1.0)
        u = (
            w.avg_power_w / s.world.power_limit_w
            if w.valid and w.avg_power_w is not None and s.world.power_limit_w
            else None
        )
        out.append((a, u))
    return out


def busy_bins(tl: Timeline, us: list[tuple[int, float | None]], scale: float) -> list[bool]:
    """Per 1-twin-s bin: were requests in flight at every in-flight sample inside it (the GPU never idle)?"""
    step = int(1.0 / scale * 1e9)
    out = []
    for a, _ in us:
        inside = [n for t, n in tl.in_flight if a <= t < a + step]
        out.append(bool(inside) and min(inside) > 0)
    return out


def figures(s: ServeSession, tl: Timeline, scale: float) -> dict[str, Any]:
    us = bins(s, tl, 1.0, scale)
    valid = [u for _, u in us if u is not None]
    flags = busy_bins(tl, us, scale)
    busy = [u for (_, u), b in zip(us, flags) if b and u is not None]
    whole = s.world.telemetry.window(tl.start_ns, tl.end_ns, wait_s=1.0)
    ok = [d for d in tl.done if d.ok]
    tokens = sum(d.tokens for d in ok)
    twin_s = (tl.end_ns - tl.start_ns) / 1e9 * scale
    lat = sorted((d.end_s - d.start_s) * scale for d in ok)

    def pct(q: float) -> float | None:
        return round(lat[min(len(lat) - 1, int(q * len(lat)))], 3) if lat else None

    return {
        "in_band": share_in_band(valid),
        "busy_share": round(len(busy) / len(valid), 4) if valid else None,
        "in_band_busy": share_in_band(busy),
        "mean_u": round(sum(valid) / len(valid), 4) if valid else None,
        "tok_s": round(tokens / twin_s, 2),
        "j_per_token": round(whole.energy_j / tokens, 4) if whole.energy_j and tokens else None,
        "p50_s": pct(0.5),
        "p99_s": pct(0.99),
        "switches": len(tl.switches),
        "requests": len(tl.done),
        "errors": len(tl.done) - len(ok),
        "bins": len(valid),
        "_series": us,
        "series": [
            [round((a - tl.start_ns) / 1e9 * scale, 2), None if u is None else round(u, 4), int(b)]
            for (a, u), b in zip(us, flags)
        ],
    }


def share_in_band(us: list[float]) -> float | None:
    return round(sum(BAND[0] <= u <= BAND[1] for u in us) / len(us), 4) if us else None


def calibrate(s: ServeSession, scale: float, hold_twin_s: float) -> tuple[dict[int, SpecConfig], Model, dict[str, Any]]:
    """Closed-loop at each batch size on each candidate: utilization and per-request latency; speed = bs x output
    tokens / median latency; the pick per batch size by the recipe rule (``controller.model_pick`` at bias 0)."""
    prompts = load_prompts()
    meas: dict[str, Any] = {}
    model: Model = {bs: {} for bs in CALIB_BS}
    for cfg in CANDIDATES:
        s.loop.set_decider(BandDecider({1: cfg}))
        for bs in CALIB_BS:
            rec = Recorder()
            load = ClosedLoop(s.url, bs, OUTPUT_TOKENS, prompts, rec).start()
            time.sleep(hold_twin_s / scale / 3)  # ramp up
            a = wall_ns()
            time.sleep(hold_twin_s / scale)
            b = wall_ns()
            load.stop()
            w = s.world.telemetry.window(a, b, wait_s=1.0)
            lat = sorted((d.end_s - d.start_s) * scale for d in rec.snapshot() if d.ok)
            u = (w.avg_power_w or 0) / (s.world.power_limit_w or 80.0)
            speed = bs * OUTPUT_TOKENS / lat[len(lat) // 2] if lat else 0.0
            meas[f"{cfg.label}@{bs}"] = {
                "u": round(u, 4),
                "tok_s": round(speed, 1),
                "latency_s": lat[len(lat) // 2] if lat else None,
            }
            model[bs][cfg] = (u, speed)
    alive = frozenset(CANDIDATES)
    table = {bs: model_pick(model[bs], 0.0, BAND, alive) or BASELINE for bs in CALIB_BS}
    return table, model, meas


def bursty(meas: dict[str, Any], phase_twin_s: float, scale: float, seed: int) -> tuple[list[float], list[float]]:
    """Poisson arrivals (wall s) stepping through concurrencies 1, 4, 8, 16, 8, 4, 1; the phase edges (wall s)."""
    rnd = random.Random(seed)
    arrivals, edges, t0 = [], [], 0.0
    for c in (1, 4, 8, 16, 8, 4, 1):
        lat = meas[f"{BASELINE.label}@{c}"]["latency_s"] or 3.0
        rate = c / lat  # per twin second
        t = t0
        while True:
            t += rnd.expovariate(rate)
            if t >= t0 + phase_twin_s:
                break
            arrivals.append(t / scale)
        t0 += phase_twin_s
        edges.append(t0 / scale)
    return arrivals, edges


def pilot_drive(calls: int, scale: float, seed: int) -> Any:
    rnd = random.Random(seed)
    plan = [(rnd.randint(200, 700), rnd.uniform(2.0, 8.0) / scale) for _ in range(calls)]

    def drive(url: str, rec: Recorder) -> None:
        from harness.serve.loadgen import client, one_request

        with client(url) as http:
            for i, (tokens, think) in enumerate(plan):
                one_request(http, f"step {i}: {PILOT_PROMPT}", tokens, rec)
                time.sleep(think)

    return drive


def plot(path: Path, runs: dict[str, tuple[Timeline, dict[str, Any]]], scale: float, edges: list[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 2.1 * len(runs)), sharex=True)
    for ax, (name, (tl, fig_)) in zip(axes, runs.items()):
        x = [((a - tl.start_ns) / 1e9) * scale for a, _ in fig_["_series"]]
        ax.axhspan(*BAND, color="tab:green", alpha=0.25, label="band")
        ax.plot(
            x,
            [u if u is not None else float("nan") for _, u in fig_["_series"]],
            color="tab:red",
            lw=1,
            label="utilization",
        )
        ax.set_ylim(0.0, 1.1)
        ax.set_ylabel("u")
        ax2 = ax.twinx()
        ax2.plot(
            [(t - tl.start_ns) / 1e9 * scale for t, _ in tl.in_flight],
            [n for _, n in tl.in_flight],
            color="tab:blue",
            lw=0.6,
            alpha=0.6,
        )
        ax2.set_ylabel("in flight")
        ax2.set_ylim(0, 24)
        for sw in tl.switches:
            x_sw = (sw["t_wall_ns"] - tl.start_ns) / 1e9 * scale
            ax.axvline(x_sw, color="k", lw=0.8, ls="--")
            ax.text(x_sw, 0.02, ":".join(map(str, sw["new"])), rotation=90, fontsize=6, va="bottom")
        ax.set_title(
            f"{name}: {fig_['in_band']:.0%} of time in band, {fig_['tok_s']:.0f} tok/s, {fig_['switches']} switches "
            "(twin)",
            fontsize=9,
        )
    axes[-1].set_xlabel("twin seconds (dashed: switches; blue: requests in flight)")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time-scale", type=float, default=5.0)
    ap.add_argument("--phase-s", type=float, default=20.0, help="twin seconds per load phase of the bursty trace")
    ap.add_argument("--calib-s", type=float, default=10.0, help="twin seconds measured per (config, batch size)")
    ap.add_argument("--pilot-calls", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("results/bench-serve"))
    ap.add_argument("--quick", action="store_true", help="phases of 8 twin s, 3 pilot calls (a smoke run)")
    ap.add_argument("--traces", default="bursty,pilot", help="comma-separated traces to replay (while iterating)")
    ap.add_argument("--only", default="", help="';'-separated mode names to run (default: all; while iterating)")
    a = ap.parse_args(argv)
    if a.quick:
        a.phase_s, a.calib_s, a.pilot_calls = 8.0, 5.0, 3
    scale = a.time_scale
    opts = SessionOptions(
        picks={1: BASELINE},
        configs=list(CANDIDATES),
        run_dir=a.out,
        time_scale=scale,
        engine_args=("--twin-launch-scale", "0.1", "--emulate-version", "0.5.23"),
        sglang_version="0.5.23",
    )
    t_start = time.monotonic()
    report: dict[str, Any] = {
        "hardware": "twin:rtx4060-laptop",
        "time_scale": scale,
        "band": BAND,
        "commit": commit(),
        "args": {k: str(v) for k, v in vars(a).items()},
        "traces": {},
    }
    with open_session(opts) as s:
        table, model, meas = calibrate(s, scale, a.calib_s)
        report["picks"] = {str(b): c.as_list() for b, c in table.items()}
        report["calibration"] = meas
        print(
            "picks (recipe rule on the closed-loop measurements):",
            {b: str(c) for b, c in table.items()},
            file=sys.stderr,
        )
        arrivals, edges = bursty(meas, a.phase_s, scale, a.seed)
        prompts = load_prompts()
        traces = {
            "bursty": lambda url, rec: replay(url, arrivals, [OUTPUT_TOKENS], prompts, rec),
            "pilot": pilot_drive(a.pilot_calls, scale, a.seed),
        }
        traces = {k: v for k, v in traces.items() if k in a.traces.split(",")}
        modes: list[tuple[str, Any, bool]] = [
            (f"static {c}", lambda c=c: BandDecider({1: c}), False) for c in CANDIDATES
        ]
        modes += [
            ("controller (picks only)", lambda: BandDecider(table, ControllerParams(band=BAND)), False),
            ("controller", lambda: BandDecider(table, closed_loop_params(model)), False),
            ("adaptive", lambda: AdaptiveDecider(), True),
        ]
        if a.only:
            modes = [m for m in modes if m[0] in a.only.split(";")]
        for trace, drive in traces.items():
            runs: dict[str, tuple[Timeline, dict[str, Any]]] = {}
            for name, make, ask in modes:
                tl = run_mode(s, make(), drive, ask)
                runs[name] = (tl, figures(s, tl, scale))
                print(
                    f"{trace:6} {name:18} "
                    + " ".join(f"{k}={v}" for k, v in runs[name][1].items() if k not in ("_series", "series")),
                    file=sys.stderr,
                )
            statics = [n for n in runs if n.startswith("static")]
            if not statics or "controller" not in runs:  # a partial run (--only): figures on stderr, the series kept
                report["traces"][trace] = {
                    "modes": {n: {k: v for k, v in f.items() if k != "_series"} for n, (_, f) in runs.items()}
                }
                continue
            best, best_busy = (
                max(statics, key=lambda n: (runs[n][1][k] or 0, runs[n][1]["tok_s"]))
                for k in ("in_band", "in_band_busy")
            )
            shown = {
                n: runs[n]
                for n in dict.fromkeys(("controller", best, "controller (picks only)", "adaptive"))
                if n in runs
            }
            plot(a.out / f"serve_band_{trace}.png", shown, scale, edges)
            ctl, bst = runs["controller"][1], runs[best][1]
            report["traces"][trace] = {
                "modes": {n: {k: v for k, v in f.items() if k != "_series"} for n, (_, f) in runs.items()},
                "best_static": best,
                "in_band_gain": round((ctl["in_band"] or 0) - (bst["in_band"] or 0), 4),
                "best_static_busy": best_busy,
                "in_band_busy_gain": round((ctl["in_band_busy"] or 0) - (runs[best_busy][1]["in_band_busy"] or 0), 4),
                "tok_s_ratio_vs_best_static": round(ctl["tok_s"] / bst["tok_s"], 4) if bst["tok_s"] else None,
            }
    report["wall_s"] = round(time.monotonic() - t_start, 1)
    (a.out / "serve_band.json").write_text(json.dumps(report, indent=1))
    print_table(report)
    return 0


def commit() -> str:
    """The commit measured (``+dirty`` when the work tree differs from it)."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=Path(__file__).parent).stdout.strip()

    head = git("rev-parse", "--short=10", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def pct(x: float | None) -> str:
    return "" if x is None else f"{x:.1%}"


def print_table(report: dict[str, Any]) -> None:
    print(f"commit {report['commit']}, time scale {report['time_scale']}, band {report['band']}")
    print(
        "| trace | mode | time in band | busy time in band | busy share | mean u | tok/s | J/token | p50 s | p99 s | switches | errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for trace, t in report["traces"].items():
        if "best_static" not in t:
            continue
        for name, f in t["modes"].items():
            mark = " (best static)" if name == t["best_static"] else ""
            mark += " (best static, busy)" if name == t["best_static_busy"] and name != t["best_static"] else ""
            print(
                f"| {trace} | {name}{mark} | {pct(f['in_band'])} | {pct(f['in_band_busy'])} | {pct(f['busy_share'])} | {f['mean_u']} | "
                f"{f['tok_s']} | {f['j_per_token']} | {f['p50_s']} | {f['p99_s']} | {f['switches']} | {f['errors']} |"
            )
        print(
            f"| {trace} | controller vs best static | {t['in_band_gain']:+.1%} | {t['in_band_busy_gain']:+.1%} | | | "
            f"ratio {t['tok_s_ratio_vs_best_static']} | | | | | |"
        )


if __name__ == "__main__":
    sys.exit(main())
