"""Terminal-Bench pilot against the real Harbor 0.25 (in its own venv): command building via ``--print-config``,
the local sandbox environment, and trial parsing checked against Harbor's own pydantic models.

Needs ``.harbor-venv`` (``harness pilot setup --suite terminalbench``) or ``HARBOR_BIN``; needs root (the sandbox).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from _terminalbench_helpers import ScriptedChatServer, harbor_bin_or_skip, terminus_reply

from pilots.terminalbench.command import HarborRunSpec, resolve_env
from pilots.terminalbench.harbor_install import LOCAL_SANDBOX_IMPORT, harbor_environ, harbor_python
from pilots.terminalbench.results import job_window_ns, read_job
from pilots.terminalbench.tasks import FIXTURE_TASKS, resolve_tasks
from pilots.terminalbench.windows import call_profile, segment

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def harbor() -> Path:
    return harbor_bin_or_skip()


def _spec(harbor: Path, tmp: Path, tasks, **kw) -> HarborRunSpec:
    base = dict(
        harbor_bin=str(harbor),
        job_name="job1",
        jobs_dir=str(tmp / "jobs"),
        config_path=str(tmp / "job1.json"),
        model="openai/Llama-3.2-1B-Instruct",
        api_base="http://127.0.0.1:30000/v1",
        max_tokens=512,
        max_input_tokens=8192,
        agent_timeout_s=900.0,
        tasks=tasks,
    )
    base.update(kw)
    return HarborRunSpec(**base)


def _print_config(spec: HarborRunSpec) -> dict:
    spec.write_config()
    out = subprocess.run(
        spec.argv(print_config=True), capture_output=True, text=True, env=harbor_environ(), timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def test_print_config_published_pilot_command(harbor: Path, tmp_path: Path) -> None:
    tasks = resolve_tasks(fixture=False, task_dir=None, registry_path=None, dataset=None, tasks=None, work_dir=tmp_path)
    cfg = _print_config(_spec(harbor, tmp_path, tasks, env=resolve_env(None, fixture=False)))
    assert cfg["job_name"] == "job1" and cfg["n_concurrent_trials"] == 1 and cfg["jobs_dir"] == str(tmp_path / "jobs")
    agent = cfg["agents"][0]
    assert agent["name"] == "terminus-2" and agent["model_name"] == "openai/Llama-3.2-1B-Instruct"
    assert agent["override_timeout_sec"] == 900.0
    kw = agent["kwargs"]
    assert kw["api_base"] == "http://127.0.0.1:30000/v1" and kw["temperature"] == 0.0
    assert kw["llm_call_kwargs"] == {"max_tokens": 512}
    assert kw["model_info"]["max_input_tokens"] == 8192 and kw["model_info"]["max_output_tokens"] == 512
    assert "max_turns" not in kw and "environment" not in cfg  # docker is Harbor's default environment
    ds = cfg["datasets"][0]
    assert (ds["name"], ds["version"], ds["task_names"]) == (
        "terminal-bench-sample",
        "2.0",
        ["regex-log", "log-summary-date-ranges"],
    )


def test_print_config_fixture_local_registry_and_sandbox(harbor: Path, tmp_path: Path) -> None:
    tasks = resolve_tasks(fixture=True, task_dir=None, registry_path=None, dataset=None, tasks=None, work_dir=tmp_path)
    spec = _spec(
        harbor,
        tmp_path,
        tasks,
        env=resolve_env(None, fixture=True),
        env_kwargs={"sandbox_base": "/tmp/x"},
        max_turns=3,
        agent_timeout_s=18.0,
        record_terminal_session=False,
    )
    cfg = _print_config(spec)
    assert cfg["environment"] == {"import_path": LOCAL_SANDBOX_IMPORT, "kwargs": {"sandbox_base": "/tmp/x"}}
    assert cfg["agents"][0]["override_timeout_sec"] == 18.0
    assert (
        cfg["agents"][0]["kwargs"]["max_turns"] == 3 and cfg["agents"][0]["kwargs"]["record_terminal_session"] is False
    )
    ds = cfg["datasets"][0]
    assert (ds["name"], ds["version"]) == ("eagle-local-sample", "1.0") and ds["task_names"] == list(FIXTURE_TASKS)
    assert ds["registry_path"] == tasks.registry_path


VALIDATE = r"""
import json, sys
from pathlib import Path
from harbor.models.job.result import JobResult
from harbor.models.trial.result import TrialResult
job = Path(sys.argv[1])
JobResult.model_validate_json((job / "result.json").read_text())
out = {}
for p in sorted(job.glob("*/result.json")):
    r = TrialResult.model_validate_json(p.read_text())
    ae = r.agent_execution
    out[r.trial_name] = {
        "task": r.task_name,
        "agent_start": ae.started_at.isoformat() if ae else None,
        "agent_end": ae.finished_at.isoformat() if ae else None,
        "rewards": r.verifier_result.rewards if r.verifier_result else None,
        "exception": r.exception_info.exception_type if r.exception_info else None,
        "n_output_tokens": r.agent_result.n_output_tokens if r.agent_result else None,
        "times": (r.agent_result.metadata or {}).get("api_request_times_msec") if r.agent_result else None,
    }
