"""Traffic replay for ``harness serve`` on the twin: how much of the busy time does each serving mode hold the
power in the band, at what speed?

    .venv/bin/python benchmarks/serve_band.py [--trace FILE.csv] [--traces bursty,pilot] [--quick] [--out DIR]

One twin GPU, one sampler, one twin engine instance per config, one front; every mode routes the same trace over the
same instances:

- ``controller``: the band controller with both actuators (config + locked SM clock, ``--clock-control``);
- ``speculation only``: the same closed loop without the clock (the loop before issue 37);
- ``clocks only (C)``: the best static config C with the clock trim (the DVFS anchors' design);
- ``static C``: every request to config C (no_spec and the candidates; ``--quick``: no_spec and the 3 the
  calibration ranks highest), the best of them by busy time in band marked;
- ``adaptive``: the emulation of sglang's ``--speculative-adaptive`` over the topk-1 tiers and no_spec.

The pick table and the utilization model come first, in the same run, from closed-loop measurements at batch sizes
1, 2, 4, 8, 16 on every candidate. Traces (twin seconds): ``bursty``: Poisson arrivals whose rate steps so the offered
concurrency goes 1, 4, 8, 16, 8, 4, 1; ``pilot``: the agentic pilots' pattern; ``--trace FILE.csv``: any CSV of the
Azure LLM inference trace schema (``harness/serve/traces.py``), its rate scaled so it offers the tokens/s no_spec
serves at 8 in flight (stated), prompts of its context lengths, max_tokens of its generated counts.

Figures per (trace, mode): busy time in band, all time in band, tracking RMS, step response, tokens/s, J/token,
p50/p99 latency and TTFT, switches and clock changes. Writes ``OUT/serve_band.json``, ``OUT/serve_band_<trace>.png``
and ``OUT/serve_band.html``; the last line printed is one JSON object per trace and mode. Everything here runs on the
twin: figures of the twin model, not of a GPU.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the test gear: _loadgen

from _loadgen import ClosedLoop, Recorder, replay

from harness.core.clocks import wall_ns
from harness.grid import BASELINE, SpecConfig
from harness.report.serve_html import write_serve_html
from harness.serve.adaptive import tier_config
from harness.serve.band_feedback import LoopParams
from harness.serve.band_metrics import band_figures, percentile
from harness.serve.control_loop import AdaptiveDecider, BandDecider
from harness.serve.controller import ControllerParams
from harness.serve.session import ServeSession, SessionOptions, open_session
from harness.serve.traces import plan_replay, prompt_of, rate_scale_for, read_trace
from harness.serve.utilization_model import band_share, model_pick
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
    request's drain at these batch sizes), the defaults of ``closed_loop.LoopParams`` otherwise (with a clock
    actuator whose lock the GPU took, the loop scores the share of windows at or above the band)."""
    return ControllerParams(band=BAND, model=model, min_hold_s=3.0, loop=LoopParams())


PILOT_PROMPT = " ".join(["def parse(line):  # the agent's long context: files, diffs, tool output"] * 320)


@dataclass
class Timeline:
    """What one mode's replay left behind: wall edges, requests, in-flight samples, switch and clock records."""

    start_ns: int
    end_ns: int
    done: list[Any]
    in_flight: list[tuple[int, int]]
    switches: list[dict[str, Any]]
    clocks: list[dict[str, Any]]
    first: list[int] | None = None
    """The config routed at the start."""


def run_mode(s: ServeSession, decider: Any, drive: Any, ask_accept: bool = False, clock: bool = False) -> Timeline:
    """Install ``decider`` (and the clock trim on or off), run ``drive(url, recorder)`` while sampling the in-flight
    count, return the timeline."""
    act = s.loop.clock_actuator
    if act is not None:
        act.set_enabled(clock)
    n0 = len(s.loop.log_path.read_text().splitlines())
    s.loop.set_decider(decider)
    s.front.ask_accept = ask_accept
    rec, flight = Recorder(), []
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
    if act is not None:
        act.set_enabled(False)  # unlocked between modes (logged as a restore)
    recs = [json.loads(x) for x in s.loop.log_path.read_text().splitlines()[n0:]]
    sw = [r for r in recs if "event" not in r]
    first = next((r["new"] for r in sw if r["reason"] == "start"), None)
    clocks = [r for r in recs if r.get("event") == "clock" and r["reason"] != "restore"]
    return Timeline(start, end, rec.snapshot(), flight, [r for r in sw if r["reason"] != "start"], clocks, first)


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


