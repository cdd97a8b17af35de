"""Real twin sweeps through the CLI: the ladder, faults as error rows, kill -9 and resume, launch per config."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from _engine_helpers import FAST, ROOT, harness_cmd, processes_mentioning, read_lines, run_harness

from harness.runs.rows import PUBLISHED_KEYS


def rows_by_cell(run: Path) -> dict[str, dict]:
    return {r["cell_id"]: r for r in read_lines(run / "rows.jsonl")}


def assert_no_leftovers(run: Path) -> None:
    manifest = json.loads((run / "manifest.json").read_text())
    for session in manifest["sessions"]:
        url = (session.get("world") or {}).get("twin_gpu_url")
        if url:
            deadline = time.monotonic() + 10
            while processes_mentioning(url) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert processes_mentioning(url) == [], f"processes of {url} left behind"


def test_sweep_ladder_error_row_and_recovered_row(tmp_path):
    run = tmp_path / "run"
    r = run_harness(
        "sweep", "--engine", "twin", "--configs", "0:0:0,5:4:8,5:4:16", "--batch-sizes", "16", "--out", str(run), *FAST
    )
    assert r.returncode == 0, r.stdout + r.stderr
    rows = rows_by_cell(run)
    assert len(rows) == 3 and len(read_lines(run / "rows.jsonl")) == 3
    big = rows["r0-bs16-s5k4d16"]
    assert big["error"].startswith("launch: ") and "memory" in big["error"] and "0.65, 0.55" in big["error"]
    assert big["speed_tok_s"] is None and big["retry_mem_fraction"] is None
    recovered = rows["r0-bs16-s5k4d8"]
    assert recovered["error"] is None and recovered["retry_mem_fraction"] == 0.55 and recovered["speed_tok_s"] > 0
    for cid, row in rows.items():
        if cid != "r0-bs16-s5k4d16":
            assert row["error"] is None and row["energy_joules"] > 0 and row["window_valid"], row
            assert row["hardware"] == "twin:rtx4060-laptop"
            # bs 16 at time scale 50 with short outputs may see too few full-batch step samples: wall-clock fallback
            assert row["speed_source"] == "step_time" or (
                row["batch_size"] == 16 and row["speed_source"] == "wall_clock"
            )
            assert row["pre_gpu_temp_c"] is not None and row["gpu_temp_c"] is not None
            # one pinned kernel for every config, as the server resolved it; the version auto resolved to
            assert row["attention_backend"] == "flashinfer" and row["sglang_version"] == "0.5.2"
            assert row["engine"]["version"] == "0.5.2" and row["extras"]["server_version"] == "0.5.2"
    assert [r["index"] for r in read_lines(run / "dataset.jsonl")] == list(range(3))
    assert all(list(rec) == list(PUBLISHED_KEYS) for rec in read_lines(run / "dataset.jsonl"))
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["launches"] == 5  # 3 cells + 2 retries
    assert manifest["git"]["commit"] and manifest["world"]["gpu"]["uuid"].startswith("GPU-twin")
    assert manifest["power_limit_w"] == 80.0 and manifest["argv"][:2] == ["harness", "sweep"]
    assert (manifest["sglang_version"], manifest["sglang_version_requested"]) == ("0.5.2", "auto")
    assert manifest["attention_backend"] == "flashinfer" and manifest["options"]["sglang_version"] == "0.5.2"
    assert (run / "logs" / "r0-bs16-s5k4d16.mf0.55.log").exists()
    assert "sweep summary" in r.stdout and "1 recovered" in r.stdout
    v = run_harness("dataset", "validate", str(run), "--subset")
    assert v.returncode == 0, v.stdout + v.stderr
    s = run_harness("status", str(run))
    assert s.returncode == 0 and "3 / 3 done" in s.stdout
    assert_no_leftovers(run)


def test_faults_become_error_rows_and_the_sweep_goes_on(tmp_path):
    run = tmp_path / "run"
    faults = ["oom@1/0:0:0", "http500@1/3:4:8", "crash@2/0:0:0", "runaway@2/3:4:8"]
    args = [a for f in faults for a in ("--twin-fault", f)]
    r = run_harness(
        "sweep",
        "--engine",
        "twin",
        "--configs",
        "0:0:0,1:1:2,3:4:8",
        "--batch-sizes",
        "1,2",
        "--request-timeout",
        "3",
        "--mem-fractions",
        "0.65",
        "--out",
        str(run),
        *args,
        *FAST,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    rows = rows_by_cell(run)
    assert len(rows) == 6
    assert rows["r0-bs1-s0k0d0"]["error"].startswith("launch: ") and "memory" in rows["r0-bs1-s0k0d0"]["error"]
    assert rows["r0-bs1-s3k4d8"]["error"].startswith("http: HTTP 500")
    assert rows["r0-bs2-s0k0d0"]["error"].startswith("crash: engine exited")
    assert (
        rows["r0-bs2-s3k4d8"]["error"].startswith("timeout: ")
        and "--request-timeout 3" in rows["r0-bs2-s3k4d8"]["error"]
    )
    for cid in ("r0-bs1-s1k1d2", "r0-bs2-s1k1d2"):
        assert rows[cid]["error"] is None and rows[cid]["speed_tok_s"] > 0
    assert_no_leftovers(run)


def _sessions(run: Path) -> int:
    """How many sessions the run's manifest records (0: no run folder yet, or a manifest being replaced)."""
    try:
        return len(json.loads((run / "manifest.json").read_text())["sessions"])
    except (OSError, ValueError, KeyError):
        return 0


