"""What the ``harness serve`` twin tests share: the session they open, its switch log, and a kill under load."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _loadgen import ClosedLoop, Done, Recorder

from harness.grid import BASELINE, SpecConfig
from harness.serve.controller import ControllerParams
from harness.serve.session import ServeSession, SessionOptions, open_session

B = SpecConfig(3, 2, 4)
PROMPTS = ["Explain how a GPU power cap changes clock speed.", "Write a haiku about energy."]


def serve_session(tmp_path: Path, table: dict[int, SpecConfig], **options: Any) -> ServeSession:
    """A twin serve session at 20x (or ``time_scale``) with a quick controller and quick twin launches; ``options`` go
    to SessionOptions (``engine_args`` are added to the quick launch's)."""
    options["engine_args"] = ("--twin-launch-scale", "0.1", *options.get("engine_args", ()))
    return open_session(
        SessionOptions(
            picks=table,
            run_dir=tmp_path,
            time_scale=options.pop("time_scale", 20),
            tick_s=0.05,
            controller=ControllerParams(dwell_ticks=4, min_hold_s=1.0),
            **options,
        )
    )


def log_lines(s: ServeSession) -> list[dict]:
    """Every line of the session's switch log (switches and events)."""
    return [json.loads(line) for line in s.loop.log_path.read_text().splitlines()]


def wait_for(pred: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def kill_under_load(s: ServeSession, victim: SpecConfig, timeout_s: float = 10.0) -> tuple[list[Done], float]:
    """SIGKILL ``victim``'s engine (one this session launched) under a closed loop of 4 once it has served 8 requests;
    stop the load once no_spec has served 8. Returns the finished requests and the monotonic time of the kill."""
    rec = Recorder()
    load = ClosedLoop(s.url, 4, 64, PROMPTS, rec).start()
    wait_for(lambda: s.pool.get(victim).served >= 8, timeout_s)
    server = s.pool.get(victim).server
    assert server is not None
    killed_at = time.monotonic()
    os.kill(server.pid, signal.SIGKILL)
    wait_for(lambda: s.pool.get(BASELINE).served >= 8, timeout_s)
    load.stop()
    return rec.snapshot(), killed_at
