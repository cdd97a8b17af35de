"""``--power-caps auto`` on datacenter twin profiles the project has not seen: does every batch size get a config in
the band, with no hand-chosen cap?

Each profile is the shipped ``h100-sxm`` with its power terms (and idle power) scaled by a factor and its step times
by another, written to ``OUT/profiles/``: boards that draw a different share of their 700 W limit and decode at a
different speed. For each, one real twin sweep with ``--power-caps auto`` (the probe, the chosen caps, the passes);
then, per batch size, whether some config is in the band under one of the chosen caps. Prints a table, then one
figure: batch sizes with a config in band / all (and / those that some cap inside the board's limits can reach: a
board drawing below 0.95 of its lowest limit cannot be capped into the band), and the same at the 700 W limit in
force (the baseline: the probe's own verdict, measured in the same run). Exit 1 when a reachable one is missed. Usage::

    .venv/bin/python benchmarks/caps_auto_unseen.py [--factors 0.7:1.0,1.3:0.8,0.9:1.2] [--batch-sizes 1,4,16]
        [--configs 0:0:0,3:4:8,5:2:8] [--out results/caps_auto_unseen]

About 60-90 s per profile on a 2-core host (three profiles: under 5 minutes). Twin figures, not a GPU's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from harness.gpu.band import BAND
from harness.grid import parse_batch_sizes, parse_configs
from harness.runs.options import SweepOptions
from harness.sweep.console import SweepConsole
from harness.sweep.session import run_sweep
from harness.twin.profile import load_profile

POWER_TERMS = ("target_w", "target_w_per_token", "draft_w", "overhead_w", "prefill_w")
STEP_TERMS = ("target_mem_ms", "target_ms_per_token", "baseline_overhead_ms", "spec_overhead_ms", "draft_step_ms")


def unseen_profile(out: Path, power_x: float, step_x: float) -> Path:
    """The H100 twin with its power terms x ``power_x`` and its step times x ``step_x``, as a profile file."""
    p = load_profile("h100-sxm")
    power = p.power.model_copy(update={k: getattr(p.power, k) * power_x for k in POWER_TERMS})
    perf = p.perf.model_copy(update={k: getattr(p.perf, k) * step_x for k in STEP_TERMS})
    device = p.device.model_copy(update={"idle_power_w": p.device.idle_power_w * power_x})
    name = f"h100-unseen-p{power_x:g}-s{step_x:g}"
    prof = p.model_copy(update={"name": name, "power": power, "perf": perf, "device": device,
                                "about": f"{p.about} [benchmark variant: power x{power_x:g}, step time x{step_x:g}]"})  # fmt: skip
    path = out / "profiles" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(prof.model_dump(), indent=1))
    return path


def covered(run_dir: Path, batch_sizes: list[int]) -> dict[int, str | None]:
    """Per batch size, ``cap W: config`` of the fastest in-band row under any chosen cap (None: none in band)."""
    best: dict[int, tuple[float, str]] = {}
    for line in (run_dir / "rows.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("error") or not r.get("power_limit_w") or r.get("avg_power_watts") is None:
            continue
        u = r["avg_power_watts"] / r["power_limit_w"]
        if BAND[0] <= u <= BAND[1] and r["speed_tok_s"] > best.get(r["batch_size"], (-1.0, ""))[0]:
            cfg = f"({r['steps']},{r['topk']},{r['num_draft_tokens']})"
            best[r["batch_size"]] = (r["speed_tok_s"], f"{r['power_limit_w']:g} W: {cfg}")
    return {bs: best[bs][1] if bs in best else None for bs in batch_sizes}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--factors", default="0.7:1.0,1.3:0.8,0.9:1.2", help="POWER_X:STEP_X,... one profile each")
    ap.add_argument("--batch-sizes", default="1,4,16")
    ap.add_argument("--configs", default="0:0:0,3:4:8,5:2:8")
    ap.add_argument("--time-scale", type=float, default=20.0)
    ap.add_argument("--output-tokens", type=int, default=512)
    ap.add_argument("--min-window", type=float, default=4.0)
    ap.add_argument("--out", type=Path, default=Path("results/caps_auto_unseen"))
    args = ap.parse_args(argv)
    console = Console(highlight=False)
    sizes = parse_batch_sizes(args.batch_sizes)
    table = Table(title=f"--power-caps auto on unseen datacenter twins (band {BAND[0]}-{BAND[1]})")
    for col in ("profile", "caps chosen", "unreachable at 700 W", *[f"bs {bs}" for bs in sizes]):
        table.add_column(col)
    hit = total = reachable_at_limit = no_cap = 0
    for item in args.factors.split(","):
        power_x, step_x = (float(x) for x in item.split(":"))
        profile = unseen_profile(args.out, power_x, step_x)
        opts = SweepOptions(
            engine="twin", twin_profile=str(profile), configs=[c.as_tuple() for c in parse_configs(args.configs)],
            batch_sizes=sizes, time_scale=args.time_scale, output_tokens=args.output_tokens, settle="0",
            min_window_s=args.min_window, power_caps=["auto"],
        )  # fmt: skip
        run_dir, _, manifest = run_sweep(
            opts, args.out / profile.stem, force=True, console=SweepConsole(quiet=True), argv=["caps_auto_unseen"]
        )
        probe = (manifest.preflight or {})["probe"]
        short = probe["band"]["unreachable_batch_sizes"]
        impossible = probe["band"]["no_cap_reaches"]  # draws below 0.95 of the board's lowest limit
        cells = covered(run_dir, sizes)
        hit += sum(v is not None for v in cells.values())
        no_cap += len(impossible)
        total += len(sizes)
        reachable_at_limit += len(sizes) - len(short)
        table.add_row(
            profile.stem, ",".join(probe["caps_auto"]["caps"]), ",".join(map(str, short)) or "none",
            *[cells[bs] or ("no cap can" if bs in impossible else "none in band") for bs in sizes],
        )  # fmt: skip
    console.print(table)
    console.print(
        f"batch sizes with a config in band: {hit}/{total} with --power-caps auto ({hit}/{total - no_cap} of those "
        f"some cap inside the board's limits can reach; {no_cap} draw below 0.95 of its lowest limit); "
        f"{reachable_at_limit}/{total} could reach the band at the 700 W limit in force"
    )
    return 0 if hit == total - no_cap else 1


if __name__ == "__main__":
    sys.exit(main())