print(json.dumps(out))
"""


def harbor_view(harbor: Path, job_dir: Path) -> dict:
    """Each trial as Harbor's own models read it (validated in the Harbor venv)."""
    out = subprocess.run(
        [str(harbor_python(harbor)), "-c", VALIDATE, str(job_dir)],
        capture_output=True,
        text=True,
        env=harbor_environ(),
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def _assert_parser_agrees(harbor: Path, job_dir: Path) -> None:
    from harness.core.clocks import parse_iso_ns

    view = harbor_view(harbor, job_dir)
    _, trials = read_job(job_dir)
    assert sorted(view) == sorted(t.trial_name for t in trials)
    for t in trials:
        v = view[t.trial_name]
        assert t.task_name == v["task"] and t.exception_type == v["exception"]
        assert t.agent_start_ns == (parse_iso_ns(v["agent_start"]) if v["agent_start"] else None)
        assert t.agent_end_ns == (parse_iso_ns(v["agent_end"]) if v["agent_end"] else None)
        assert t.reward == ((v["rewards"] or {}).get("reward"))
        assert t.n_output_tokens == v["n_output_tokens"] and t.api_request_times_msec == (v["times"] or [])


def test_oracle_solves_both_fixture_tasks_in_the_local_sandbox(harbor: Path, tmp_path: Path) -> None:
    """The sandbox runs the reference solutions and the verifiers for real: both rewards are 1.0."""
    tasks = resolve_tasks(fixture=True, task_dir=None, registry_path=None, dataset=None, tasks=None, work_dir=tmp_path)
    argv = [
        str(harbor),
        "run",
        *tasks.harbor_args(),
        "-a",
        "oracle",
        "-e",
        LOCAL_SANDBOX_IMPORT,
        "--ek",
        f"sandbox_base={tmp_path / 'sbx'}",
        "-n",
        "1",
        "-o",
        str(tmp_path / "jobs"),
        "--job-name",
        "oracle",
        "--yes",
        "--quiet",
    ]
    out = subprocess.run(argv, capture_output=True, text=True, env=harbor_environ(), cwd=tmp_path, timeout=240)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    job_dir = tmp_path / "jobs" / "oracle"
    _assert_parser_agrees(harbor, job_dir)
    _, trials = read_job(job_dir)
    assert sorted(t.task_name for t in trials) == sorted(FIXTURE_TASKS)
    assert all(t.success is True and t.reward == 1.0 and t.status == "completed" for t in trials)
    assert not list((tmp_path / "sbx").iterdir())  # sandbox roots removed after each trial


def test_environment_failure_has_no_agent_window(harbor: Path, tmp_path: Path) -> None:
    """A task whose Dockerfile RUN fails: the sandbox refuses to start, Harbor records the exception, the trial has no
    agent_execution (so no GPU window) and no reward; the parser agrees with Harbor's models."""
    import shutil

    from pilots.terminalbench.tasks import FIXTURE_DIR

    task = tmp_path / "tasks" / "broken-env"
    shutil.copytree(FIXTURE_DIR / "log-error-digest", task)
    with open(task / "environment" / "Dockerfile", "a") as f:
        f.write("RUN echo building && exit 3\n")
    argv = [
        str(harbor),
        "run",
        "-p",
        str(task.parent),
        "-a",
        "oracle",
        "-e",
        LOCAL_SANDBOX_IMPORT,
        "--ek",
        f"sandbox_base={tmp_path / 'sbx'}",
        "-n",
        "1",
        "-o",
        str(tmp_path / "jobs"),
        "--job-name",
        "broken",
        "--yes",
        "--quiet",
    ]
    out = subprocess.run(argv, capture_output=True, text=True, env=harbor_environ(), cwd=tmp_path, timeout=240)
    assert out.returncode == 0  # Harbor exits 0 even though the trial failed
    _assert_parser_agrees(harbor, tmp_path / "jobs" / "broken")
    _, (t,) = read_job(tmp_path / "jobs" / "broken")
    assert t.status == "environment_error" and t.agent_start_ns is None and t.reward is None and t.success is None
    assert t.exception_type == "SandboxError" and "exit 3" in (t.exception_message or "")
    assert segment([t])[0].problems == ["no_agent_execution"]


SCHEMA = r"""
import json
from harbor.models.agent.context import AgentContext
from harbor.models.job.result import JobResult
from harbor.models.trial.result import TrialResult, TimingInfo, ExceptionInfo
from harbor.models.verifier.result import VerifierResult
print(json.dumps({n: sorted(m.model_fields) for n, m in {"TrialResult": TrialResult, "JobResult": JobResult,
    "TimingInfo": TimingInfo, "ExceptionInfo": ExceptionInfo, "AgentContext": AgentContext,
    "VerifierResult": VerifierResult}.items()}))
"""


def test_parser_schema_is_a_subset_of_harbors_models(harbor: Path) -> None:
    from pilots.terminalbench import results as r

    out = subprocess.run(
        [str(harbor_python(harbor)), "-c", SCHEMA], capture_output=True, text=True, env=harbor_environ(), timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    theirs = json.loads(out.stdout)
    ours = {
        "TrialResult": r.HarborTrialResult,
        "JobResult": r.HarborJobResult,
        "TimingInfo": r.TimingInfo,
        "ExceptionInfo": r.ExceptionInfo,
        "AgentContext": r.AgentContext,
        "VerifierResult": r.VerifierResult,
    }
    for name, model in ours.items():
        assert set(model.model_fields) <= set(theirs[name]), (name, set(model.model_fields) - set(theirs[name]))


@pytest.mark.slow
def test_terminus2_timeout_in_a_never_returning_call_is_flagged_stuck(harbor: Path, tmp_path: Path) -> None:
    """Terminus 2 runs one real command through tmux in the sandbox, then its next LLM call never returns: the agent
    timeout fires, the verifier still grades (0.0), and the in-flight call is flagged as the stuck call. Harbor runs
    with TZ=Asia/Kolkata: its naive job times still map onto the trials' UTC windows."""
    llm = ScriptedChatServer([terminus_reply("echo sandboxed > /app/probe.txt\n"), None])
    try:
        tasks = resolve_tasks(
            fixture=True, task_dir=None, registry_path=None, dataset=None, tasks=["log-error-digest"], work_dir=tmp_path
        )
        spec = _spec(
            harbor,
            tmp_path,
            tasks,
            api_base=f"{llm.base_url}/v1",
            model="openai/scripted-model",
            agent_timeout_s=8.0,
            env=LOCAL_SANDBOX_IMPORT,
            env_kwargs={"sandbox_base": str(tmp_path / "sbx"), "keep_root": True},
            record_terminal_session=False,
        )
        spec.write_config()
        out = subprocess.run(
            spec.argv(),
            capture_output=True,
            text=True,
            env=harbor_environ(tz="Asia/Kolkata"),
            cwd=tmp_path,
            timeout=240,
        )
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    finally:
        llm.close()
    assert len(llm.calls) >= 2 and llm.calls[0]["max_tokens"] == 512 and llm.calls[0]["temperature"] == 0.0
    job_dir = tmp_path / "jobs" / "job1"
    _assert_parser_agrees(harbor, job_dir)
    job, trials = read_job(job_dir)
    (t,) = trials
    assert t.status == "timeout" and t.exception_type == "AgentTimeoutError" and t.reward == 0.0 and t.success is False
    assert 7.0 < t.agent_wall_s < 12.0 and t.last_step_ns is not None
    p = call_profile(t)
    assert p.stuck and p.longest_kind == "in_flight" and p.longest_share > 0.5
    roots = list((tmp_path / "sbx").glob("*/root"))
    assert len(roots) == 1 and (roots[0] / "app" / "probe.txt").read_text() == "sandboxed\n"  # ran via tmux, in /app
    start, end, how = job_window_ns(job, trials, "Asia/Kolkata")
    assert how == "inferred:UTC+05:30"
    assert segment(trials, job_start_ns=start, job_end_ns=end)[0].problems == []


def test_setup_reuses_an_installed_harbor_and_checks_harbor_bin(harbor: Path, tmp_path: Path) -> None:
    from harness.core.errors import HarnessError
    from pilots.terminalbench.setup import SetupOptions, setup

    assert setup(None, SetupOptions(harbor_bin=str(harbor))) == harbor
    if harbor.parent.parent.joinpath("pyvenv.cfg").exists():  # a venv install: setup finds it and does not reinstall
        assert setup(None, SetupOptions(venv=harbor.parent.parent)) == harbor.parent.parent.resolve() / "bin" / "harbor"
    with pytest.raises(HarnessError):
        setup(None, SetupOptions(harbor_bin=str(tmp_path / "no-harbor")))


def test_a_harbor_that_runs_no_trial_is_reported_not_hidden(harbor: Path, tmp_path: Path) -> None:
    """Harbor fails before any trial (an environment it cannot import): each task gets a ``harbor_error`` record with
    Harbor's own message, and the suite's ``run`` would turn an all-error run into a non-zero exit."""
    from types import SimpleNamespace

    from harness.grid import SpecConfig
    from pilots.options import PilotOptions
    from pilots.runner import ConfigRun
    from pilots.terminalbench.runner import TerminalBenchOptions, TerminalBenchPilot

    opts = PilotOptions(suite="terminalbench", engine="twin", fixture=True, out=tmp_path / "run", configs=["no_spec"])
    pilot = TerminalBenchPilot(opts, TerminalBenchOptions(env="no_such_module:NoEnv", harbor_bin=str(harbor)))
    client = SimpleNamespace(models=lambda: ["m"], server_info=lambda: SimpleNamespace(raw={"max_req_input_len": 4096}))
    server = SimpleNamespace(base_url="http://127.0.0.1:9", client=client)
    run = ConfigRun("no_spec", SpecConfig(0, 0, 0), server, None, None, opts, opts.run_dir)
    trials = pilot.run_config(run)
    assert [t.task_id for t in trials] == list(FIXTURE_TASKS)
    for t in trials:
        assert t.status == "harbor_error" and t.success is None and t.energy_joules is None
        assert "no_such_module" in t.record["error"] and t.record["harbor_rc"] not in (0, None)
