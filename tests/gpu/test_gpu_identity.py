"""GPU identity (issue 39 item 3): NVML's index is not CUDA's ordinal and NVML ignores CUDA_VISIBLE_DEVICES, so the
engine's GPU is resolved as CUDA resolves it and every NVML user opens it by UUID. Rules on plain lists, then the
real nvidia-ml-py on the NVML shim with two GPUs whose NVML order is not the PCI (CUDA) order, then a sweep whose
sampler watches the other GPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _nvml_shim_helpers import ShimScript, load_in_process, session_shim
from _sampler_testbed import Service, harness_argv

from harness.core.errors import UsageError
from harness.gpu.identity import NvmlGpu, engine_gpu, list_gpus, resolve_engine_gpu, visible_gpus

A = NvmlGpu(0, "GPU-aaaaaaaa-0000-0000-0000-000000000000", "00000000:41:00.0", "NVIDIA H100 80GB HBM3")
B = NvmlGpu(1, "GPU-bbbbbbbb-0000-0000-0000-000000000000", "00000000:01:00.0", "NVIDIA H100 80GB HBM3")
TWO = [A, B]  # NVML lists A first, but B sits on the lower PCI bus: CUDA's device 0 is B
TWO_GPUS = {
    "device_count": 2, "name": "NVIDIA H100 (shim)",
    "uuid.0": A.uuid, "pci_bus_id.0": A.pci_bus_id, "uuid.1": B.uuid, "pci_bus_id.1": B.pci_bus_id,
}  # fmt: skip


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({}, B),  # all visible, one model: CUDA's order is the PCI bus order
        ({"CUDA_VISIBLE_DEVICES": "0"}, B),
        ({"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, A),
        ({"CUDA_VISIBLE_DEVICES": "1,0"}, A),
        ({"CUDA_VISIBLE_DEVICES": A.uuid}, A),
        ({"CUDA_VISIBLE_DEVICES": "GPU-aaaa"}, A),  # a unique prefix, as CUDA takes it
        ({"CUDA_VISIBLE_DEVICES": "bbbbbbbb"}, B),  # without the GPU- prefix
    ],
)
def test_the_engines_gpu_is_the_one_cuda_would_pick(env: dict[str, str], want: NvmlGpu) -> None:
    assert engine_gpu(env, TWO) == want


def test_cuda_stops_at_an_invalid_entry_and_an_empty_list_shows_nothing() -> None:
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "1,7,0"}, TWO) == [A]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-ffff,0"}, TWO) == []
    with pytest.raises(UsageError, match="would see 0 GPU"):
        engine_gpu({"CUDA_VISIBLE_DEVICES": ""}, TWO)
    with pytest.raises(UsageError, match="MIG instance"):
        engine_gpu({"CUDA_VISIBLE_DEVICES": "MIG-1234"}, TWO)


def test_mixed_models_in_fastest_first_order_are_not_guessed() -> None:
    mixed = [A, NvmlGpu(1, B.uuid, B.pci_bus_id, "NVIDIA L4")]
    with pytest.raises(UsageError, match="fastest first") as err:
        engine_gpu({"CUDA_VISIBLE_DEVICES": "0"}, mixed)
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in err.value.fix
    assert engine_gpu({"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, mixed).uuid == B.uuid
    assert engine_gpu({"CUDA_VISIBLE_DEVICES": A.uuid}, mixed) == A  # a UUID needs no order


@pytest.fixture
def two_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> ShimScript:
    load_in_process(session_shim(tmp_path_factory))
    script = ShimScript(tmp_path / "nvml.script", **TWO_GPUS)
    monkeypatch.setenv("NVML_SHIM_SCRIPT", str(script.path))
    return script


def test_nvml_users_open_the_engines_gpu_by_uuid(two_gpus: ShimScript) -> None:
    import pynvml

    from harness.gpu.power_cap import NvmlCapDevice
    from harness.gpu.sm_clocks import NvmlClockDevice
    from harness.telemetry.probes import NvmlProbe

    pynvml.nvmlInit()
    try:
        listed = list_gpus(pynvml)
    finally:
        pynvml.nvmlShutdown()
    assert [(g.index, g.uuid, g.pci_bus_id) for g in listed] == [(0, A.uuid, A.pci_bus_id), (1, B.uuid, B.pci_bus_id)]
    gpu = resolve_engine_gpu({"CUDA_VISIBLE_DEVICES": "0"})
    assert gpu.uuid == B.uuid and gpu.index == 1  # NVML index 0 would have been the wrong GPU
    probe = NvmlProbe(gpu.uuid)
    try:
        assert probe.identity()["uuid"] == B.uuid and probe.read()["uuid"] == B.uuid
    finally:
        probe.close()
    for device in (NvmlCapDevice(gpu.uuid), NvmlClockDevice(gpu.uuid)):
        try:
            assert device.nv.nvmlDeviceGetUUID(device.handle) == B.uuid
        finally:
            device.close()


def test_a_sweep_whose_sampler_watches_another_gpu_stops_before_any_cell(tmp_path: Path, tmp_path_factory) -> None:
    """The sampler watches NVML index 0 (A); the engine would run on CUDA device 0 (B): the sweep stops at once."""
    script = ShimScript(tmp_path / "nvml.script", **TWO_GPUS)
    env = script.env(session_shim(tmp_path_factory))
    argv = harness_argv("sampler", "serve", "--probe", "nvml", "--gpu-index", "0", "--port", "0")
    with Service(argv, tmp_path / "sampler.log", env) as sampler:
        sampler.wait_url()
        sweep = [sys.executable, "-m", "harness", "sweep", "--engine", "sglang", "--sglang-version", "0.5.2",
                 "--sampler-url", sampler.url, "--quick", "--out", str(tmp_path / "run")]  # fmt: skip
        done = subprocess.run(
            sweep, env={**__import__("os").environ, **env, "CUDA_VISIBLE_DEVICES": "0"}, capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"watches {A.uuid} but the engine runs on {B.uuid} (NVML index 1" in done.stderr
    assert "--gpu-index 1" in done.stderr and "Traceback" not in done.stderr
    assert not list((tmp_path / "run").glob("rows*.jsonl"))


def test_gpu_check_loads_the_gpu_it_probes(two_gpus: ShimScript, monkeypatch: pytest.MonkeyPatch) -> None:
    """gpu_check probes ``--gpu-index`` (NVML's) and loads a CUDA device: the load goes to the probed GPU."""
    from types import SimpleNamespace

    import pynvml

    from harness.gpucheck.phases import load_ordinal

    pynvml.nvmlInit()
    try:
        chk = SimpleNamespace(probe=SimpleNamespace(_nv=pynvml), target_uuid=A.uuid, gpu_index=0, force_cpu=False)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # recorded, so the pin below is undone after the test
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
        assert load_ordinal(chk) == 0 and __import__("os").environ["CUDA_VISIBLE_DEVICES"] == A.uuid  # pinned
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
        assert load_ordinal(chk) == 1  # A is CUDA's device 1 (B has the lower bus)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", B.uuid)
        with pytest.raises(UsageError, match="not visible to CUDA"):
            load_ordinal(chk)
    finally:
        pynvml.nvmlShutdown()
