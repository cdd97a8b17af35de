"""``harness serve`` with one engine at a time on the twin (a twin GPU with the laptop's memory, where one instance
at 0.65 fits and two do not), real processes on loopback: a load step relaunches once and the requests wait at the
front meanwhile; a killed instance and a config that cannot launch both end on no_spec; ``auto`` falls back to one at
a time when the instances do not fit together."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
from _loadgen import ClosedLoop, Recorder
from _serve_helpers import PROMPTS, B, kill_under_load, log_lines, serve_session, wait_for

from harness.grid import BASELINE, SpecConfig
from harness.serve.session import ServeSession

WAIT_S = 15.0  # a relaunch (stop, then a twin launch) sits inside the waits


def session(tmp_path: Path, table: dict[int, SpecConfig], instances: str = "one") -> ServeSession:
    """One instance at 0.65 fits the twin GPU with the laptop's memory, two do not; relaunches may follow 5 s apart."""
    return serve_session(tmp_path, table, instances=instances, twin_memory_x=1, relaunch_hold_s=5.0)


def switches_and_relaunches(s: ServeSession) -> tuple[list[dict], list[dict]]:
    """(switches, relaunch events) of the session's switch log."""
    lines = log_lines(s)
    return [r for r in lines if "reason" in r], [r for r in lines if r.get("event") == "relaunch"]


class EngineCount(threading.Thread):
    """Polls the twin GPU's engine count: the most engines that held memory at once."""

    def __init__(self, gpu_url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.most, self.stop = gpu_url, 0, threading.Event()
        self.memory_total_mb = httpx.get(gpu_url + "/v1/state", timeout=5).json()["memory_total_mb"]

    def run(self) -> None:
        while not self.stop.wait(0.02):
            self.most = max(self.most, httpx.get(self.url + "/v1/state", timeout=5).json()["engines"])


def test_a_load_step_relaunches_once_and_requests_wait_at_the_front(tmp_path: Path) -> None:
    with session(tmp_path, {1: BASELINE, 16: B}) as s:
        assert s.world.twin_gpu_url
        engines = EngineCount(s.world.twin_gpu_url)
        engines.start()
        rec = Recorder()
        one = ClosedLoop(s.url, 1, 48, PROMPTS, rec).start()
        time.sleep(0.5)
        many = ClosedLoop(s.url, 19, 48, PROMPTS, rec).start()
        wait_for(lambda: s.pool.get(B).served >= 20, WAIT_S)
        many.stop()
        one.stop()
        engines.stop.set()
        engines.join()
        switches, relaunches = switches_and_relaunches(s)
        state = s.loop.describe()
    assert [(r["reason"], r["new"]) for r in switches] == [("start", [0, 0, 0]), ("load_change", [3, 2, 4])]
    assert [(r["old"], r["new"], r["ok"]) for r in relaunches] == [
        (None, [0, 0, 0], True),
        ([0, 0, 0], [3, 2, 4], True),
    ]
    step = relaunches[1]
    assert step["downtime_s"] >= step["launch_s"] > 0 and step["drain_s"] >= 0 and step["stop_s"] >= 0
    done = rec.snapshot()
    assert done and all(d.ok for d in done), [d.error for d in done if not d.ok][:3]
    assert all(d.tokens == 48 for d in done)
    # requests that arrived while no engine ran waited at the front and were served after the relaunch
    down_end = step["t_mono_ns"] / 1e9
    assert any(d.start_s < down_end - step["downtime_s"] and d.end_s > down_end for d in done)
    assert engines.most == 1  # never two engines on the device: the old one is stopped before the new one launches
    assert state["one_at_a_time"] is True and state["relaunches"] == 2
    assert [i["state"] for i in state["instances"]] == ["idle", "ready"]


def test_a_killed_instance_and_a_config_that_cannot_launch_end_on_no_spec(tmp_path: Path) -> None:
    big = SpecConfig(5, 4, 16)  # at --max-running-requests 16 its CUDA graphs do not fit the laptop at 0.65
    with session(tmp_path, {1: big}) as s:
        _, relaunches = switches_and_relaunches(s)
        assert [(r["new"], r["ok"]) for r in relaunches] == [([5, 4, 16], False), ([0, 0, 0], True)]
        assert "out of memory" in relaunches[0]["error"].lower()
        assert s.loop.describe()["active"] == [0, 0, 0] and not s.pool.get(big).alive()
    with session(tmp_path / "kill", {1: B}) as s:
        done, killed_at = kill_under_load(s, B, WAIT_S)
        switches, relaunches = switches_and_relaunches(s)
    assert [(r["reason"], r["new"]) for r in switches] == [("start", [3, 2, 4]), ("instance_lost", [0, 0, 0])]
    assert [(r["old"], r["new"], r["ok"]) for r in relaunches][-1] == ([3, 2, 4], [0, 0, 0], True)
    # the requests in flight at the kill are sent again once no_spec runs: no client errors
    assert [d.error for d in done if not d.ok] == [] and any(d.start_s < killed_at < d.end_s for d in done)


def test_auto_serves_one_at_a_time_when_the_instances_do_not_fit_together(tmp_path: Path) -> None:
    with session(tmp_path, {1: B}, instances="auto") as s:
        lines = log_lines(s)
        r = httpx.post(
            s.url + "/v1/chat/completions",
            timeout=30,
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
        )
        state = s.loop.describe()
    assert s.relaunch_why and "ran out of GPU memory" in s.relaunch_why
    assert [x["why"] for x in lines if x.get("event") == "one_at_a_time"] == [s.relaunch_why]
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 8
    assert state["one_at_a_time"] is True and state["active"] == [3, 2, 4]
