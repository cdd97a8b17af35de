"""Which official sglang image (``lmsysorg/sglang:<tag>``) carries a given sglang version, and the driver it needs.

The one place the tag rule lives. sglang's images changed CUDA lane with the version: the install docs
(``docs/docs/get-started/install.mdx``) say ``v0.5.19-cu129`` is the last CUDA 12 tag, and the 0.5.20+ wheels require
``torch`` built for CUDA 13 (0.5.23: ``torch==2.14.1``, ``flashinfer_python[cu13]``, ``cuda-python>=13``), so their
images are ``v0.5.2x-cu130`` (observed: ``v0.5.20-cu130``, torch 2.13.0+cu130). A ``v0.5.23-cu129`` cannot exist.
The project's default, ``v0.5.2-cu126``, is the published system's image. Minimum drivers are NVIDIA's CUDA release
notes (table 3, Linux x86_64, the toolkit's own driver): a CUDA 13 image on an older driver fails at the first CUDA
call inside the container, long after the build.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.core.errors import UsageError
from harness.engine.version import SUPPORTED_RANGE, supported_text, version_tuple

_CUDA_LANES: tuple[tuple[tuple[int, ...], str, str, str], ...] = (
    # first sglang version of the lane, tag suffix, CUDA, minimum Linux driver
    ((0, 5, 2), "cu126", "12.6", "560.28.03"),
    ((0, 5, 3), "cu129", "12.9", "575.51.03"),
    ((0, 5, 20), "cu130", "13.0", "580.65.06"),
)


@dataclass(frozen=True)
class SglangImage:
    """The official image for one sglang version."""

    version: str
    tag: str
    cuda: str
    min_driver: str

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
    lane = [entry for entry in _CUDA_LANES if entry[0] <= vt][-1]
    clean = ".".join(str(part) for part in vt)
    return SglangImage(version=clean, tag=f"v{clean}-{lane[1]}", cuda=lane[2], min_driver=lane[3])


def driver_ok(driver: str, image: SglangImage) -> bool:
    """Whether an NVIDIA driver version string (``nvidia-smi``'s ``580.95.05``) can run ``image``."""
    return version_tuple(driver) >= version_tuple(image.min_driver)


DEFAULT_IMAGE = sglang_image(SUPPORTED_RANGE[0])
"""The compose default (``SGLANG_TAG``): the published system's sglang 0.5.2."""
