"""Runs a user can trust, on real processes: one writer per run folder, lost world services (sampler, twin GPU, GPU
reads) stop or heal the run instead of filling it with false rows, and a killed server's memory is released before
the next launch. Every kill is by PID; every run is checked for lost or duplicated rows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Callable

import httpx
import pytest
from _engine_helpers import FAST, ROOT, harness_cmd, processes_mentioning, read_lines, run_harness
from _twin_helpers import twin_gpu
from test_sweep_twin import assert_no_leftovers

INFRA_REASONS = {"sampler_unreachable", "sampler_restart", "probe_errors", "no_energy"}
"""Window reasons a lost service leaves; a slow probe on this loaded machine may still flag a window (not our fault)."""
GRID = ["--configs", "0:0:0,1:1:2,3:4:8", "--batch-sizes", "1"]
CELLS = 3


def start_sweep(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        harness_cmd("sweep", *args),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )


def wait_for(what: str, cond: Callable[[], bool], proc: subprocess.Popen | None = None, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(
                f"the sweep exited ({proc.returncode}) before {what}: {proc.stderr.read() if proc.stderr else ''}"
            )
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def row_count(run: Path) -> int:
    p = run / "rows.jsonl"
    return p.read_bytes().count(b"\n") if p.exists() else 0


def manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def assert_each_cell_once(run: Path, cells: int) -> list[dict]:
    """rows.jsonl and dataset.jsonl hold exactly one line per planned cell, line for line."""
    native, published = read_lines(run / "rows.jsonl"), read_lines(run / "dataset.jsonl")
    counts = Counter(r["cell_id"] for r in native)
    assert len(counts) == cells and set(counts.values()) == {1}, counts
    assert [p["index"] for p in published] == [n["index"] for n in native]
    return native


def finish(proc: subprocess.Popen, timeout: float = 180.0) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


def twin_url_of(run: Path) -> str:
    wait_for(
        "the world's identity in the manifest", lambda: (run / "manifest.json").exists() and "world" in manifest(run)
    )
    return manifest(run)["world"]["twin_gpu_url"]


@pytest.mark.slow
def test_one_writer_per_run_folder_and_status_of_a_killed_run(tmp_path):
    run = tmp_path / "run"
    proc = start_sweep("--engine", "twin", *GRID, "--out", str(run), *FAST)
    try:
        wait_for("the first row", lambda: row_count(run) >= 1, proc)
        os.kill(proc.pid, signal.SIGSTOP)  # hold the writer still (lock held) while the second writers try
        s = run_harness("status", str(run))
        assert s.returncode == 75 and f"running: pid {proc.pid}" in s.stdout, s.stdout + s.stderr
        before = (run / "rows.jsonl").read_bytes()
        for second in (["--resume", str(run)], ["--engine", "twin", *GRID, "--out", str(run), "--force", *FAST]):
            r = run_harness("sweep", *second, "--plain")
            assert r.returncode == 8 and f"pid {proc.pid}" in r.stderr and "being written" in r.stderr, r.stderr
        assert (run / "rows.jsonl").read_bytes().startswith(before)  # the second writer touched nothing
        assert manifest(run)["writer"]["pid"] == proc.pid
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    s = run_harness("status", str(run))
    assert s.returncode == 1 and f"stopped (pid {proc.pid} gone)" in s.stdout, s.stdout + s.stderr
    r = run_harness("sweep", "--resume", str(run), "--plain", timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = assert_each_cell_once(run, CELLS)
    assert all(row["error"] is None for row in rows)
    s = run_harness("status", str(run))
    assert s.returncode == 0 and "(complete)" in s.stdout and "3 / 3 done" in s.stdout, s.stdout
    assert_no_leftovers(run)


def test_killed_sampler_is_restarted_and_no_cell_goes_without_energy(tmp_path):
    run = tmp_path / "run"
    proc = start_sweep("--engine", "twin", *GRID, "--out", str(run), *FAST)
    try:
        url = twin_url_of(run)
        wait_for("the first row", lambda: row_count(run) >= 1, proc)
        samplers = processes_mentioning(f"--twin-url {url}")
        assert len(samplers) == 1, samplers
        os.kill(samplers[0], signal.SIGKILL)
        code, out, err = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, out + err
    assert "restarting the sampler" in err
    rows = assert_each_cell_once(run, CELLS)
    for row in rows:
        assert row["error"] is None and row["energy_joules"] > 0 and not INFRA_REASONS & set(row["window_reasons"]), row
    m = manifest(run)
    assert m["status"] == "complete" and m["sessions"][-1]["sampler_restarts"] == 1
    assert m["infrastructure_events"][0]["kind"] == "sampler"
    s = run_harness("status", str(run))
    assert s.returncode == 0 and "(complete)" in s.stdout and "lost services" in s.stdout, s.stdout
    assert_no_leftovers(run)


def test_killed_twin_gpu_stops_the_run_and_resume_finishes_it(tmp_path):
    run = tmp_path / "run"
    with twin_gpu(time_scale=50, log_dir=str(tmp_path)) as gpu:
        proc = start_sweep("--engine", "twin", *GRID, "--twin-gpu", gpu.url, "--out", str(run), *FAST)
        wait_for("the first row", lambda: row_count(run) >= 1, proc)
        gpu.proc.kill()  # SIGKILL by PID
        code, out, err = finish(proc)
    assert code == 4, out + err
    assert "the twin GPU at" in err and "does not answer" in err and "--resume" in err, err
    rows = read_lines(run / "rows.jsonl")
    assert 1 <= len(rows) < CELLS and all(r["error"] is None for r in rows), rows  # no false error rows
    m = manifest(run)
    assert m["status"] == "failed" and m["failure_kind"] == "infrastructure"
    s = run_harness("status", str(run))
    assert s.returncode == 1 and "failed (infrastructure)" in s.stdout, s.stdout
    r = run_harness("sweep", "--resume", str(run), "--plain", timeout=180)  # a fresh twin GPU started by the harness
    assert r.returncode == 0, r.stdout + r.stderr
    rows = assert_each_cell_once(run, CELLS)
    assert all(row["error"] is None and row["energy_joules"] > 0 for row in rows)
    assert manifest(run)["status"] == "complete" and run_harness("status", str(run)).returncode == 0
    assert_no_leftovers(run)


def test_killed_sampler_given_by_url_stops_the_run_and_resume_with_a_new_one_finishes_it(tmp_path):
    from _sampler_testbed import start_sampler

    run = tmp_path / "run"
    with twin_gpu(time_scale=50, log_dir=str(tmp_path)) as gpu:
        with start_sampler(gpu.url, None, tmp_path, rate_hz=50.0) as sampler:
            proc = start_sweep(
                "--engine", "twin", *GRID, "--twin-gpu", gpu.url, "--sampler-url", sampler.url, "--out", str(run), *FAST
            )
            wait_for("the first row", lambda: row_count(run) >= 1, proc)
            sampler.kill9()
            code, out, err = finish(proc)
        assert code == 4 and f"the sampler at {sampler.url} does not answer" in err and "--resume" in err, out + err
        assert all(r["error"] is None and r["energy_joules"] > 0 for r in read_lines(run / "rows.jsonl"))
        s = run_harness("status", str(run))
        assert s.returncode == 1 and "failed (infrastructure)" in s.stdout, s.stdout
        with start_sampler(gpu.url, None, tmp_path / "again", rate_hz=50.0) as again:
            r = run_harness(
                "sweep", "--resume", str(run), "--twin-gpu", gpu.url, "--sampler-url", again.url, "--plain", timeout=180
            )
    assert r.returncode == 0, r.stdout + r.stderr
    rows = assert_each_cell_once(run, CELLS)
    assert all(row["error"] is None and not INFRA_REASONS & set(row["window_reasons"]) for row in rows)


def test_gpu_reads_failing_mid_run_never_make_a_complete_run(tmp_path):
    run = tmp_path / "run"
    with twin_gpu(time_scale=50, log_dir=str(tmp_path)) as gpu:
        proc = start_sweep("--engine", "twin", *GRID, "--twin-gpu", gpu.url, "--out", str(run), *FAST)
        wait_for("the first row", lambda: row_count(run) >= 1, proc)
        gpu.post("/v1/faults", json={"probe_error": "NVML_ERROR_GPU_IS_LOST (test)"}).raise_for_status()
        code, out, err = finish(proc)
        assert code == 4 and "GPU reads fail" in err and "NVML_ERROR_GPU_IS_LOST" in err, out + err
        assert manifest(run)["status"] == "failed"
        for row in read_lines(run / "rows.jsonl"):  # no row measured while the reads failed
            assert row["error"] is None and not INFRA_REASONS & set(row["window_reasons"]), row
        gpu.post("/v1/faults", json={}).raise_for_status()  # the GPU is back
        r = run_harness("sweep", "--resume", str(run), "--twin-gpu", gpu.url, "--plain", timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = assert_each_cell_once(run, CELLS)
    assert all(row["error"] is None and row["energy_joules"] > 0 for row in rows)
    assert_no_leftovers(run)


def test_killed_engine_releases_its_memory_then_retry_errors_remeasures_it(tmp_path):
    """Two bs-16 servers of (3,4,8) do not fit together: a lease left by a killed server would turn the next cell
    into a false out-of-memory row (or a false retry at a lower mem fraction)."""
    run = tmp_path / "run"
    with twin_gpu(time_scale=50, log_dir=str(tmp_path)) as gpu:
        idle_mb = gpu.get("/v1/state").json()["memory_used_mb"]
        proc = start_sweep(
            "--engine",
            "twin",
            "--configs",
            "3:4:8",
            "--batch-sizes",
            "16",
            "--repeats",
            "3",
            "--mem-fractions",
            "0.65,0.55",
            "--twin-gpu",
            gpu.url,
            "--out",
            str(run),
            *FAST,
            "--output-tokens",
            "512",
        )
        log = run / "logs" / "r0-bs16-s3k4d8.mf0.65.log"
        wait_for("the first server", lambda: log.exists() and "fired up" in log.read_text(errors="replace"), proc)
        engines = [
            p
            for p in processes_mentioning(f"--twin-gpu {gpu.url}")
            if b"twin\0engine" in Path(f"/proc/{p}/cmdline").read_bytes()
        ]
        assert len(engines) == 1, engines
        time.sleep(0.2)
        os.kill(engines[0], signal.SIGKILL)
        code, out, err = finish(proc)
        assert code == 0, out + err
        rows = {r["cell_id"]: r for r in assert_each_cell_once(run, 3)}
        assert rows["r0-bs16-s3k4d8"]["error"].startswith("crash: ")
        for cid in ("r1-bs16-s3k4d8", "r2-bs16-s3k4d8"):
            assert rows[cid]["error"] is None and rows[cid]["retry_mem_fraction"] is None, rows[cid]
            assert rows[cid]["mem_fraction"] == 0.65
        assert httpx.get(gpu.url + "/v1/state").json()["memory_used_mb"] == idle_mb  # nothing leaked
        r = run_harness("sweep", "--resume", str(run), "--twin-gpu", gpu.url, "--plain")
        assert r.returncode == 0 and row_count(run) == 3, r.stdout + r.stderr  # plain --resume keeps error rows
        r = run_harness("sweep", "--resume", str(run), "--retry-errors", "--twin-gpu", gpu.url, "--plain", timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    native = read_lines(run / "rows.jsonl")
    assert [n["cell_id"] for n in native] == ["r0-bs16-s3k4d8", "r1-bs16-s3k4d8", "r2-bs16-s3k4d8", "r0-bs16-s3k4d8"]
    assert native[-1]["error"] is None and native[-1]["speed_tok_s"] > 0  # the replacement (latest row wins)
    assert len(read_lines(run / "dataset.jsonl")) == 4
    assert manifest(run)["sessions"][-1]["retry_errors"] is True
    assert_no_leftovers(run)


def test_twin_device_releases_every_lease_of_a_dead_process(tmp_path):
    with twin_gpu(time_scale=50, log_dir=str(tmp_path)) as gpu:
        idle = gpu.get("/v1/state").json()["memory_used_mb"]
        for eid, pid in (("a", 4242), ("b", 4242), ("c", 4343)):
            gpu.post(
                "/v1/engines", json={"engine_id": eid, "memory_mb": 1000, "lease_s": 60, "pid": pid}
            ).raise_for_status()
        r = httpx.delete(gpu.url + "/v1/engines", params={"pid": 4242}, timeout=10)
        assert r.status_code == 200 and sorted(r.json()["released"]) == ["a", "b"]
        assert gpu.get("/v1/state").json()["memory_used_mb"] == idle + 1000  # only pid 4343's lease is left
        assert httpx.delete(gpu.url + "/v1/engines", timeout=10).status_code == 400  # names the missing ?pid=N


def test_world_check_on_an_in_process_sampler_tells_failing_reads_from_a_stopped_loop(tmp_path):
    """The real-GPU shape of the world (engine sglang, in-process sampler), its probe reading a twin device instead of
    NVML: GPU reads that start failing are a ``probe`` problem, a dead sampling loop a restartable ``sampler`` one."""
    from harness.core.clocks import ScaledClock
    from harness.engine.launch import EngineLauncher
    from harness.engine.spec import EngineSpec
    from harness.telemetry.probes import TwinProbe
    from harness.telemetry.sampler import InProcessSampler
    from harness.world.world import World

    with twin_gpu(time_scale=50, log_dir=str(tmp_path)) as gpu:
        sampler = InProcessSampler(TwinProbe(gpu.url), rate_hz=20.0)
        world = World(
            engine="sglang",
            telemetry=sampler,
            launcher=EngineLauncher(EngineSpec(kind="sglang"), tmp_path),
            clock=ScaledClock.starting_now(1.0),
            hardware="test",
            power_limit_w=None,
            twin_gpu_url=None,
            sampler_url=None,
            gpu_identity={},
            children=[],
            run_dir=tmp_path,
        )
        try:
            wait_for("a first sample", lambda: sampler.snapshot() is not None)
            assert world.check() is None
            gpu.post("/v1/faults", json={"probe_error": "NVML_ERROR_UNKNOWN (test)"}).raise_for_status()
            wait_for(
                "a sample taken after the fault", lambda: bool(getattr(sampler.snapshot(), "errors", None)), timeout=10
            )
            problem = world.check()
            assert problem is not None and problem.kind == "probe" and "NVML_ERROR_UNKNOWN" in problem.message
            gpu.post("/v1/faults", json={}).raise_for_status()
            wait_for("reads to recover", lambda: world.check() is None, timeout=10)
            sampler.core.stop()
            problem = world.check()
            assert problem is not None and problem.kind == "sampler" and problem.restartable
        finally:
            world.close()
