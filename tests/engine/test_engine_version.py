"""sglang version auto-detection in the server's interpreter, the supported range, the twin's backend resolution."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from harness.core.errors import UsageError
from harness.engine.version import check_supported, detect_installed, resolve_version, version_tuple
from harness.grid import SpecConfig
from harness.twin.engine import sglang_args as ea


def interpreter_with_sglang(tmp: Path, version: str | None) -> str:
    """A real Python whose ``importlib.metadata`` sees an installed distribution ``sglang==version`` (or none)."""
    site = tmp / "site"
    site.mkdir()
    if version is not None:
        dist = site / f"sglang-{version}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    exe = tmp / "python"
    exe.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} -S "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


@pytest.mark.parametrize("version", ["0.5.2", "0.5.14", "0.5.23", "0.5.2.post1"])
def test_auto_reads_the_version_installed_for_that_interpreter(tmp_path, version):
    py = interpreter_with_sglang(tmp_path, version)
    assert detect_installed(py) == version
    assert resolve_version("auto", "sglang", py) == version


def test_outside_the_range_or_missing_is_a_clear_error(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with pytest.raises(UsageError, match=r"sglang 0\.5\.30 is outside the supported range 0\.5\.2 to 0\.5\.23") as exc:
        resolve_version("auto", "sglang", interpreter_with_sglang(tmp_path / "a", "0.5.30"))
    assert "SGLANG_TAG" in (exc.value.fix or "")
    with pytest.raises(UsageError, match="sglang is not installed for"):
        resolve_version("auto", "sglang", interpreter_with_sglang(tmp_path / "b", None))
    with pytest.raises(UsageError, match="no interpreter"):
        detect_installed(str(tmp_path / "nowhere" / "python"))
    with pytest.raises(UsageError, match="outside the supported range"):
        check_supported("0.4.10")


def test_twin_auto_is_its_default_emulation_and_only_emulated_versions():
    assert resolve_version("auto", "twin", "/nonexistent/python") == "0.5.2"
    assert resolve_version("0.5.23", "twin", "/nonexistent/python") == "0.5.23"
    with pytest.raises(UsageError, match="emulates"):
        resolve_version("0.5.14", "twin", sys.executable)


def test_version_tuple():
    assert version_tuple("0.5.23") == (0, 5, 23) and version_tuple("v0.5.2.post1") == (0, 5, 2)
    assert version_tuple("0.5.20rc1") == (0, 5, 20) and version_tuple("main") == ()


def test_twin_resolves_the_backend_real_sglang_would():
    ada, hopper, blackwell = (8, 9), (9, 0), (10, 0)
    base, chain, tree = SpecConfig(0, 0, 0), SpecConfig(3, 1, 4), SpecConfig(3, 4, 8)
    for v in ("0.5.2", "0.5.23"):
        assert {ea.resolved_attention_backend(None, c, ada, v) for c in (base, chain, tree)} == {"flashinfer"}
        assert [ea.resolved_attention_backend(None, c, hopper, v) for c in (base, chain, tree)] == [
            "fa3",
            "fa3",
            "flashinfer",
        ]
        assert {ea.resolved_attention_backend("flashinfer", c, hopper, v) for c in (base, chain, tree)} == {
            "flashinfer"
        }
    assert ea.resolved_attention_backend(None, chain, blackwell, "0.5.23") == "trtllm_mha"
    assert ea.resolved_attention_backend(None, chain, blackwell, "0.5.2") == "flashinfer"
    with pytest.raises(ea.SpecRejected, match="only supported on Blackwell"):
        ea.check_backend_hardware("trtllm_mha", ada)
    ea.check_backend_hardware("trtllm_mha", blackwell)
