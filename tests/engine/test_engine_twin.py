"""Engine lifecycle and client against real twin processes: both emulated sglang versions, faults, the ladder."""

from __future__ import annotations

import pytest

from harness.engine.launch import EngineLauncher, LadderExhausted, ServerLaunchError
from harness.engine.sglang_client import EngineRequestError
from harness.engine.spec import EngineSpec
from harness.grid import SpecConfig
from harness.world.bench import BenchSettings, run_cell
from harness.world.world import open_world


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("engine-world")
    spec = EngineSpec(extra_args=("--twin-launch-scale", "0.2"))  # twin launches 5x shorter than a real server's
    with open_world(
        "twin", time_scale=50, seed=3, run_dir=run_dir, launch_timeout_s=60, request_timeout_s=30, spec=spec
    ) as w:
        yield w


def launcher(world, tmp_path, **spec_update) -> EngineLauncher:
    spec = world.spec.model_copy(update=spec_update)
    return EngineLauncher(spec, tmp_path, launch_timeout_s=60, stop_timeout_s=10, request_timeout_s=30)


@pytest.mark.parametrize("version", ["0.5.2", "0.5.23"])
def test_client_speaks_both_versions(world, tmp_path, version):
    with launcher(world, tmp_path, sglang_version=version).launch(SpecConfig(3, 4, 8), 2, 0.65) as server:
        assert server.alive() and server.log_path.exists()
        c = server.client
        assert c.health()
        streamed = c.generate("Human: hi\n\nAssistant:", max_new_tokens=40, stream=True)
        plain = c.generate("Human: hi\n\nAssistant:", max_new_tokens=40, stream=False)
        for r in (streamed, plain):
            assert r.completion_tokens == 40 and r.finish_reason == "length"
            assert r.accept_length is not None and 1.0 <= r.accept_length <= 9.0
            assert r.prompt_tokens and r.prompt_tokens > 0
        assert streamed.ttft_s is not None
        models = c.models()
        assert models and "twin" in " ".join(models).lower() + str(c.server_info().raw).lower()
        info = c.server_info()
        assert info.raw  # the version's path answered (/get_server_info on 0.5.2, /server_info on 0.5.23)
        assert info.version == version and info.attention_backend == "flashinfer"  # pinned by the harness
        c.flush_cache()
        chat = c.chat([{"role": "user", "content": "hi"}], max_tokens=8)
        assert chat["usage"]["completion_tokens"] == 8
    assert not server.alive()


def test_run_cell_measures_from_counters_and_window(world, tmp_path):
    with launcher(world, tmp_path).launch(SpecConfig(3, 4, 8), 4, 0.65) as server:
        r = run_cell(server, 4, BenchSettings(output_tokens=200), world.telemetry, world.clock)
    assert r.n_requests == 16 and r.total_output_tokens == 16 * 200
    assert r.attention_backend == "flashinfer" and r.server_version == "0.5.2"
    assert r.speed_source == "step_time" and r.step_time_samples > 0 and r.step_time_s > 0
    assert r.accept_length_source == "server_info" and 1.5 < r.accept_length < 4
    assert r.req_accept_length_mean == pytest.approx(r.accept_length, rel=0.25)
    assert r.energy_joules and r.energy_joules > 0 and r.window.valid, r.window
    assert r.avg_power_watts == pytest.approx(r.energy_joules / r.window.duration_s)
    assert r.wall_clock_s == pytest.approx(r.window.duration_s, rel=0.1)  # both on twin time
    assert r.pre and r.pre.temperature_c is not None


def test_oom_at_launch_and_the_ladder(world, tmp_path):
    lz = launcher(world, tmp_path)
    with pytest.raises(LadderExhausted) as info:
        lz.launch_with_ladder(SpecConfig(5, 4, 16), 16, (0.65, 0.55), log_stem=tmp_path / "big")
    err = info.value
    assert err.oom and [a.mem_fraction for a in err.attempts] == [0.65, 0.55] and not any(a.ok for a in err.attempts)
    assert "memory" in err.message and err.log_tail
    server, attempts = lz.launch_with_ladder(SpecConfig(5, 4, 8), 16, (0.65, 0.55), log_stem=tmp_path / "mid")
    with server:
        assert [a.ok for a in attempts] == [False, True] and server.mem_fraction == 0.55
        assert (tmp_path / "mid.mf0.65.log").exists() and (tmp_path / "mid.mf0.55.log").exists()


def test_fault_oom_flag_and_launch_timeout(world, tmp_path):
    with pytest.raises(ServerLaunchError) as info:
        launcher(world, tmp_path, twin_faults=("oom",)).launch(SpecConfig(0, 0, 0), 1, 0.65)
    assert info.value.oom and info.value.returncode is not None  # exited during launch
    slow = EngineLauncher(
        world.spec.model_copy(update={"twin_faults": ("slow-health",)}),
        tmp_path,
        launch_timeout_s=1.0,
        stop_timeout_s=5,
    )
    with pytest.raises(ServerLaunchError, match="not ready within --launch-timeout 1 s"):
        slow.launch(SpecConfig(0, 0, 0), 1, 0.65)


def test_runaway_request_hits_the_request_timeout(world, tmp_path):
    with launcher(world, tmp_path, twin_faults=("runaway",)).launch(SpecConfig(0, 0, 0), 1, 0.65) as server:
        with pytest.raises(EngineRequestError) as info:
            server.client.generate("x", max_new_tokens=64, timeout=2.0)
        assert info.value.kind == "timeout" and "--request-timeout" in info.value.message
