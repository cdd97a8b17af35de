"""Terminal-Bench pilot, parts that need no Harbor: time zones, windows, stuck calls, rows, tasks, interpreter search."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from harness.core.clocks import parse_iso_ns, to_iso
from harness.core.errors import UsageError
from harness.telemetry.windows import WindowStats
from pilots.options import PilotOptions
from pilots.runner import ConfigRun
from pilots.terminalbench import harbor_install
from pilots.terminalbench.results import TrialOutcome, infer_offset, job_window_ns, read_job
from pilots.terminalbench.runner import TWIN_FAILURE_NOTE, TerminalBenchOptions, trial_from_outcome
from pilots.terminalbench.tasks import FIXTURE_TASKS, PUBLISHED_DATASET, PUBLISHED_TASKS, resolve_tasks
from pilots.terminalbench.windows import call_profile, segment
from pilots.trial import trial_row

NS = 1_000_000_000
T0 = parse_iso_ns("2026-03-01T10:00:00Z")


def outcome(
    name: str = "regex-log__abc1234",
    start_s: float = 0.0,
    dur_s: float = 100.0,
    *,
    calls_ms=(),
    exc: str | None = None,
    last_step_s: float | None = None,
    reward: float | None = 0.0,
    out_tokens=500,
) -> TrialOutcome:
    s = T0 + int(start_s * NS)
    return TrialOutcome(
        trial_name=name,
        task_name=name.split("__")[0],
        trial_dir="/nonexistent",
        agent_start_ns=s,
        agent_end_ns=s + int(dur_s * NS),
        trial_start_ns=s - 5 * NS,
        trial_end_ns=s + int(dur_s * NS) + 5 * NS,
        reward=reward,
        success=None if reward is None else reward >= 1,
        exception_type=exc,
        exception_message=None,
        n_input_tokens=1000,
        n_cache_tokens=0,
        n_output_tokens=out_tokens,
        api_request_times_msec=list(calls_ms),
        n_episodes=len(calls_ms),
        summarization_count=0,
        last_step_ns=None if last_step_s is None else s + int(last_step_s * NS),
        n_steps=3,
        model_name="m",
    )


# ---- job-level naive local time vs trial UTC ------------------------------------------------------------------


def _write_job(tmp: Path, naive_start: str, naive_end: str, trial_start_utc: str) -> Path:
    job = tmp / "job"
    (job / "t__abcdefg").mkdir(parents=True)
    (job / "result.json").write_text(
        json.dumps(
            {
                "id": "00000000-0000-0000-0000-000000000001",
                "started_at": naive_start,
                "finished_at": naive_end,
                "n_total_trials": 1,
                "stats": {},
            }
        )
    )
    (job / "t__abcdefg" / "result.json").write_text(
        json.dumps(
            {
                "id": "00000000-0000-0000-0000-000000000002",
                "task_name": "t",
                "trial_name": "t__abcdefg",
                "started_at": trial_start_utc,
                "finished_at": trial_start_utc,
                "agent_execution": {"started_at": trial_start_utc, "finished_at": trial_start_utc},
            }
        )
    )
    return job


@pytest.mark.parametrize(
    "tz,offset_min", [("UTC", 0), ("Asia/Kolkata", 330), ("America/St_Johns", -210), ("Pacific/Kiritimati", 840)]
)
def test_job_naive_local_times_map_to_the_same_utc_window_in_any_zone(tmp_path: Path, tz: str, offset_min: int) -> None:
    from datetime import timedelta
    from zoneinfo import ZoneInfo

    utc_start = datetime(2026, 3, 1, 10, 0, 0, tzinfo=timezone.utc)
    local = utc_start.astimezone(ZoneInfo(tz))
    assert local.utcoffset() == timedelta(minutes=offset_min)
    naive_start = local.replace(tzinfo=None).isoformat()
    naive_end = (local + timedelta(minutes=20)).replace(tzinfo=None).isoformat()
    trial_utc = (utc_start + timedelta(seconds=2)).isoformat().replace("+00:00", "Z")
    job, trials = read_job(_write_job(tmp_path, naive_start, naive_end, trial_utc))
    start, end, how = job_window_ns(job, trials)
    assert start == int(utc_start.timestamp()) * NS
    assert end - start == 20 * 60 * NS
    assert how.startswith("inferred:")
    # Without trials the zone has to be given: the right TZ gives the right instant, a wrong one does not.
    s2, _, how2 = job_window_ns(job, [], tz)
    assert s2 == start and how2 == f"tz:{tz}"
    if offset_min:
        assert job_window_ns(job, [], "UTC")[0] != start


def test_naive_job_time_written_by_a_process_in_another_zone_is_recovered() -> None:
    """Harbor writes ``datetime.now().isoformat()``: do the same in a child with TZ set, map it back to UTC."""
    for tz in ("Asia/Kolkata", "America/Los_Angeles"):
        before = datetime.now(timezone.utc)
        out = subprocess.run(
            [sys.executable, "-c", "import datetime; print(datetime.datetime.now().isoformat())"],
            env={**os.environ, "TZ": tz},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        after_ns = int(datetime.now(timezone.utc).timestamp() * 1e9)
        assert datetime.fromisoformat(out).tzinfo is None
        with pytest.raises(ValueError):
            parse_iso_ns(out)  # the clocks module refuses naive input on purpose
        tzinfo = infer_offset(out, int(before.timestamp() * 1e9))
        ns = parse_iso_ns(out, assume_tz=tzinfo)
        assert int(before.timestamp() * 1e9) - NS <= ns <= after_ns + NS, (tz, out, to_iso(ns))


# ---- windows -----------------------------------------------------------------------------------------------------


def test_segment_orders_trials_and_flags_overlaps_missing_windows_and_job_bounds() -> None:
    a = outcome("a__1111111", 0, 50)
    b = outcome("b__2222222", 40, 30)  # overlaps a
    c = outcome("c__3333333", 200, 10)  # ends after the job
    d = outcome("d__4444444").model_copy(update={"agent_start_ns": None, "agent_end_ns": None})
    w = {x.trial_name: x for x in segment([c, b, a, d], job_start_ns=T0 - NS, job_end_ns=T0 + 150 * NS)}
    assert w["a__1111111"].problems == []
    assert w["b__2222222"].problems == ["overlaps_previous_trial"]
    assert w["c__3333333"].problems == ["ends_after_job"]
    assert w["d__4444444"].problems == ["no_agent_execution"]
    assert w["a__1111111"].wall_s == pytest.approx(50.0)


# ---- stuck calls -------------------------------------------------------------------------------------------------


def test_one_completed_call_taking_most_of_the_trial_is_stuck() -> None:
    p = call_profile(outcome(dur_s=100, calls_ms=[2000, 3000, 80000]))
    assert p.stuck and p.longest_kind == "completed" and p.longest_s == pytest.approx(80.0)
    assert p.longest_share == pytest.approx(0.8) and p.n_calls == 3


def test_many_short_calls_are_not_stuck() -> None:
    p = call_profile(outcome(dur_s=100, calls_ms=[9000] * 10))
    assert not p.stuck and p.longest_share == pytest.approx(0.09)


def test_never_returning_call_cancelled_by_the_timeout_counts_as_in_flight() -> None:
    """Published runaway: ~895 of 900 s in one call that never returned (so it is absent from the call list)."""
    p = call_profile(outcome(dur_s=900, calls_ms=[1500, 2000, 1500], exc="AgentTimeoutError", last_step_s=5.0))
    assert p.stuck and p.longest_kind == "in_flight"
    assert p.in_flight_s == pytest.approx(895.0) and p.longest_share == pytest.approx(895 / 900)


def test_call_durations_are_scaled_to_world_seconds_and_threshold_is_configurable() -> None:
    p = call_profile(outcome(dur_s=10, calls_ms=[4000, 1000]), time_scale=50.0, stuck_fraction=0.3)
    assert p.call_s == [200.0, 50.0] and p.trial_s == pytest.approx(500.0)
    assert p.stuck and p.longest_share == pytest.approx(0.4)
    assert not call_profile(outcome(dur_s=10, calls_ms=[4000, 1000]), time_scale=50.0).stuck


# ---- rows ----------------------------------------------------------------------------------------------------------


class _FixedWindowTelemetry:
    """A sampler stand-in that answers one window (the rows are under test, not the sampler)."""

    def __init__(self, window: dict) -> None:
        self.window_ = window
        self.asked: list[tuple[int, int]] = []

    def window(self, start_ns: int, end_ns: int, wait_s: float | None = None) -> WindowStats:
        self.asked.append((start_ns, end_ns))
        return WindowStats.model_validate(dict(self.window_, start_ns=start_ns, end_ns=end_ns))

    def snapshot(self):
        return None


def test_rows_have_the_published_terminalbench_pilot_semantics() -> None:
    from harness.grid import SpecConfig
    from harness.runs.rows import PUBLISHED_KEYS

    win = {
        "valid": True,
        "duration_s": 100.0,
        "wall_duration_s": 2.0,
        "energy_j": 7000.0,
        "avg_power_w": 69.0,
        "avg_temp_c": 71.5,
        "avg_util_pct": 93.6,
        "max_mem_used_mb": 6100,
        "clock_event_reasons_or": 0x4,
        "sample_count": 20,
        "coverage": 1.0,
        "reasons": [],
        "energy_method": "counter",
    }
    tel = _FixedWindowTelemetry(win)
    opts = PilotOptions(suite="terminalbench", engine="twin", time_scale=50.0, configs=["chosen"])
    run = ConfigRun("chosen", SpecConfig(3, 4, 8), None, tel, None, opts, Path("/tmp"))
    o = outcome(dur_s=2.0, calls_ms=[300, 1500], exc="AgentTimeoutError", last_step_s=0.2, reward=0.0, out_tokens=4640)
    t = trial_from_outcome(run, o, engine="twin", time_scale=50.0, stuck_fraction=0.5)
    assert tel.asked == [(o.agent_start_ns, o.agent_end_ns)]
    assert t.elapsed_s == 100.0 and t.energy_joules == 7000.0 and t.avg_power_watts == pytest.approx(70.0)
    assert t.record["output_tokens_per_s"] == pytest.approx(46.4) and t.record["stuck_call"] is True
    assert t.record["expected_failure"] == TWIN_FAILURE_NOTE and t.success is False
    t.accept_length, t.accept_length_source = 1.168, "server_average"
    row = trial_row(t, hardware="twin:rtx4060-laptop", index=0, run_id="r")
    assert row["speed_source"] == "terminalbench_pilot" and row["batch_size"] == 1 and row["is_baseline"] is False
    assert row["error"].startswith("agentic_pilot_trace: ") and row["repeat"] is None and row["step_time_s"] is None
    assert row["gpu_temp_c_before"] is None and row["gpu_mem_used_mb"] is None and row["gpu_throttling"] is None
    assert row["gpu_temp_c"] == 71.5 and row["gpu_util_pct"] == 93.6
    assert row["gpu_power_w"] == pytest.approx(70.0) and row["avg_power_watts"] == pytest.approx(70.0)
    assert row["total_output_tokens"] == 4640 and row["speed_tok_s"] == pytest.approx(46.4)
    assert row["accept_length"] == 1.168 and (row["steps"], row["topk"], row["num_draft_tokens"]) == (3, 4, 8)
    assert set(PUBLISHED_KEYS) <= set(row)


# ---- tasks, options, interpreter, environment ---------------------------------------------------------------------


def test_task_selection_published_fixture_and_task_dir(tmp_path: Path) -> None:
    pub = resolve_tasks(fixture=False, task_dir=None, registry_path=None, dataset=None, tasks=None, work_dir=tmp_path)
    assert pub.harbor_args() == ["-d", PUBLISHED_DATASET, "-i", PUBLISHED_TASKS[0], "-i", PUBLISHED_TASKS[1]]
    fx = resolve_tasks(fixture=True, task_dir=None, registry_path=None, dataset=None, tasks=None, work_dir=tmp_path)
    reg = json.loads(Path(fx.registry_path).read_text())
    paths = [Path(t["path"]) for t in reg[0]["tasks"]]
    assert fx.tasks == list(FIXTURE_TASKS) and all(p.is_absolute() and (p / "task.toml").exists() for p in paths)
    one = resolve_tasks(
        fixture=True, task_dir=None, registry_path=None, dataset=None, tasks=["iso-*"], work_dir=tmp_path
    )
    assert one.harbor_args()[-2:] == ["-i", "iso-*"]
    with pytest.raises(UsageError):
        resolve_tasks(
            fixture=False, task_dir=tmp_path, registry_path=tmp_path, dataset=None, tasks=None, work_dir=tmp_path
        )


def test_fixture_tasks_have_harbors_task_layout() -> None:
    from pilots.terminalbench.tasks import FIXTURE_DIR

    for name in FIXTURE_TASKS:
        d = FIXTURE_DIR / name
        for f in ("task.toml", "instruction.md", "environment/Dockerfile", "tests/test.sh", "solution/solve.sh"):
            assert (d / f).is_file(), (name, f)
        assert "/logs/verifier/reward.txt" in (d / "tests" / "test.sh").read_text()
        assert os.access(d / "tests" / "test.sh", os.X_OK)


def test_suite_options_parse_from_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real `harness pilot terminalbench` command parses its suite flags (the runner is replaced)."""
    import pilots.terminalbench.runner as tb
    from harness.cli import main

    seen: list[object] = []
    monkeypatch.setattr(tb, "run", lambda options, extra: seen.append(extra))
    assert (
        main(["pilot", "terminalbench", "--tasks", "a,b", "--max-turns", "3", "--agent-timeout-s=60", "--env", "local"])
        == 0
    )
    o = seen[0]
    assert isinstance(o, TerminalBenchOptions)
    assert o.tasks == ["a", "b"] and o.max_turns == 3 and o.agent_timeout_s == 60.0 and o.env == "local"
    assert main(["pilot", "terminalbench", "--no-such-flag", "1"]) == 2
    assert len(seen) == 1


