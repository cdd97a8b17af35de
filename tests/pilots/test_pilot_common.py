"""The shared pilot pieces: configs, options, suite flags, telemetry helpers, the pilot-row semantics."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.errors import InvalidConfigError, UsageError
from harness.grid import SpecConfig
from harness.runs.rows import PILOT_ERROR_PREFIX as ERROR_PREFIX
from harness.telemetry.windows import GpuSample, WindowStats
from pilots.options import PILOT_CONFIGS, PilotOptions, options_from_flags, select_configs
from pilots.telemetry import energy_from_window, gpu_metrics, throttling
from pilots.trial import PilotTrial, trial_row

PUBLISHED_KEYS = [
    "hardware",
    "index",
    "repeat",
    "batch_size",
    "steps",
    "topk",
    "num_draft_tokens",
    "is_baseline",
    "error",
    "accept_length",
    "speed_tok_s",
    "speed_source",
    "step_time_s",
    "wall_clock_s",
    "wall_clock_tok_s",
    "total_output_tokens",
    "energy_joules",
    "avg_power_watts",
    "joules_per_token",
    "gpu_temp_c_before",
    "gpu_temp_c",
    "gpu_power_w",
    "gpu_util_pct",
    "gpu_mem_used_mb",
    "gpu_throttling",
    "retry_mem_fraction",
]


def test_pilot_configs_are_the_published_ones() -> None:
    assert PILOT_CONFIGS == {
        "no_spec": SpecConfig(0, 0, 0),
        "chosen": SpecConfig(3, 4, 8),
        "chosen_bs16": SpecConfig(3, 2, 4),
    }
    assert list(select_configs("no_spec,chosen")) == ["no_spec", "chosen"]
    assert select_configs("chosen_bs16, 5:1:2") == {"chosen_bs16": SpecConfig(3, 2, 4), "5:1:6": SpecConfig(5, 1, 6)}
    with pytest.raises(InvalidConfigError, match="unknown pilot config 'fast'"):
        select_configs("no_spec,fast")
    with pytest.raises(InvalidConfigError):
        select_configs("3:4:16")


def test_options_defaults_and_validation(tmp_path: Path) -> None:
    o = PilotOptions(suite="swebench")
    assert o.server_batch_size == 16 and o.engine == "twin" and o.configs == ["no_spec", "chosen", "chosen_bs16"]
    assert o.run_dir == Path("results") / f"swebench-{o.run_id}"
    assert PilotOptions(suite="swebench", out=tmp_path).run_dir == tmp_path
    assert PilotOptions(suite="terminalbench", configs="chosen").configs == ["chosen"]
    with pytest.raises(UsageError, match="time-scale"):
        options_from_flags({"suite": "swebench", "engine": "sglang", "time_scale": 5.0})
    with pytest.raises(UsageError, match="suite"):
        options_from_flags({"suite": "tau2"})
    with pytest.raises(InvalidConfigError):
        options_from_flags({"suite": "swebench", "configs": "bogus"})


def test_suite_flags_parse_into_the_suite_model(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real `harness pilot swebench` command parses its suite flags into ``SwebenchOptions`` (the runner is
    replaced: the flags are under test, not the pilot)."""
    import pilots.swebench.runner as sw
    from harness.cli import main

    seen: list[tuple[PilotOptions, object]] = []
    monkeypatch.setattr(sw, "run", lambda options, extra: seen.append((options, extra)))
    args = ["--limit", "2", "--instance-ids", "a,b", "--instance-ids=c", "--no-evaluate", "--max-new-tokens=64"]
    assert main(["pilot", "swebench", *args]) == 0
    m = seen[0][1]
    assert isinstance(m, sw.SwebenchOptions)
    assert (m.limit, m.instance_ids, m.evaluate, m.max_new_tokens) == (2, ["a", "b", "c"], False, 64)
    assert main(["pilot", "swebench", "--bogus", "1"]) == 2
    assert "unknown option --bogus" in capsys.readouterr().err
    assert main(["pilot", "swebench", "--limit"]) == 2
    assert "requires an argument" in capsys.readouterr().err
    assert main(["pilot", "swebench", "--limit", "two"]) == 2
    assert "Invalid value for '--limit'" in capsys.readouterr().err
    assert len(seen) == 1


