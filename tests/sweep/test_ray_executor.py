"""``harness sweep --executor ray`` on a real local Ray cluster (``ray start --head`` on this machine, 4 logical GPUs,
one cluster for the module): four twin GPU devices, one lost mid-run and one worker killed (its node's stand-in),
the driver SIGKILLed and resumed; every cell exactly once, never two cells on one GPU at a time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests._engine_helpers import FAST, HOST_LOAD, ROOT, harness_cmd, read_lines, run_harness
from tests._telemetry_helpers import free_port

GRID = ["--configs", "0:0:0,3:4:8", "--batch-sizes", "1,4,8,16", "--num-prompts", "16", *FAST]
"""8 cells, about 2 s each on the twin at scale 50."""
"""Window validity codes a CPU-starved sampler produces (``harness.telemetry.windows``)."""
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "HARBOR_TELEMETRY": "0"}
"""A loopback test cluster without token auth (the drivers below join it with the same setting)."""


@pytest.fixture(scope="module")
def ray_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One ``ray start --head --block`` for the module: 4 GPUs, 2 CPUs, no dashboard, a small object store; killed
    with its own process group (only the processes it started; never ``ray stop``, which stops every user's)."""
    port = free_port()
    log = tmp_path_factory.mktemp("ray") / "ray-start.log"
    ray_bin = Path(os.environ.get("VIRTUAL_ENV", "")) / "bin" / "ray"
    ray_cmd = str(ray_bin) if ray_bin.exists() else str(Path(harness_cmd()[0]).parent / "ray")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                ray_cmd,
                "start",
                "--head",
                "--block",
                "--port",
                str(port),
                "--node-ip-address",
                "127.0.0.1",
                "--num-gpus",
                "4",
                "--num-cpus",
                "2",
                "--include-dashboard",
                "false",
                "--object-store-memory",
                "100000000",
                "--disable-usage-stats",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **RAY_ENV},
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 90
        while b"Ray runtime started" not in log.read_bytes():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:  # `ray start --block` ignores SIGTERM for a long while; its group holds only the cluster's processes
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)


