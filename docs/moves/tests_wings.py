"""The second move of issue 35, as a script: tests mirror the wings. Test files move into tests/<wing>/ (git mv);
paths computed from a test file's own place get one level deeper. Shared helpers, fixture data, the NVML shim and
the conformance probes stay at tests/. Rerunnable on the commit before it: ``python docs/moves/tests_wings.py``."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WING = {
    "core": ["test_httpserve", "test_jsonl", "test_stopflag"],
    "gpu": ["test_powercap", "test_smclocks"],
    "telemetry": [
        "test_sampler_accuracy",
        "test_sampler_faults",
        "test_sampler_service",
        "test_steady_window",
        "test_telemetry_nvml",
        "test_telemetry_nvml_processes",
        "test_telemetry_store",
        "test_telemetry_windows",
    ],
    "engine": [
        "test_engine_argv",
        "test_engine_version",
        "test_engine_twin",
        "test_sglang_conformance",
        "test_vllm_conformance",
        "test_vllm_engine",
    ],
    "runs": ["test_rows"],
    "dataset": ["test_dataset"],
    "world": ["test_bench_window"],
    "twin": [
        "test_twin_calibrate",
        "test_twin_device",
        "test_twin_engine",
        "test_twin_fit_rows",
        "test_twin_load_immunity",
        "test_twin_timescale",
    ],
    "sweep": [
        "test_sweep_config",
        "test_sweep_faults",
        "test_sweep_plan",
        "test_sweep_twin",
        "test_active_spread",
        "test_active_sweep",
        "test_ray_executor",
        "test_reproduce",
    ],
    "report": ["test_report", "test_report_html"],
    "policies": [
        "test_band_cap",
        "test_policies_artifacts",
        "test_policies_cli",
        "test_policies_contract",
        "test_policies_heldout",
        "test_policies_live",
        "test_policies_oracles",
        "test_policies_semantics",
        "test_policies_twin_grid",
    ],
    "serve": ["test_serve_controller", "test_serve_relaunch", "test_serve_twin"],
    "gpucheck": ["test_gpu_check"],
    "pilots": [
        "test_pilot_common",
        "test_pilot_swebench",
        "test_pilot_swebench_e2e",
        "test_pilot_terminalbench",
        "test_pilot_terminalbench_e2e",
        "test_pilot_terminalbench_harbor",
    ],
}
EXTRA = {
    "tests/test_pilot_swebench_data": "tests/pilots/test_pilot_swebench_data",
    "tests/_serve_helpers.py": "tests/serve/_serve_helpers.py",
    "tests/_terminalbench_helpers.py": "tests/pilots/_terminalbench_helpers.py",
}
DEEPER = [
    ("Path(__file__).resolve().parents[1]", "Path(__file__).resolve().parents[2]"),
    ("Path(__file__).resolve().parent.parent", "Path(__file__).resolve().parents[2]"),
    ('Path(__file__).parent / "fixtures"', 'Path(__file__).parents[1] / "fixtures"'),
    (
        'os.path.join(os.path.dirname(__file__), "vllm_conformance")',
        'os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "vllm_conformance")',
    ),
]
moves = {f"tests/{t}.py": f"tests/{w}/{t}.py" for w, ts in WING.items() for t in ts}
moves.update(EXTRA)
for old, new in moves.items():
    (ROOT / new).parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "mv", old, new], cwd=ROOT, check=True)
    p = ROOT / new
    if p.suffix == ".py":
        s = p.read_text()
        for a, b in DEEPER:
            s = s.replace(a, b)
        p.write_text(s)
# every other text that names a moved test file by path
files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
pat = re.compile(r"(?<![\w/])(" + "|".join(re.escape(k) for k in sorted(moves, key=len, reverse=True)) + r")(?![\w])")
for f in files:
    p = ROOT / f
    if not p.is_file() or p.suffix not in (".py", ".md", ".sh", ".toml", ".yaml", "") or "fixtures" in f:
        continue
    s = p.read_text()
    n = pat.sub(lambda m: moves[m.group(1)], s)
    if n != s:
        p.write_text(n)
print(len(moves), "moved")
