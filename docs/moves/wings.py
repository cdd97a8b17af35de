"""The one move of ``harness/`` into wings (issue 35), as a script: a record of what moved where, rerunnable on the
commit before it. It moves files with ``git mv`` and rewrites every dotted module name and file path that names a
moved module, in every tracked text file (code, tests, docs, Makefile, compose, CI), in one pass.

Usage (from the repository root, on the commit before the move): ``python docs/moves/wings.py``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# old file (or folder) -> new file (or folder), relative to the repository root
MOVES: dict[str, str] = {
    # core: the house's plumbing
    "harness/errors.py": "harness/core/errors.py",
    "harness/extras.py": "harness/core/extras.py",
    "harness/timeutil.py": "harness/core/clocks.py",
    "harness/jsonl.py": "harness/core/jsonl.py",
    "harness/httpserve.py": "harness/core/httpserve.py",
    "harness/promtext.py": "harness/core/promtext.py",
    "harness/stopflag.py": "harness/core/stopflag.py",
    "harness/model_cli.py": "harness/core/model_options.py",
    # gpu: one GPU abstraction (control side)
    "harness/clock_events.py": "harness/gpu/clock_events.py",
    "harness/devicesetting.py": "harness/gpu/pass_setting.py",
    "harness/powercap.py": "harness/gpu/power_cap.py",
    "harness/smclocks.py": "harness/gpu/sm_clocks.py",
    "harness/gpucheck/nvctl.py": "harness/gpu/nvml_control.py",
    # engine: the inference servers
    "harness/engine/argv.py": "harness/engine/sglang_argv.py",
    "harness/engine/client.py": "harness/engine/sglang_client.py",
    # runs: what a run is (its plan, manifest, rows, folder)
    "harness/rowmodel.py": "harness/runs/row_model.py",
    "harness/rows.py": "harness/runs/rows.py",
    "harness/measurement.py": "harness/runs/measurement.py",
    "harness/manifest.py": "harness/runs/manifest.py",
    "harness/run_folder.py": "harness/runs/folder.py",
    "harness/runlock.py": "harness/runs/lock.py",
    "harness/sweep_options.py": "harness/runs/options.py",
    "harness/sweep_plan.py": "harness/runs/plan.py",
    # world: what a run measures with
    "harness/world.py": "harness/world/world.py",
    "harness/health.py": "harness/world/health.py",
    "harness/bench.py": "harness/world/bench.py",
    # twin: device, engine, fit
    "harness/twin/device.py": "harness/twin/device/gpu.py",
    "harness/twin/device_history.py": "harness/twin/device/history.py",
    "harness/twin/device_http.py": "harness/twin/device/http_api.py",
    "harness/twin/device_settings.py": "harness/twin/device/settings.py",
    "harness/twin/device_link.py": "harness/twin/engine/device_link.py",
    "harness/twin/engine.py": "harness/twin/engine/scheduler.py",
    "harness/twin/engine_args.py": "harness/twin/engine/sglang_args.py",
    "harness/twin/engine_metrics.py": "harness/twin/engine/metrics.py",
    "harness/twin/engine_request.py": "harness/twin/engine/request.py",
    "harness/twin/closed_loop.py": "harness/twin/engine/loop_clients.py",
    "harness/twin/loop_hint.py": "harness/twin/engine/loop_hint.py",
    "harness/twin/openai_api.py": "harness/twin/engine/openai_api.py",
    "harness/twin/sglang_api.py": "harness/twin/engine/sglang_api.py",
    "harness/twin/sglang_state.py": "harness/twin/engine/sglang_state.py",
    "harness/twin/vllm_api.py": "harness/twin/engine/vllm_api.py",
    "harness/twin/vllm_args.py": "harness/twin/engine/vllm_args.py",
    "harness/twin/tokens.py": "harness/twin/engine/tokens.py",
    "harness/twin/log.py": "harness/twin/engine/log.py",
    "harness/twin/launch.py": "harness/twin/engine/launch.py",
    "harness/twin/calibrate.py": "harness/twin/fit/calibrate.py",
    "harness/twin/fit_report.py": "harness/twin/fit/report.py",
    "harness/twin/fit_rows.py": "harness/twin/fit/from_run.py",
    # sweep: doing a run
    "harness/sweep.py": "harness/sweep/runner.py",
    "harness/sweep_run.py": "harness/sweep/session.py",
    "harness/sweep_errors.py": "harness/sweep/errors.py",
    "harness/console.py": "harness/sweep/console.py",
    "harness/sweep_cli.py": "harness/sweep/cli.py",
    "harness/active/flags.py": "harness/sweep/active/throttle_flags.py",
    "harness/active/loop.py": "harness/sweep/active/rounds.py",
    "harness/active": "harness/sweep/active",
    "harness/executors": "harness/sweep/executors",
    # dataset, report
    "harness/dataset_cli.py": "harness/dataset/cli.py",
    "harness/report.py": "harness/report/sweep.py",
    "harness/report_band.py": "harness/report/band.py",
    "harness/report_html.py": "harness/report/html.py",
    "harness/report_passes.py": "harness/report/passes.py",
    # serve
    "harness/serve/closed_loop.py": "harness/serve/band_feedback.py",
    "harness/serve/loop.py": "harness/serve/control_loop.py",
    "harness/serve/umodel.py": "harness/serve/utilization_model.py",
    "harness/serve/umodel_rows.py": "harness/serve/utilization_rows.py",
    # gpucheck
    "harness/gpucheck/verdicts.py": "harness/gpucheck/judge.py",
}

NEW_PACKAGES = {
    "harness/core": "The house's plumbing: errors, optional extras, clocks, JSONL, the HTTP layer, Prometheus text, "
    "stop flags and command-line options derived from a pydantic model. Imports nothing above it.",
    "harness/gpu": "One GPU abstraction (control side): NVML control calls, the power cap and locked SM clock as "
    "sweep dimensions, the setting applied per pass, and NVML's clock-event reason bits.",
    "harness/runs": "What a run is: the options it is planned with, its cells, its manifest, its rows (native and "
    "published layouts), the measurement fields of a row, its folder and the folder's writer lock.",
    "harness/world": "What a run measures with: a GPU (real or twin), a sampler, a launcher and the world's clock; "
    "its health; the synthetic workload of one cell (the bench).",
    "harness/twin/device": "The twin GPU device: state, history, board settings and its HTTP contract.",
    "harness/twin/engine": "The twin engine: an sglang- or vLLM-compatible server on the twin clock.",
    "harness/twin/fit": "Fitting twin profiles: to the published measurements and to a run folder's own rows.",
    "harness/sweep": "Doing a sweep: checks, the runner, one session, the console, the CLI; the active strategy and "
    "the executors (local, Ray).",
    "harness/report": "Reports: sweep tables per batch size, the energy band, passes, figures and the HTML page.",
}

TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".cfg", ".txt", ".json", ".html", ".ini", ""}


def _dotted(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def _renames() -> dict[str, str]:
    """Old text -> new text: dotted module names and file paths (folders first expand to every file under them)."""
    out: dict[str, str] = {}
    for old, new in MOVES.items():
        out[_dotted(old)] = _dotted(new)
        out[old] = new
    return out


def _tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    files = []
    for n in names:
        p = ROOT / n
        if p.is_file() and (p.suffix in TEXT_SUFFIXES or p.name in {"Makefile", "Dockerfile"}) and "fixtures" not in n:
            files.append(p)
    return files


def _source_now(old: str) -> str:
    """Where ``old`` is once the folder moves are done (a file inside a moved folder moved with it)."""
    for folder, target in MOVES.items():
        if old.startswith(folder + "/"):
            return target + old.removeprefix(folder)
    return old


def _git_mv() -> None:
    folders = [old for old in MOVES if (ROOT / old).is_dir()]
    files = [old for old in MOVES if old not in folders]
    for old in [*folders, *files]:  # folders first; a file inside one then moves from the folder's new place
        src, dst = ROOT / _source_now(old) if old in files else ROOT / old, ROOT / MOVES[old]
        if not src.exists():
            sys.exit(f"{old} does not exist: run this on the commit before the move")
        dst.parent.mkdir(parents=True, exist_ok=True)
        init = dst.parent / "__init__.py"
        if not init.exists():
            init.write_text(f'"""{NEW_PACKAGES[str(dst.parent.relative_to(ROOT))]}"""\n')
            subprocess.run(["git", "add", str(init)], cwd=ROOT, check=True)
        subprocess.run(["git", "mv", str(src), str(dst)], cwd=ROOT, check=True)


def _rewrite(renames: dict[str, str]) -> int:
    # one alternation, longest first, so ``harness.sweep_cli`` never matches as ``harness.sweep``; a name ends where
    # no identifier character (or, for paths, no further path segment of the same module) follows
    keys = sorted(renames, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w/.])(" + "|".join(re.escape(k) for k in keys) + r")(?![\w])")
    changed = 0
    for p in _tracked_text_files():
        text = p.read_text()
        new = pattern.sub(lambda m: renames[m.group(1)], text)
        if new != text:
            p.write_text(new)
            changed += 1
    return changed


# paths computed from a moved file's own place: one folder deeper now
DEPTH_FIXES = {
    "harness/runs/manifest.py": (
        "Path(__file__).resolve().parent.parent",
        "Path(__file__).resolve().parents[2]  # the checkout holding harness/",
    ),
    "harness/twin/fit/calibrate.py": (
        'Path(__file__).resolve().parents[1] / "data"',
        'Path(__file__).resolve().parents[2] / "data"  # harness/data',
    ),
}

FROM_IMPORT = re.compile(
    r"^(?P<indent>[ \t]*)from (?P<pkg>harness[\w.]*) import (?P<names>[\w ,]+?)(?P<tail>[ \t]*(#.*)?)$", re.M
)


def _rewrite_from_imports(old_modules: dict[str, str]) -> int:
    """``from harness import promtext`` style lines that import a moved module by its parent: one line per new
    parent, the local name kept (``import new as old`` where the file was renamed)."""

    def fix(m: re.Match[str]) -> str:
        pkg, parts = m["pkg"], [n.strip() for n in m["names"].split(",") if n.strip()]
        moved = [old_modules.get(f"{pkg}.{p.split(' as ')[0].strip()}") for p in parts]
        if not any(moved):
            return m.group(0)
        groups: dict[str, list[str]] = {}
        for part, target in zip(parts, moved):
            name, _, alias = (x.strip() for x in part.partition(" as "))
            if target is None:
                groups.setdefault(pkg, []).append(part)
                continue
            parent, _, base = target.rpartition(".")
            local = alias or name
            groups.setdefault(parent, []).append(base if base == local else f"{base} as {local}")
        lines = [f"{m['indent']}from {parent} import {', '.join(names)}" for parent, names in groups.items()]
        lines[-1] += m["tail"]
        return "\n".join(lines)

    changed = 0
    for p in _tracked_text_files():
        if p.suffix != ".py":
            continue
        text = p.read_text()
        new = FROM_IMPORT.sub(fix, text)
        if new != text:
            p.write_text(new)
            changed += 1
    return changed


def main() -> None:
    renames = _renames()
    # ``harness/active/x.py`` paths under a moved folder: add each file's own rename (a file rename wins)
    for old, new in list(MOVES.items()):
        if (ROOT / old).is_dir():
            for f in sorted((ROOT / old).rglob("*.py")):
                rel = str(f.relative_to(ROOT))
                target = MOVES.get(rel, new + rel.removeprefix(old))
                renames.setdefault(rel, target)
                renames.setdefault(_dotted(rel), _dotted(target))
    for old, new in list(renames.items()):
        if old.startswith("harness/") and old.endswith(".py"):
            renames.setdefault(old.removesuffix(".py").removesuffix("/__init__"), new.removesuffix(".py"))
    old_modules = {k: v for k, v in renames.items() if k.startswith("harness.")}
    _git_mv()
    for rel, (old, new) in DEPTH_FIXES.items():
        path = ROOT / rel
        path.write_text(path.read_text().replace(old, new))
    n = _rewrite(renames)  # dotted names and paths first: the from-import pass reads the old parents' names
    print(f"rewrote {n} files, then {_rewrite_from_imports(old_modules)} files' from-imports")


if __name__ == "__main__":
    main()