def _sweep(out: Path, address: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        harness_cmd(
            "sweep",
            "--engine",
            "twin",
            "--executor",
            "ray",
            "--ray-address",
            address,
            "--twin-gpus",
            "4",
            *GRID,
            "--out",
            str(out),
            *extra,
        ),
        cwd=ROOT,
        env={**os.environ, **RAY_ENV, "COLUMNS": "200"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_rows(out: Path, n: int, proc: subprocess.Popen, timeout_s: float = 180) -> dict[str, Any]:
    """Wait until ``n`` rows are written; the manifest then (slots and their service pids)."""
    deadline = time.monotonic() + timeout_s
    while not (out / "rows.jsonl").exists() or len(read_lines(out / "rows.jsonl")) < n:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        assert time.monotonic() < deadline, "no rows in time"
        time.sleep(0.2)
    return json.loads((out / "manifest.json").read_text())


def _assert_each_cell_once_and_no_overlap(out: Path) -> list[dict[str, Any]]:
    rows = read_lines(out / "rows.jsonl")
    ids = [r["cell_id"] for r in rows]
    assert len(ids) == 8 and len(set(ids)) == 8, ids  # every cell, exactly once (no line written twice)
    # no error rows; a window may only be flagged for a sampler the host starved (4 twin GPUs, 4 samplers at 50 Hz on
    # 2 cores shared with other suites): never for a lost GPU (probe errors, unreachable sampler, counter reset, ...)
    assert all(r["error"] is None and (r["window_valid"] or set(r["window_reasons"]) <= HOST_LOAD) for r in rows), [
        (r["error"], r["window_reasons"]) for r in rows
    ]
    by_gpu: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in rows:
        assert r["gpu_uuid"] and r["extras"]["executor"]["gpu_uuid"] == r["gpu_uuid"]
        by_gpu[r["gpu_uuid"]].append((r["window_start_ns"], r["window_end_ns"]))
    for spans in by_gpu.values():
        spans.sort()
        assert all(b[0] >= a[1] for a, b in zip(spans, spans[1:])), spans  # never two cells on one GPU at once
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert {cid: p["gpu_uuid"] for cid, p in manifest["cell_gpus"].items()} == {
        r["cell_id"]: r["gpu_uuid"] for r in rows
    }
    assert all(p["node_id"] for p in manifest["cell_gpus"].values())
    assert manifest["idle_power_w"] > 0  # the board before any server, from the first GPU slot (twin calibrate --from)
    assert run_harness("dataset", "validate", str(out)).returncode == 0
    return rows


@pytest.mark.slow
def test_a_lost_gpu_and_a_dead_worker_requeue_their_cells(ray_address: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _sweep(out, ray_address)
    try:
        manifest = _wait_rows(out, 1, proc)
        slots = manifest["executor"]["slots"]
        assert len(slots) == 4 and len({s["gpu_uuid"] for s in slots}) == 4  # four devices, four UUIDs
        assert sorted(s["gpu_id"] for s in slots) == [0, 1, 2, 3]  # Ray's assignment, one GPU each
        device, worker = slots[1], slots[2]
        os.kill(device["services"]["twin-gpu"], signal.SIGKILL)  # a GPU lost
        os.kill(worker["worker_pid"], signal.SIGKILL)  # a worker (a node's stand-in) dies
        killed_at = time.time_ns()
        assert proc.wait(timeout=240) == 0, proc.stdout.read() if proc.stdout else ""
    finally:
        proc.kill()
    rows = _assert_each_cell_once_and_no_overlap(out)
    manifest = json.loads((out / "manifest.json").read_text())
    events = manifest["executor"]["events"]
    assert {e["gpu_uuid"] for e in events} == {device["gpu_uuid"], worker["gpu_uuid"]}
    assert any(e["kind"] == "worker" for e in events) and any(
        e["kind"] in ("device", "sampler", "probe") for e in events
    )
    for e in events:  # the cut cell ran again, on another GPU, and only after the failure
        row = next(r for r in rows if r["cell_id"] == e["cell_id"])
        assert (
            row["gpu_uuid"] not in (device["gpu_uuid"], worker["gpu_uuid"]) and row["window_start_ns"] > killed_at - 5e9
        )
    assert not any(
        r["gpu_uuid"] in (device["gpu_uuid"], worker["gpu_uuid"]) and r["window_start_ns"] > killed_at for r in rows
    )


@pytest.mark.slow
def test_a_sigkilled_driver_resumes_with_every_cell_once(ray_address: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _sweep(out, ray_address)
    try:
        _wait_rows(out, 2, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    before = read_lines(out / "rows.jsonl")
    assert 2 <= len(before) < 8
    resumed = run_harness("sweep", "--resume", str(out), "--ray-address", ray_address, "--plain", timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    rows = _assert_each_cell_once_and_no_overlap(out)
    assert rows[: len(before)] == before  # the rows of the killed driver are kept as written
    manifest = json.loads((out / "manifest.json").read_text())
    assert [s["resumed"] for s in manifest["sessions"]] == [False, True]


@pytest.mark.parametrize(
    "args, problem",
    [
        (["--twin-gpus", "2"], "--twin-gpus only applies to --executor ray"),
        (["--executor", "ray", "--twin-gpu", "http://127.0.0.1:1"], "takes no --sampler-url / --twin-gpu"),
        (["--executor", "ray", "--power-caps", "60"], "--power-caps is not supported with --executor ray"),
        (["--executor", "dask"], "unknown --executor"),
    ],
)
def test_bad_executor_options_are_refused_before_a_folder_exists(tmp_path: Path, args: list[str], problem: str) -> None:
    res = run_harness("sweep", "--engine", "twin", *GRID, "--out", str(tmp_path / "run"), *args)
    assert res.returncode == 2 and problem in res.stdout + res.stderr, res.stdout + res.stderr
    assert not (tmp_path / "run").exists()


def test_without_ray_the_executor_names_the_extra(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['ray'] = None; from harness.cli import main; "
        f"sys.argv = ['harness', 'sweep', '--executor', 'ray', '--out', {str(tmp_path / 'run')!r}, "
        + ", ".join(repr(a) for a in GRID)
        + "]; sys.exit(main())"
    )
    res = subprocess.run([harness_cmd()[0], "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 7, res.stdout + res.stderr
    assert "pip install 'eagle-energy-harness[ray]'" in res.stdout + res.stderr