@pytest.mark.slow
def test_kill9_five_times_then_resume_every_cell_exactly_once(tmp_path):
    run = tmp_path / "run"
    grid = ["--configs", "0:0:0,3:4:8", "--batch-sizes", "1,2", "--repeats", "2"]
    rng = random.Random(20261202)
    first, k, attempts = True, 0, 0
    while k < 5 and attempts < 15:  # five kills of a run whose folder exists (a slow start may be killed before it)
        attempts += 1
        cmd = (
            harness_cmd("sweep", "--engine", "twin", *grid, "--out", str(run), *FAST)
            if first
            else harness_cmd("sweep", "--resume", str(run), "--plain")
        )
        before = _sessions(run)
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "200"}
        )
        try:  # kill at a random moment of the session once it has begun (a loaded host starts slowly)
            deadline = time.monotonic() + 60
            while _sessions(run) <= before and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(rng.uniform(0.2, 2.5))
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        first = False
        if not (run / "manifest.json").exists():
            first = True  # killed before the run folder existed: start it again
            continue
        assert_no_leftovers(run)
        if k == 2 and (run / "rows.jsonl").exists():  # simulate a write torn by the kill
            with open(run / "rows.jsonl", "ab") as f:
                f.write(b'{"hardware":"twin:rtx4060-laptop","index":3,"repe')
        k += 1
    assert k == 5, f"only {k} of 5 kills hit an existing run folder in {attempts} starts"
    r = run_harness("sweep", "--resume", str(run), "--plain", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    native = read_lines(run / "rows.jsonl")
    published = read_lines(run / "dataset.jsonl")
    counts = Counter(row["cell_id"] for row in native)
    assert len(counts) == 8 and set(counts.values()) == {1}, counts
    assert sorted(row["index"] for row in published) == list(range(8))
    assert [p["index"] for p in published] == [n["index"] for n in native]
    assert all(row["error"] is None for row in native), [row["error"] for row in native if row["error"]]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and len(manifest["sessions"]) >= 2
    assert_no_leftovers(run)


@pytest.mark.slow
def test_launch_per_config_uses_fewer_launches_and_falls_back_per_cell(tmp_path):
    run = tmp_path / "run"
    # (3,4,8)'s server for bs 4 runs out of memory (fault hook): that config falls back to a launch per cell
    r = run_harness(
        "sweep",
        "--engine",
        "twin",
        "--configs",
        "0:0:0,3:4:8",
        "--batch-sizes",
        "1,4",
        "--launch-per",
        "config",
        "--twin-fault",
        "oom@4/3:4:8",
        "--out",
        str(run),
        *FAST,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    rows = rows_by_cell(run)
    assert len(rows) == 4
    assert [rows[c]["error"] is None for c in ("r0-bs1-s0k0d0", "r0-bs4-s0k0d0", "r0-bs1-s3k4d8")] == [True] * 3
    assert rows["r0-bs4-s3k4d8"]["error"].startswith("launch: ")
    for cid in ("r0-bs1-s0k0d0", "r0-bs4-s0k0d0"):  # one server for both batch sizes, counters flushed between
        assert rows[cid]["engine"]["identity"]["launch_batch_size"] == 4 and rows[cid]["step_time_s"] > 0
    assert rows["r0-bs1-s3k4d8"]["engine"]["identity"]["launch_batch_size"] == 1
    assert json.loads((run / "manifest.json").read_text())["launches"] == 6  # 1 + (2 failed + 1 + 2 failed)
    assert "launching per cell" in r.stderr


SWALLOWED_SIGTERM = """
import os, signal, sys
from harness.sweep import errors as sweep_errors
from harness.cli import main
forks = []

def after_fork() -> None:  # the 3rd fork (twin GPU, sampler, then the first engine): SIGTERM's handler runs here
    forks.append(1)
    if len(forks) == 3:
        sweep_errors.on_sigterm(signal.SIGTERM, None)  # raised inside an at-fork hook: Python prints it and drops it

os.register_at_fork(after_in_parent=after_fork)
sys.exit(main(sys.argv[1:]))
"""


def test_a_sigterm_whose_raise_a_spawn_swallowed_still_stops_the_run(tmp_path):
    """A SIGTERM that lands while a server is spawned runs its handler inside an at-fork hook, which drops the
    exception ("Exception ignored"): the sweep used to run on to exit 0, "complete". It stops at the next cell
    boundary now, keeps its rows and says how to resume."""
    run = tmp_path / "run"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            SWALLOWED_SIGTERM,
            "sweep",
            "--engine",
            "twin",
            "--configs",
            "0:0:0,3:4:8",
            "--batch-sizes",
            "1,2",
            "--out",
            str(run),
            *FAST,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Exception ignored" in done.stderr and "Interrupted" in done.stderr  # the raise really was swallowed
    assert done.returncode == 130 and "interrupted" in done.stderr and "--resume" in done.stderr, done.stderr
    assert json.loads((run / "manifest.json").read_text())["status"] == "interrupted"
    assert 1 <= len(read_lines(run / "rows.jsonl")) < 4
    assert_no_leftovers(run)


def test_sigterm_stops_cleanly_and_marks_the_run_interrupted(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        harness_cmd(
            "sweep", "--engine", "twin", "--configs", "0:0:0,3:4:8", "--batch-sizes", "1,2", "--out", str(run), *FAST
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (run / "rows.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "interrupted" in err and "--resume" in err, err
    assert json.loads((run / "manifest.json").read_text())["status"] == "interrupted"
    read_lines(run / "rows.jsonl")
    assert_no_leftovers(run)