def figures(s: ServeSession, tl: Timeline, scale: float, edges_twin_s: list[float]) -> dict[str, Any]:
    us = bins(s, tl, 1.0, scale)
    flags = busy_bins(tl, us, scale)
    whole = s.world.telemetry.window(tl.start_ns, tl.end_ns, wait_s=1.0)
    ok = [d for d in tl.done if d.ok]
    tokens = sum(d.tokens for d in ok)
    twin_s = (tl.end_ns - tl.start_ns) / 1e9 * scale
    lat = [(d.end_s - d.start_s) * scale for d in ok]
    ttft = [d.ttft_s * scale for d in ok if d.ttft_s is not None]
    steps = [int(e) for e in edges_twin_s if int(e) < len(us)]
    return {
        **band_figures([u for _, u in us], flags, BAND, steps),
        "tok_s": round(tokens / twin_s, 2),
        "j_per_token": round(whole.energy_j / tokens, 4) if whole.energy_j and tokens else None,
        "p50_s": percentile(lat, 0.5),
        "p99_s": percentile(lat, 0.99),
        "ttft_p50_s": percentile(ttft, 0.5),
        "ttft_p99_s": percentile(ttft, 0.99),
        "switches": len(tl.switches),
        "clock_changes": len(tl.clocks),
        "requests": len(tl.done),
        "errors": len(tl.done) - len(ok),
        "bins": len(us),
        "_series": us,
        "series": [
            [round((a - tl.start_ns) / 1e9 * scale, 2), None if u is None else round(u, 4), int(b)]
            for (a, u), b in zip(us, flags)
        ],
    }


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


def ranked_statics(model: Model, n: int) -> list[SpecConfig]:
    """no_spec and the ``n`` candidates the calibration predicts most often in the band (mean share over the
    measured batch sizes above 1; at 1 nothing is)."""
    score = {c: sum(band_share(model[bs][c][0], BAND, 0.02, 0.995) for bs in CALIB_BS if bs > 1) for c in CANDIDATES}
    best = sorted((c for c in CANDIDATES if c != BASELINE), key=lambda c: (-score[c], c))[:n]
    return [BASELINE, *best]


def bursty(meas: dict[str, Any], phase_twin_s: float, scale: float, seed: int) -> tuple[list[float], list[float]]:
    """Poisson arrivals (wall s) stepping through concurrencies 1, 4, 8, 16, 8, 4, 1; the phase edges (twin s)."""
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
        edges.append(t0)
    return arrivals, edges[:-1]


def csv_drive(
    path: Path, meas: dict[str, Any], duration_s: float, start_s: float, scale: float
) -> tuple[Any, list[str]]:
    """A replay of an Azure-schema CSV at the rate scale where it offers no_spec's tokens/s at 8 in flight; notes."""
    reqs = read_trace(path)
    target = meas[f"{BASELINE.label}@8"]["tok_s"]
    rs = rate_scale_for(reqs, target)
    plan = plan_replay(reqs, rs, duration_s, start_s=start_s, max_generated=1000)
    prompts = [prompt_of(c) for c in plan.context_tokens]
    arrivals = [a / scale for a in plan.arrivals_s]
    notes = [
        f"trace {path.name}: {len(reqs)} requests; replayed {len(arrivals)} from trace seconds "
        f"{plan.window_s[0]:.0f}-{plan.window_s[1]:.0f} over {duration_s:.0f} twin s",
        f"rate scale {rs:.4f} (x the trace's arrival rate): the trace offers {target:.0f} generated tokens/s, what "
        "no_spec serves at 8 in flight closed-loop (a 1-B model on a laptop GPU cannot serve the raw rate)",
        f"prompts of the trace's context lengths (mean {sum(plan.context_tokens) / max(1, len(prompts)):.0f} tokens), "
        f"max_tokens its generated counts (mean {sum(plan.generated_tokens) / max(1, len(prompts)):.0f})",
    ]

    def drive(url: str, rec: Recorder) -> None:
        replay(url, arrivals, plan.generated_tokens, prompts, rec, stream=True)

    return drive, notes


def pilot_drive(calls: int, scale: float, seed: int) -> Any:
    rnd = random.Random(seed)
    plan = [(rnd.randint(200, 700), rnd.uniform(2.0, 8.0) / scale) for _ in range(calls)]

    def drive(url: str, rec: Recorder) -> None:
        from _loadgen import client, one_request

        with client(url) as http:
            for i, (tokens, think) in enumerate(plan):
                one_request(http, f"step {i}: {PILOT_PROMPT}", tokens, rec, stream=True)
                time.sleep(think)

    return drive


