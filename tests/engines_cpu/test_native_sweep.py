"""The native sweep, unchanged, against the real sglang 0.5.23 on this CPU (``--engine-device cpu``).

One sweep of no_spec, (3,1,4), (3,4,8) and (5,4,16) at batch sizes 1 and 4, two repeats, with the full-acceptance
EAGLE3 head: it is SIGKILLed after its first rows (a crash: the server must die with it) and finished with
``--resume``. The rows must be the published layout with what the real server said: accept length 4.0 at (3,1,4),
its step time, version 0.5.23, backend intel_amx, hardware ``cpu:<model>``, energy from RAPL or null with the reason.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from _engine_helpers import processes_mentioning, read_lines

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "tests" / "engines_cpu" / "standin"

CONFIGS = "0:0:0,3:1:4,3:4:8,5:4:16"
CELLS = 2 * 4 * 2  # batch sizes x configs x repeats


def _sweep(python: Path, *args: str) -> list[str]:
    return [str(python), "-m", "harness", "sweep", *args, "--plain"]


def _grid(models: dict[str, Path], out: Path) -> list[str]:
    return [
        "--engine",
        "sglang",
        "--engine-device",
        "cpu",
        "--model-path",
        str(models["target"]),
        "--draft-model-path",
        str(models["draft-full"]),
        "--configs",
        CONFIGS,
        "--batch-sizes",
        "1,4",
        "--repeats",
        "2",
        "--launch-per",
        "config",
        "--num-prompts",
        "4",
        "--output-tokens",
        "32",
        "--settle",
        "0",
        "--launch-timeout",
        "300",
        # a KV pool sized from free RAM is ~10 GB and ~40 s to allocate; the tiny model needs a sliver
        "--engine-arg=--max-total-tokens",
        "--engine-arg=16384",
        "--out",
        str(out),
    ]


def _rows(run: Path) -> list[dict]:
    path = run / "rows.jsonl"
    return read_lines(path) if path.exists() else []


def test_native_sweep_on_real_sglang_cpu_with_a_crash_and_resume(engines_python, tiny_models, tmp_path):
    run = tmp_path / "run"
    # the harness runs in the engines venv from this clone; the servers it starts import the sgl_kernel stand-in
    # (TORCHDYNAMO_DISABLE: sglang's warm-up compile of its speculative helpers, 10-20 s a launch, is skipped)
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{STANDIN}", "COLUMNS": "200", "TORCHDYNAMO_DISABLE": "1"}
    log = open(tmp_path / "sweep1.log", "w")
    proc = subprocess.Popen(
        _sweep(engines_python, *_grid(tiny_models, run)), cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 400
        while len(_rows(run)) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert proc.poll() is None, (tmp_path / "sweep1.log").read_text()[-3000:]
        assert len(_rows(run)) >= 3, "no 3 rows in 400 s"
        server_pid = _rows(run)[-1]["engine"]["identity"]["pid"]
        os.kill(proc.pid, signal.SIGKILL)  # a crash of the harness: its server must not outlive it
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    deadline = time.monotonic() + 60
    while processes_mentioning(str(tiny_models["target"])) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not processes_mentioning(str(tiny_models["target"])), f"server {server_pid} outlived the killed sweep"

    done = subprocess.run(
        _sweep(engines_python, "--resume", str(run)), cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = _rows(run)
    by_cell = {r["cell_id"]: r for r in rows}
    assert len(by_cell) == CELLS, sorted(by_cell)
    for row in by_cell.values():
        assert row["error"] is None, row["error"]
        assert row["hardware"].startswith("cpu:") and "GPU" not in row["hardware"], row["hardware"]
        assert row["sglang_version"] == "0.5.23" and row["engine"]["kind"] == "sglang"
        assert row["attention_backend"] == "intel_amx", row["attention_backend"]
        assert row["extras"]["engine_device"] == "cpu"
        assert row["speed_tok_s"] > 0 and row["total_output_tokens"] > 0
        argv = row["engine"]["identity"]["argv"]
        assert argv[argv.index("--device") + 1] == "cpu"
        if row["energy_joules"] is None:  # no RAPL on this host (a VM): null, and the row says why
            assert "RAPL" in row["extras"]["energy_unavailable"] or "powercap" in row["extras"]["energy_unavailable"]
        else:
            assert row["energy_source"] == "counter" and row["energy_joules"] > 0
    spec = [r for r in by_cell.values() if not r["is_baseline"]]
    full = [r for r in spec if (r["steps"], r["topk"], r["num_draft_tokens"]) == (3, 1, 4)]
    assert full and all(r["accept_length"] == 4.0 for r in full), [r["accept_length"] for r in full]
    # 0.5.23 turns the overlap scheduler off for speculation on CPU (srt/arg_groups/speculative_hook.py,
    # _disable_overlap_schedule_for_cpu); the per-version rule said "overlap": rows record what the server says
    for r in spec:
        assert (r["extras"]["overlap_schedule"], r["extras"]["overlap_schedule_source"]) == (False, "server"), r[
            "extras"
        ]
    assert all(r["accept_length"] > 2.5 for r in spec), [(r["cell_id"], r["accept_length"]) for r in spec]
    assert all(r["step_time_s"] and r["step_time_s"] > 0 for r in by_cell.values() if r["speed_source"] != "wall")
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "complete" and len(m["sessions"]) == 2, m.get("sessions")
    pair = m["preflight"]["models"]  # the tiny target and its EAGLE3 draft pair by their config.json
    assert pair["checked"] is True and pair["draft_target_hidden_size"] == pair["target_hidden_size"], pair