def test_python312_is_found_and_a_missing_one_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    found = harbor_install.find_python312()
    assert harbor_install.python_version(found) >= (3, 12)
    monkeypatch.setattr(harbor_install, "candidate_pythons", lambda: [sys.executable, "/nonexistent/python9"])
    with pytest.raises(harbor_install.HarborNotFoundError) as err:
        harbor_install.find_python312()
    assert "3.12" in err.value.message and err.value.fix


def test_missing_harbor_names_the_setup_command(tmp_path: Path) -> None:
    with pytest.raises(harbor_install.HarborNotFoundError) as err:
        harbor_install.resolve_harbor_bin(tmp_path / "harbor")
    assert "harness pilot setup --suite terminalbench" in err.value.fix


def test_harbor_environment_is_offline_and_keyless() -> None:
    env = harbor_install.harbor_environ({"OPENAI_API_KEY": "sk-real", "PYTHONPATH": "/x"}, tz="Asia/Kolkata")
    assert env["HARBOR_TELEMETRY"] == "0" and env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert env["OPENAI_API_KEY"] == harbor_install.PLACEHOLDER_API_KEY and env["TZ"] == "Asia/Kolkata"
    assert env["PYTHONPATH"].split(os.pathsep) == [str(harbor_install.SANDBOX_DIR), "/x"]
    assert (harbor_install.SANDBOX_DIR / "tb_local_sandbox.py").exists()