def plot(path: Path, trace: str, runs: dict[str, tuple[Timeline, dict[str, Any]]], scale: float) -> Path:
    """Per mode two panels: utilization (band shaded) with the batch size in flight; the routed config and the
    locked SM clock (top of the axis: unlocked)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2 * len(runs), 1, figsize=(11, 2.0 * 2 * len(runs)), sharex=True)
    labels = sorted({str(c) for c in CANDIDATES})
    for i, (name, (tl, f)) in enumerate(runs.items()):
        ax, axc = axes[2 * i], axes[2 * i + 1]
        tw = lambda ns, t0=tl.start_ns: (ns - t0) / 1e9 * scale  # noqa: E731
        ax.axhspan(*BAND, color="tab:green", alpha=0.3)
        ax.plot([tw(a) for a, _ in f["_series"]], [u if u is not None else float("nan") for _, u in f["_series"]],
                color="tab:red", lw=1, drawstyle="steps-post")  # fmt: skip
        ax.set_ylim(0.0, 1.1)
        ax.set_ylabel("u")
        ax2 = ax.twinx()
        ax2.plot([tw(t) for t, _ in tl.in_flight], [n for _, n in tl.in_flight], color="tab:blue", lw=0.5, alpha=0.6)
        ax2.set_ylabel("in flight")
        ax.set_title(
            f"{trace} / {name}: busy in band {f['busy_in_band'] or 0:.0%}, tracking RMS {f['tracking_rms']}, "
            f"{f['tok_s']:.0f} tok/s, {f['switches']} switches, {f['clock_changes']} clock changes (twin)",
            fontsize=9,
        )
        cfg_x, cfg_y = [0.0], [labels.index(str(SpecConfig(*tl.first))) if tl.first else 0]
        for sw in tl.switches:
            cfg_x.append(tw(sw["t_wall_ns"]))
            cfg_y.append(labels.index(str(SpecConfig(*sw["new"]))))
        end = tw(tl.end_ns)
        axc.step([*cfg_x, end], [*cfg_y, cfg_y[-1]], where="post", color="k", lw=1)
        axc.set_yticks(range(len(labels)), labels, fontsize=6)
        axc.set_ylabel("config", fontsize=7)
        axk = axc.twinx()
        top = 2370
        ck_x, ck_y = [0.0], [top]
        for c in tl.clocks:
            ck_x.append(tw(c["t_wall_ns"]))
            ck_y.append(c["new_mhz"] or top)
        axk.step([*ck_x, end], [*ck_y, ck_y[-1]], where="post", color="tab:purple", lw=1.2)
        axk.set_ylim(min(ck_y) - 150, top + 50)
        axk.set_ylabel("SM MHz", color="tab:purple", fontsize=7)
    axes[-1].set_xlabel("twin seconds (red: utilization, green: band, blue: in flight; black: config, purple: clock)")
    fig.tight_layout()
    fig.savefig(path, dpi=70)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time-scale", type=float, default=5.0)
    ap.add_argument("--phase-s", type=float, default=20.0, help="twin seconds per load phase of the bursty trace")
    ap.add_argument("--calib-s", type=float, default=10.0, help="twin seconds measured per (config, batch size)")
    ap.add_argument("--pilot-calls", type=int, default=6)
    ap.add_argument("--trace", type=Path, help="an Azure-schema CSV to replay (then only it, unless --traces)")
    ap.add_argument("--trace-s", type=float, default=300.0, help="twin seconds of the CSV trace replayed")
    ap.add_argument("--trace-start-s", type=float, default=600.0, help="trace seconds where the replay starts")
    ap.add_argument("--statics", type=int, default=len(CANDIDATES), help="static configs besides no_spec")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("results/bench-serve"))
    ap.add_argument("--quick", action="store_true", help="8-s phases, 60 s of a CSV, 3 statics (under 10 minutes)")
    ap.add_argument("--traces", default=None, help="bursty,pilot (default bursty,pilot; none with --trace)")
    ap.add_argument("--only", default="", help="';'-separated mode names to run (default: all; while iterating)")
    a = ap.parse_args(argv)
    if a.quick:
        a.phase_s, a.calib_s, a.pilot_calls, a.trace_s, a.statics = 8.0, 4.0, 3, 60.0, 3
    names = (a.traces if a.traces is not None else ("" if a.trace else "bursty,pilot")).split(",")
    scale = a.time_scale
    opts = SessionOptions(
        picks={1: BASELINE},
        configs=list(CANDIDATES),
        run_dir=a.out,
        time_scale=scale,
        engine_args=("--twin-launch-scale", "0.1", "--emulate-version", "0.5.23"),
        sglang_version="0.5.23",
        clock_control=True,
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
    pngs: list[Path] = []
    with open_session(opts) as s:
        table, model, meas = calibrate(s, scale, a.calib_s)
        report["picks"] = {str(b): c.as_list() for b, c in table.items()}
        report["calibration"] = meas
        print("picks:", {b: str(c) for b, c in table.items()}, file=sys.stderr)
        prompts = load_prompts()
        traces: dict[str, tuple[Any, list[float], list[str]]] = {}
        if "bursty" in names:
            arrivals, edges = bursty(meas, a.phase_s, scale, a.seed)
            traces["bursty"] = (
                lambda url, rec: replay(url, arrivals, [OUTPUT_TOKENS], prompts, rec, stream=True),
                edges,
                [f"offered concurrency 1, 4, 8, 16, 8, 4, 1 for {a.phase_s:g} twin s each (Poisson)"],
            )
        if "pilot" in names:
            traces["pilot"] = (pilot_drive(a.pilot_calls, scale, a.seed), [], [f"{a.pilot_calls} agent calls"])
        if a.trace is not None:
            drive, notes = csv_drive(a.trace, meas, a.trace_s, a.trace_start_s, scale)
            traces[a.trace.stem] = (drive, [], notes)
        statics = ranked_statics(model, a.statics)
        for trace, (drive, edges, notes) in traces.items():
            runs: dict[str, tuple[Timeline, dict[str, Any]]] = {}

            def run(
                name: str,
                decider: Any,
                ask: bool = False,
                clock: bool = False,
                drive: Any = drive,
                edges: list[float] = edges,
                runs: dict[str, tuple[Timeline, dict[str, Any]]] = runs,
                trace: str = trace,
            ) -> None:
                if a.only and name not in a.only.split(";"):
                    return
                tl = run_mode(s, decider, drive, ask, clock)
                runs[name] = (tl, figures(s, tl, scale, edges))
                shown = {k: v for k, v in runs[name][1].items() if k not in ("_series", "series")}
                print(f"{trace:8} {name:24} " + " ".join(f"{k}={v}" for k, v in shown.items()), file=sys.stderr)

            named = {("no_spec" if c == BASELINE else f"static {c}"): c for c in statics}
            for n, c in named.items():
                run(n, BandDecider({1: c}))
            done = [n for n in named if n in runs]
            best = max(done, key=lambda n: (runs[n][1]["busy_in_band"] or 0, runs[n][1]["tok_s"])) if done else None
            best_cfg = named[best] if best is not None else BASELINE
            run(f"clocks only ({best_cfg})", BandDecider({1: best_cfg}), clock=True)
            run("speculation only", BandDecider(table, closed_loop_params(model)))
            run("controller", BandDecider(table, closed_loop_params(model)), clock=True)
            run("adaptive", AdaptiveDecider(), ask=True)
            order = ["controller", "speculation only", f"clocks only ({best_cfg})", best, "no_spec", "adaptive"]
            shown = {n: runs[n] for n in dict.fromkeys(order) if n in runs}
            shown.update({n: r for n, r in runs.items() if n not in shown})
            if shown:
                pngs.append(plot(a.out / f"serve_band_{trace}.png", trace, shown, scale))
            report["traces"][trace] = {
                "modes": {n: {k: v for k, v in f.items() if k != "_series"} for n, (_, f) in shown.items()},
                "best_static": best,
                "notes": [*notes, f"best static (by busy time in band): {best}; statics run: {len(done)}"],
            }
    report["wall_s"] = round(time.monotonic() - t_start, 1)
    (a.out / "serve_band.json").write_text(json.dumps(report, indent=1))
    write_serve_html(a.out / "serve_band.html", report, pngs)
    print_table(report)
    keys = ("busy_in_band", "time_in_band", "tracking_rms", "tok_s", "j_per_token", "p99_s")
    last = {t: {n: {k: f[k] for k in keys} for n, f in v["modes"].items()} for t, v in report["traces"].items()}
    print(json.dumps(last))
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
    print(
        f"commit {report['commit']}, time scale {report['time_scale']}, band {report['band']}, wall {report['wall_s']} s"
    )
    print(
        "| trace | mode | busy in band | time in band | tracking RMS | step s (reached) | tok/s | J/token | p50 s | "
        "p99 s | TTFT p50 s | TTFT p99 s | switches | clock changes | errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for trace, t in report["traces"].items():
        for name, f in t["modes"].items():
            mark = " (best static)" if name == t["best_static"] else ""
            print(
                f"| {trace} | {name}{mark} | {pct(f['busy_in_band'])} | {pct(f['time_in_band'])} | {f['tracking_rms']} | "
                f"{f['step_response_s']} ({f['steps_reached']}) | {f['tok_s']} | {f['j_per_token']} | {f['p50_s']} | "
                f"{f['p99_s']} | {f['ttft_p50_s']} | {f['ttft_p99_s']} | {f['switches']} | {f['clock_changes']} | "
                f"{f['errors']} |"
            )


if __name__ == "__main__":
    sys.exit(main())
