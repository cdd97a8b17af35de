"""Which official sglang image (``lmsysorg/sglang:<tag>``) carries a given sglang version, and the driver it needs.

The one place the tag rule lives. sglang's images changed CUDA lane with the version: the install docs
(``docs/docs/get-started/install.mdx``) say ``v0.5.19-cu129`` is the last CUDA 12 tag, and the 0.5.20+ wheels require
``torch`` built for CUDA 13 (0.5.23: ``torch==2.14.1``, ``flashinfer_python[cu13]``, ``cuda-python>=13``), so their
images are ``v0.5.2x-cu130`` (observed: ``v0.5.20-cu130``, torch 2.13.0+cu130). A ``v0.5.23-cu129`` cannot exist.
The project's default, ``v0.5.2-cu126``, is the published system's image. A post release keeps its suffix in the
tag (``v0.5.12.post1-cu129``, as sglang publishes e.g. ``v0.4.6.post4-cu124``).

The driver a lane needs is NVIDIA's minor-version-compatibility floor of its CUDA major
(``docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html``, table 1: CUDA 12.x on drivers
>= 525, CUDA 13.x on >= 580): a CUDA 12 image runs on the 535/550/570 datacenter branches, with the limits that page
states (no PTX JIT of PTX newer than the driver) below the toolkit's own driver (the release notes' table 3, also
reported). A CUDA 13 image on a pre-580 driver fails at the first CUDA call inside the container, long after the
build.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.core.errors import UsageError
from harness.engine.version import SUPPORTED_RANGE, supported_text, version_tuple

_CUDA_LANES: tuple[tuple[tuple[int, ...], str, str, str, str], ...] = (
    # first sglang version of the lane, tag suffix, CUDA, minimum Linux driver (minor version compatibility),
    # the toolkit's own driver
    ((0, 5, 2), "cu126", "12.6", "525.60.13", "560.28.03"),
    ((0, 5, 3), "cu129", "12.9", "525.60.13", "575.51.03"),
    ((0, 5, 20), "cu130", "13.0", "580.65.06", "580.65.06"),
)
POST = re.compile(r"^v?\d+\.\d+\.\d+(\.post\d+)?$")
"""A version the tag rule spells: ``0.5.12`` or ``0.5.12.post1`` (a leading ``v`` allowed)."""


@dataclass(frozen=True)
class SglangImage:
    """The official image for one sglang version."""

    version: str
    tag: str
    cuda: str
    min_driver: str
    """The oldest driver that runs the image (the CUDA major's minor-version-compatibility floor)."""
    toolkit_driver: str
    """The CUDA toolkit's own driver: below it (and at or above ``min_driver``) the image runs under minor version
    compatibility."""

    @property
    def image(self) -> str:
        return f"lmsysorg/sglang:{self.tag}"


def sglang_image(version: str) -> SglangImage:
    """The image tag, CUDA version and minimum driver for sglang ``version`` (inside the supported range)."""
    vt = version_tuple(version)
    if len(vt) < 3 or not version_tuple(SUPPORTED_RANGE[0]) <= vt <= version_tuple(SUPPORTED_RANGE[1]):
        raise UsageError(
            f"sglang {version!r} is outside the supported range {supported_text()}",
            fix=f"pick a version from {supported_text()}, e.g. harness image-tag {SUPPORTED_RANGE[1]}",
        )
    match = POST.match(version.strip())
    if match is None:
        raise UsageError(
            f"sglang {version!r} is not a release the images are tagged by",
            fix="give MAJOR.MINOR.PATCH, or MAJOR.MINOR.PATCH.postN for a post release (e.g. 0.5.12.post1)",
        )
    lane = [entry for entry in _CUDA_LANES if entry[0] <= vt][-1]
    clean = ".".join(str(part) for part in vt) + (match.group(1) or "")
    return SglangImage(
        version=clean, tag=f"v{clean}-{lane[1]}", cuda=lane[2], min_driver=lane[3], toolkit_driver=lane[4]
    )


def driver_ok(driver: str, image: SglangImage) -> bool:
    """Whether an NVIDIA driver version string (``nvidia-smi``'s ``580.95.05``) can run ``image``."""
    return version_tuple(driver) >= version_tuple(image.min_driver)


def minor_compat(driver: str, image: SglangImage) -> bool:
    """Whether ``driver`` runs ``image`` only under CUDA minor version compatibility (below the toolkit's driver)."""
    return driver_ok(driver, image) and version_tuple(driver) < version_tuple(image.toolkit_driver)


DEFAULT_IMAGE = sglang_image(SUPPORTED_RANGE[0])
"""The compose default (``SGLANG_TAG``): the published system's sglang 0.5.2."""
