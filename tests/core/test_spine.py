"""The options spine (issue 45, item 2): one engine and world block embedded by every command that launches engines,
one engine-spec builder, one version resolver, one world opener, serve's session options from its CLI options by one
method, and one typed pass from the option to the row, the report and the policies."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from harness.core.model_options import OptionError
from harness.engine.options import EngineOptions
from harness.engine.spec import EngineSpec
from harness.gpu.gpu_pass import GpuPass
from harness.runs.options import SweepOptions
from harness.runs.plan import plan_cells
from harness.serve.options import ServeOptions
from harness.serve.picks import PickTable
from harness.serve.session import SessionOptions
from pilots.options import PilotOptions
from policies.options import TrainOptions

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [p for d in ("harness", "pilots", "policies") for p in (ROOT / d).rglob("*.py")]


def calls_of(name: str) -> dict[str, int]:
    """Module path -> how many calls of ``name`` (a plain or attribute call) it makes."""
    out: dict[str, int] = {}
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if called == name:
                    key = str(path.relative_to(ROOT))
                    out[key] = out.get(key, 0) + 1
    return out


def test_every_command_that_launches_engines_embeds_the_one_block() -> None:
    block = set(EngineOptions.model_fields)
    for model in (SweepOptions, ServeOptions, PilotOptions):  # reproduce builds SweepOptions
        assert issubclass(model, EngineOptions) and block <= set(model.model_fields), model
        for name in block:  # one field, one check: the block's own, not a copy
            assert model.model_fields[name].annotation == EngineOptions.model_fields[name].annotation, (model, name)


def test_serve_and_the_pilots_refuse_an_engine_they_cannot_run_as_a_value() -> None:
    for model, extra in ((ServeOptions, {}), (PilotOptions, {"suite": "swebench"})):
        with pytest.raises(OptionError, match="not vllm") as info:
            model(engine="vllm", **extra)
        assert info.value.field == "engine" and info.value.exit_code == 2


def test_one_builder_one_resolver_one_opener() -> None:
    """Versions are resolved by ``EngineSpec.build`` only; commands open their world through ``open_world_for``;
    a spec from a command's options is built by ``EngineSpec.build``, the GPU check's argv too (it used to build
    a plain 0.5.2 spec by hand, issue 46 item 4): no module builds an ``EngineSpec(...)`` of its own."""
    for resolver in ("resolve_version", "resolve_vllm_version"):
        assert set(calls_of(resolver)) == {"harness/engine/spec.py"}, resolver
    assert set(calls_of("EngineSpec")) == set()
    assert set(calls_of("open_world")) == {"harness/world/world.py", "policies/live.py"}
    assert {"harness/sweep/executors/__init__.py", "harness/sweep/executors/slot.py", "harness/serve/session.py",
            "pilots/runner.py"} <= set(calls_of("open_world_for"))  # fmt: skip


def test_the_block_builds_the_spec_and_the_sweep_adds_its_own() -> None:
    opts = SweepOptions(engine="twin", engine_args=["--twin-launch-scale=0.1"], overlap_schedule="off", seed=3)
    spec = opts.engine_spec()
    assert isinstance(spec, EngineSpec) and spec.sglang_version == "0.5.2"  # auto, resolved for the twin
    assert spec.extra_args == ("--twin-launch-scale=0.1", "--disable-overlap-schedule")
    cpu = EngineOptions(engine_device="cpu", engine="sglang", sglang_version="0.5.23").engine_spec()
    assert (cpu.device, cpu.dtype, cpu.attention_backend, cpu.sglang_version) == (
        "cpu",
        "bfloat16",
        "intel_amx",
        "0.5.23",
    )


def test_serve_session_options_come_from_its_options_by_one_method(tmp_path: Path) -> None:
    """Every option of the same name is carried over as given (a changed default shows up here)."""
    opts = ServeOptions(
        engine="sglang", engine_device="cpu", sglang_version="0.5.23", model_path="m", draft_model_path="d",
        engine_args=["--x"], time_scale=3.0, seed=7, sampler_url="http://127.0.0.1:1", twin_gpu_url="http://127.0.0.1:2",
        configs="0:0:0,3:2:4", mode="band", out=tmp_path, host="127.0.0.2", port=9, api_key="k", max_batch_size=8,
        mem_fraction=0.3, speculative_adaptive=True, band="0.9,0.97", dwell_ticks=2, min_hold_s=1.5,
        instances="one", relaunch_hold_s=5.0, drain_timeout_s=6.0, tick_s=0.1, clock_control=True,
    )  # fmt: skip
    session = SessionOptions.from_options(opts, PickTable({16: (3, 2, 4)}))
    shared = {f.name for f in dataclasses.fields(SessionOptions)} & set(ServeOptions.model_fields)
    assert len(shared) >= 20
    for name in shared - {"configs", "engine_args", "picks"}:  # derived: the instances, a tuple, the resolved table
        assert getattr(session, name) == getattr(opts, name), name
    assert session.engine_args == ("--x",) and [c.as_tuple() for c in session.configs] == [(0, 0, 0), (3, 2, 4)]
    assert session.run_dir == tmp_path and session.controller.band == (0.9, 0.97)
    assert session.controller.dwell_ticks == 2 and session.controller.min_hold_s == 1.5


def test_one_typed_pass_from_the_option_to_the_cell_and_the_policies() -> None:
    opts = SweepOptions(power_caps="60W,75%", sm_clocks="default,1410", batch_sizes="1", configs="0:0:0")
    cells = plan_cells(opts)
    assert [c.gpu_pass for c in cells] == GpuPass.grid(["60", "75%"], ["max", "1410"])
    assert cells[1].cell_id.startswith("cap60w-clk1410mhz-") and cells[1].gpu_pass.label == "cap 60 W, SM 1410 MHz"
    # a pass named on train's command line is the label the sweep wrote (60W -> 60, default -> max)
    train = TrainOptions(dataset=__file__, out="m", power_cap="60W", sm_clock="default")
    assert (train.power_cap, train.sm_clock) == (cells[0].gpu_pass.cap, cells[0].gpu_pass.clock)
