"""``harness serve`` on the twin, real processes on loopback (twin GPU, sampler, one twin engine per config, the
front): a load step switches once (the requests beyond an instance's 16 wait at the front), a lost sampler falls back
to no_spec, a lost instance's traffic goes elsewhere."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from _loadgen import ClosedLoop, Recorder
from _serve_helpers import PROMPTS, B, kill_under_load, log_lines, serve_session, wait_for

from harness.grid import BASELINE
from harness.serve.session import ServeSession


@pytest.fixture
def step_session(tmp_path: Path) -> Iterator[ServeSession]:
    with serve_session(tmp_path, {1: BASELINE, 16: B}) as s:
        yield s


def test_load_step_switches_to_the_bs16_pick_once(step_session: ServeSession) -> None:
    s, rec = step_session, Recorder()
    one = ClosedLoop(s.url, 1, 48, PROMPTS, rec).start()
    time.sleep(0.6)
    assert [r["reason"] for r in log_lines(s)] == ["start"] and s.loop.describe()["active"] == [0, 0, 0]
    many = ClosedLoop(s.url, 19, 48, PROMPTS, rec).start()  # 20 sessions: 16 run, the rest wait at the front
    wait_for(lambda: s.loop.describe()["active"] == B.as_list())
    served_before = s.pool.get(B).served
    most, waiting = 0, 0
    for _ in range(50):  # twenty twin seconds at 16+: no flapping back, never more than 16 on one instance
        most = max([most] + [i.in_flight for i in s.pool.instances.values()])
        waiting = max(waiting, s.loop.in_flight - sum(i.in_flight for i in s.pool.instances.values()))
        time.sleep(0.02)
    many.stop()
    one.stop()
    log = log_lines(s)
    assert [(r["reason"], r["new"]) for r in log] == [("start", [0, 0, 0]), ("load_change", [3, 2, 4])]
    assert log[1]["table_bs"] == 16 and log[1]["bs_ema"] > 4 and log[1]["utilization"] is not None
    assert s.pool.get(B).served > served_before  # the traffic after the switch went to the (3,2,4) instance
    assert most == 16 and waiting > 0  # the front holds what the instance cannot run (max running requests 16)
    done = rec.snapshot()
    assert done and all(d.ok for d in done) and sum(d.tokens for d in done) == 48 * len(done), [
        (d.status, d.error, d.tokens) for d in done if not d.ok or d.tokens != 48
    ]
    models = httpx.get(s.url + "/v1/models").json()
    assert models["data"][0]["id"].startswith("twin:")  # the front is transparent: the engine's own answer


def test_lost_sampler_falls_back_to_no_spec(tmp_path: Path) -> None:
    with serve_session(tmp_path, {1: B}) as s:
        assert s.loop.describe()["active"] == B.as_list()
        sampler = s.world.child_pids["sampler"]
        os.kill(sampler, signal.SIGKILL)  # the sampler this session's world started
        wait_for(lambda: s.loop.describe()["active"] == [0, 0, 0])
        log = log_lines(s)
        assert [(r["reason"], r["new"]) for r in log] == [("start", [3, 2, 4]), ("telemetry_lost", [0, 0, 0])]
        assert log[1]["utilization"] is None and log[1]["telemetry_problem"]
        r = httpx.post(
            s.url + "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
            timeout=30,
        )
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 8
        with httpx.stream(
            "POST", s.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 5, "stream": True}, timeout=30
        ) as r:
            events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]" and "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
        assert len(events) == 6 and json.loads(events[-2])["choices"][0]["finish_reason"] == "length"
        assert s.pool.get(BASELINE).served == 2 and s.pool.get(B).served == 0


def test_lost_instance_routes_elsewhere_without_client_errors(tmp_path: Path) -> None:
    with serve_session(tmp_path, {1: B}) as s:
        done, killed_at = kill_under_load(s, B)
        # the requests in flight at the kill are sent again to no_spec (completions have no side effects): no errors
        assert [d.error for d in done if not d.ok] == []
        assert any(d.start_s < killed_at < d.end_s for d in done)
        log = log_lines(s)
        assert [(r["reason"], r["new"]) for r in log] == [("start", [3, 2, 4]), ("instance_lost", [0, 0, 0])]
        assert log[1]["lost"]
        state = s.loop.describe()
        assert [i["alive"] for i in state["instances"]] == [True, False]


def test_the_serve_command_closes_the_loop_on_a_sweeps_rows_and_stops_on_sigterm(tmp_path: Path) -> None:
    """``harness serve --umodel RUN`` as a user starts it: the command prints its URL, answers an OpenAI chat request,
    reports the closed loop in /serve/state, records the model it assumed, exits 0 on SIGTERM; a missing --umodel
    path is a clear error before anything starts."""
    import subprocess

    from _engine_helpers import ROOT, harness_cmd, run_harness

    grid = Path(__file__).parents[1] / "fixtures" / "twin_grid_3rep.jsonl"
    bad = run_harness("serve", "--picks", "1=0:0:0", "--umodel", str(tmp_path / "nope"), "--out", str(tmp_path / "x"))
    assert bad.returncode != 0 and "nope" in bad.stderr and "fix:" in bad.stderr, bad.stderr
    out = tmp_path / "serve"
    proc = subprocess.Popen(
        harness_cmd(
            "serve",
            "--picks",
            "1=0:0:0,16=3:2:4",
            "--umodel",
            str(grid),
            "--port",
            "0",
            "--time-scale",
            "20",
            "--out",
            str(out),
            "--engine-arg=--twin-launch-scale",
            "--engine-arg=0.1",
            "--clock-control",
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the command's ready line, printed once every instance answers
        assert line.startswith("serving on http://127.0.0.1:"), line + (
            proc.stderr.read() if proc.poll() is not None else ""
        )
        url = line.split()[2]
        state = httpx.get(f"{url}/serve/state", timeout=10).json()
        assert state["clock_control"] is True and state["clock_refused"] is None  # opted in, the twin allows it
        assert state["closed_loop"] is True and {tuple(i["config"]) for i in state["instances"]} == {
            (0, 0, 0),
            (3, 2, 4),
        }
        r = httpx.post(
            f"{url}/v1/chat/completions",
            timeout=30,
            json={"model": "default", "max_tokens": 16, "messages": [{"role": "user", "content": PROMPTS[0]}]},
        )
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"], r.text
        assert json.loads((out / "umodel.json").read_text())["16"]["3:2:4"]["u"] > 0
        options = yaml.safe_load((out / "options.yaml").read_text())  # this session's --config file
        assert options["clock_control"] is True
        assert options["umodel"] == str(grid) and options["engine_args"] == ["--twin-launch-scale", "0.1"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        err = proc.stderr.read() if proc.stderr else ""
        assert "starting 2 twin engine instance(s)" in err and "served 1 request(s)" in err, err  # says what it does
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert switches_in(out)[0]["reason"] == "start"


def switches_in(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "switches.jsonl").read_text().splitlines()]
