"""The sglang image tag rule (issue 39 item 2): one place, the CUDA lane by version, every documented tag obeys it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.errors import UsageError
from harness.engine.image_tags import DEFAULT_IMAGE, driver_ok, minor_compat, sglang_image

ROOT = Path(__file__).resolve().parents[2]
TAG = re.compile(r"lmsysorg/sglang:(v0\.5\.\d+-cu\d+)|SGLANG_TAG[=:]-?(v0\.5\.\d+-cu\d+)")


@pytest.mark.parametrize(
    ("version", "tag", "cuda"),
    [
        ("0.5.2", "v0.5.2-cu126", "12.6"),
        ("0.5.3", "v0.5.3-cu129", "12.9"),
        ("0.5.19", "v0.5.19-cu129", "12.9"),
        ("0.5.20", "v0.5.20-cu130", "13.0"),
        ("0.5.23", "v0.5.23-cu130", "13.0"),
        ("v0.5.23.post1", "v0.5.23.post1-cu130", "13.0"),
        ("0.5.12.post1", "v0.5.12.post1-cu129", "12.9"),  # issue 46 (4): the .postN was dropped
    ],
)
def test_the_cuda_lane_follows_the_version(version: str, tag: str, cuda: str) -> None:
    image = sglang_image(version)
    assert (image.tag, image.cuda) == (tag, cuda)
    assert image.image == f"lmsysorg/sglang:{tag}"


def test_cuda_13_images_need_a_cuda_13_driver_and_cuda_12_ones_run_from_525() -> None:
    """NVIDIA's minor version compatibility (cuda-compatibility/minor-version-compatibility.html, table 1): CUDA
    12.x runs on drivers >= 525, CUDA 13.x on >= 580. The 550 and 570 datacenter branches used to be refused for the
    CUDA 12 images (issue 46, item 4)."""
    new, old, default = sglang_image("0.5.23"), sglang_image("0.5.19"), sglang_image("0.5.2")
    assert not driver_ok("575.57.08", new) and driver_ok("580.95.05", new)
    assert driver_ok("575.57.08", old) and driver_ok("570.86.15", old) and driver_ok("550.54.15", default)
    assert not driver_ok("520.61.05", default) and not minor_compat("580.95.05", new)
    assert minor_compat("550.54.15", old) and not minor_compat("575.51.03", old)


def test_a_version_the_images_are_not_tagged_by_is_refused() -> None:
    with pytest.raises(UsageError, match="not a release the images are tagged by"):
        sglang_image("0.5.23rc1")


@pytest.mark.parametrize("version", ["0.5.1", "0.5.24", "0.6.0", "latest", ""])
def test_versions_outside_the_range_are_refused(version: str) -> None:
    with pytest.raises(UsageError, match="outside the supported range"):
        sglang_image(version)


def test_every_documented_and_shipped_tag_obeys_the_rule() -> None:
    """README, docs, compose and the Dockerfile name only tags the rule gives (no ``v0.5.23-cu129``)."""
    files = [ROOT / "README.md", ROOT / "compose.yaml", ROOT / "Dockerfile", *sorted((ROOT / "docs").glob("*.md"))]
    seen: dict[str, str] = {}
    for path in files:
        for match in TAG.finditer(path.read_text(encoding="utf-8")):
            tag = match.group(1) or match.group(2)
            seen[tag] = path.name
    assert DEFAULT_IMAGE.tag in seen
    wrong = {tag: where for tag, where in seen.items() if sglang_image(tag.split("-")[0]).tag != tag}
    assert not wrong, f"tags that do not exist under the rule: {wrong}"


def test_the_compose_and_dockerfile_defaults_are_the_rules_default() -> None:
    compose = (ROOT / "compose.yaml").read_text(encoding="utf-8")
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert f"SGLANG_TAG:-{DEFAULT_IMAGE.tag}" in compose
    assert f"ARG SGLANG_TAG={DEFAULT_IMAGE.tag}" in dockerfile


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", "image-tag", *args], capture_output=True, text=True)


def test_the_cli_prints_the_tag_and_checks_a_driver() -> None:
    done = _cli("0.5.23")
    assert done.returncode == 0 and done.stdout.strip() == "v0.5.23-cu130"
    assert "580.65.06" in done.stderr
    old = _cli("0.5.23", "--driver", "575.57.08")
    assert old.returncode == 2 and "error: driver 575.57.08 is older than the 580.65.06" in old.stderr
    assert "Traceback" not in old.stderr
    bad = _cli("0.7")
    assert bad.returncode == 2 and "outside the supported range" in bad.stderr
    compat = _cli("0.5.19", "--driver", "550.54.15")
    assert compat.returncode == 0 and compat.stdout.strip() == "v0.5.19-cu129", compat.stderr
    assert "minor version compatibility" in compat.stderr and "575.51.03" in compat.stderr
