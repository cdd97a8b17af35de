"""The host CPU as the measured device: RAPL package counters (a sysfs tree made in tmp, as the kernel lays it out,
since this VM exposes none), their wrap, the sampler serving them, and the reason when a host has none."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from _sampler_testbed import Service, harness_argv

from harness.runs.rows import cpu_hardware_label
from harness.telemetry.rapl_probe import RaplProbe, cpu_model_name


def _zone(root: Path, n: int, energy_uj: int, max_uj: int = 262143328850, name: str | None = None) -> Path:
    z = root / f"intel-rapl:{n}"
    (z / f"intel-rapl:{n}:0").mkdir(parents=True)  # a subzone (core): never summed with its package
    (z / f"intel-rapl:{n}:0" / "name").write_text("core\n")
    (z / "name").write_text(f"{name or f'package-{n}'}\n")
    (z / "max_energy_range_uj").write_text(f"{max_uj}\n")
    (z / "energy_uj").write_text(f"{energy_uj}\n")
    (z / "constraint_0_power_limit_uw").write_text("150000000\n")  # PL1 150 W
    return z


def test_packages_are_summed_and_a_wrapped_counter_keeps_counting(tmp_path):
    a, b = _zone(tmp_path, 0, 1_000_000, max_uj=9_999_999), _zone(tmp_path, 1, 5_000_000)
    _zone(tmp_path, 2, 0, name="psys")  # a platform zone is not a package
    probe = RaplProbe(tmp_path)
    first = probe.read()
    assert first["energy_mj"] == 0.0 and first["power_w"] is None and first["errors"] == []
    (a / "energy_uj").write_text("9_000_000\n".replace("_", ""))
    (b / "energy_uj").write_text("6000000\n")
    time.sleep(0.05)
    second = probe.read()
    assert second["energy_mj"] == 9_000.0  # 8 J + 1 J
    assert second["power_w"] > 0 and second["power_limit_w"] == 300.0  # the two packages' PL1 (psys is not one)
    (a / "energy_uj").write_text("500000\n")  # wrapped past max_energy_range_uj
    third = probe.read()
    assert third["energy_mj"] == 9_000.0 + (9_999_999 + 1 - 9_000_000 + 500_000) / 1000
    ident = probe.identity()
    assert ident["rapl_zones"] == ["intel-rapl:0 (package-0)", "intel-rapl:1 (package-1)"]
    assert ident["energy_unavailable"] is None and ident["device"] == "cpu"


def test_a_host_without_rapl_reads_null_energy_and_says_why(tmp_path):
    probe = RaplProbe(tmp_path / "absent")
    reading = probe.read()
    assert reading["energy_mj"] is None and reading["power_w"] is None and reading["errors"] == []
    assert "no RAPL counters" in probe.identity()["energy_unavailable"]
    assert "no RAPL package zone" in RaplProbe(tmp_path).identity()["energy_unavailable"]


def test_cpu_rows_are_labelled_cpu_and_never_a_gpu():
    assert cpu_hardware_label("Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.00GHz") == "cpu:Intel_Xeon_Platinum_8480+"
    assert cpu_hardware_label("AMD EPYC 9654 96-Core Processor") == "cpu:AMD_EPYC_9654_96-Core"
    assert cpu_hardware_label(None) == "cpu:unknown"
    assert cpu_model_name()  # this machine's /proc/cpuinfo


def test_sampler_serves_rapl_energy(tmp_path):
    zone = _zone(tmp_path / "powercap", 0, 0)
    argv = harness_argv("sampler", "serve", "--probe", "rapl", "--rate-hz", "20", "--port", "0")
    svc = Service(argv, tmp_path / "sampler.log", {"HARNESS_POWERCAP_ROOT": str(tmp_path / "powercap")})
    try:
        url = svc.wait_url()
        for uj in range(1, 6):
            (zone / "energy_uj").write_text(f"{uj * 1_000_000}\n")
            time.sleep(0.1)
        time.sleep(0.2)
        state = httpx.get(f"{url}/v1/latest", timeout=5).json()
        info = httpx.get(f"{url}/v1/info", timeout=5).json()
    finally:
        svc.stop()
    assert state["energy_mj"] == 5_000.0 and state["name"] == cpu_model_name()
    assert "intel-rapl:0 (package-0)" in str(info), info