def test_each_suite_subcommand_lists_its_own_flags() -> None:
    """`harness pilot swebench --help` / `terminalbench --help`: every field of the suite's model and of the common
    options is a flag in its help, the other suite's own flags are not."""
    from pilots.swebench.runner import SwebenchOptions
    from pilots.terminalbench.runner import TerminalBenchOptions

    flag = {"twin_gpu_url": "--twin-gpu", "twin_faults": "--twin-fault", "engine_args": "--engine-arg"}
    common = [
        flag.get(n, "--" + n.replace("_", "-")) for n in PilotOptions.model_fields if n not in ("suite", "run_id")
    ]
    for suite, model, other in (
        ("swebench", SwebenchOptions, "--harbor-bin"),
        ("terminalbench", TerminalBenchOptions, "--repos-dir"),
    ):
        out = subprocess.run(
            [sys.executable, "-m", "harness", "pilot", suite, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert out.returncode == 0, out.stderr
        own = ["--" + n.replace("_", "-") for n in model.model_fields]
        missing = [x for x in [*common, *own] if x not in out.stdout]
        assert not missing, f"{suite} --help lacks {missing}"
        assert other not in out.stdout and "options" in out.stdout


def _gpu(**kw: object) -> GpuSample:
    return GpuSample(**{"run_id": "r", "seq": 0, "t_wall_ns": 1, "t_mono_ns": 1, **kw})  # type: ignore[arg-type]


def _window(**kw: object) -> WindowStats:
    return WindowStats(**{"start_ns": 0, "end_ns": 10**9, "wall_duration_s": 1.0, **kw})  # type: ignore[arg-type]


def test_throttling_ignores_the_idle_bit() -> None:
    assert throttling(0x1) is False
    assert throttling(0x4) is True and throttling(0x21) is True
    assert throttling(None) is None
    m = gpu_metrics(_gpu(temperature_c=61.0, power_w=40.0, clock_event_reasons=1, t_wall_ns=1_700_000_000_000_000_000))
    assert m["gpu_throttling_active"] is False and m["gpu_throttling_reference"] is True
    assert m["timestamp"].endswith("+00:00")


def test_energy_from_window_uses_device_duration_and_refuses_invalid() -> None:
    assert energy_from_window(_window(valid=True, energy_j=100.0, duration_s=4.0)) == (100.0, 25.0)
    assert energy_from_window(_window(valid=False, energy_j=100.0, duration_s=4.0)) == (None, None)
    assert energy_from_window(None) == (None, None)


def _trial(mode: str, **kw: object) -> PilotTrial:
    return PilotTrial(
        suite="swebench" if mode == "snapshots" else "terminalbench",
        config_name="no_spec",
        steps=0,
        topk=0,
        num_draft_tokens=0,
        task_id="t1",
        elapsed_s=10.0,
        completion_tokens=500,
        energy_joules=600.0,
        avg_power_watts=60.0,
        telemetry_mode=mode,  # type: ignore[arg-type]
        window=_window(valid=True, avg_temp_c=70.0, avg_util_pct=90.0, clock_event_reasons_or=4, reasons=[]),
        before=_gpu(temperature_c=55.0),
        after=_gpu(
            temperature_c=66.0, power_w=71.0, utilization_pct=93.0, memory_used_mb=5000.0, clock_event_reasons=1
        ),
        **kw,
    )


def test_rows_have_the_published_pilot_semantics() -> None:
    row = trial_row(
        _trial("snapshots"), hardware="twin:rtx4060-laptop", index=0, run_id="r", pilot_server_batch_size=16
    )
    assert list(row)[:26] == PUBLISHED_KEYS
    assert row["is_baseline"] is False and row["batch_size"] == 1 and row["repeat"] is None
    assert row["error"].startswith(ERROR_PREFIX) and row["speed_source"] == "swebench_pilot"
    assert row["step_time_s"] is None and row["speed_tok_s"] == 50.0 and row["joules_per_token"] == 1.2
    assert (row["gpu_temp_c_before"], row["gpu_temp_c"], row["gpu_mem_used_mb"]) == (55.0, 66.0, 5000.0)
    # published gpu_throttling counts the idle bit; the corrected flag does not
    assert row["gpu_throttling"] is True and row["gpu_throttling_power_thermal"] is False
    assert row["pilot_server_batch_size"] == 16 and row["pilot_suite"] == "swebench" and row["pilot_task"] == "t1"

    tb = trial_row(_trial("window_average"), hardware="h", index=3, run_id="r")
    assert tb["speed_source"] == "terminalbench_pilot" and tb["index"] == 3
    assert tb["gpu_temp_c_before"] is None and tb["gpu_mem_used_mb"] is None and tb["gpu_throttling"] is None
    assert (tb["gpu_temp_c"], tb["gpu_power_w"], tb["gpu_util_pct"]) == (70.0, 60.0, 90.0)
    assert tb["gpu_throttling_power_thermal"] is True  # window OR mask 0x4: a real power cap


def _harness(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, timeout=60)


def test_cli_pilot_group_dispatch_and_errors() -> None:
    out = _harness("pilot", "--help")
    assert out.returncode == 0 and "--suite" in out.stdout and "setup" in out.stdout
    bad = _harness("pilot", "--suite", "tau2", "--engine", "twin")
    assert bad.returncode == 2 and "suite" in bad.stderr
    bad_cfg = _harness("pilot", "--suite", "swebench", "--configs", "fast")
    assert bad_cfg.returncode == 2 and "unknown pilot config" in bad_cfg.stderr


def test_cli_suite_help_and_flag_order() -> None:
    out = _harness("pilot", "--suite", "swebench", "--suite-help")
    assert out.returncode == 0 and "--max-new-tokens" in out.stdout and "--repos-dir" in out.stdout
    # suite flags before common ones: the common --configs is still parsed (and rejected here), not given to the suite
    bad = _harness("pilot", "--suite", "swebench", "--max-new-tokens", "8", "--configs", "fast")
    assert bad.returncode == 2 and "unknown pilot config 'fast'" in bad.stderr
    bad_suite_flag = _harness("pilot", "--suite", "swebench", "--fixture", "--bogus", "1")
    assert bad_suite_flag.returncode == 2 and "unknown option --bogus" in bad_suite_flag.stderr


def test_setup_subcommand_inherits_group_flags(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`docker compose run pilot setup --suite terminalbench` puts --engine/--sampler-url before `setup`."""
    import pilots.terminalbench.setup as tb_setup
    from harness.cli import main

    seen: list[tuple[PilotOptions, object]] = []
    monkeypatch.setattr(tb_setup, "setup", lambda options, extra=None: seen.append((options, extra)))
    assert (
        main(
            ["pilot", "--engine", "sglang", "--sampler-url", "http://127.0.0.1:9", "setup", "--suite", "terminalbench"]
        )
        == 0
    )
    assert main(["pilot", "setup", "--suite", "terminalbench", "--engine", "sglang"]) == 0
    (first, extra), (second, _) = seen
    assert (first.suite, first.engine, first.sampler_url) == ("terminalbench", "sglang", "http://127.0.0.1:9")
    assert isinstance(extra, tb_setup.SUITE_OPTIONS)
    assert (second.engine, second.sampler_url) == ("sglang", None)
