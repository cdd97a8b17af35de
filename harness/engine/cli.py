"""``harness image-tag``: the official sglang image for a version, and the NVIDIA driver it needs."""

from __future__ import annotations

import typer


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    @app.command("image-tag")
    def image_tag(
        version: str = typer.Argument(..., help="sglang version, e.g. 0.5.23."),
        driver: str = typer.Option("", "--driver", help="Your NVIDIA driver (nvidia-smi's Driver Version) to check."),
    ) -> None:
        """Print the lmsysorg/sglang tag for an sglang version (use as SGLANG_TAG) and the driver it needs."""
        from rich.console import Console

        from harness.core.errors import UsageError
        from harness.engine.image_tags import driver_ok, minor_compat, sglang_image

        image = sglang_image(version)
        typer.echo(image.tag)
        note = Console(emoji=False, stderr=True, highlight=False, markup=False)
        note.print(
            f"{image.image}: CUDA {image.cuda}, needs an NVIDIA driver >= {image.min_driver} "
            f"(the CUDA toolkit's own: {image.toolkit_driver})"
        )
        note.print(f"use it: SGLANG_TAG={image.tag} docker compose up sweep")
        if driver and not driver_ok(driver, image):
            raise UsageError(
                f"driver {driver} is older than the {image.min_driver} that CUDA {image.cuda} ({image.tag}) needs",
                fix=f"upgrade the NVIDIA driver to {image.min_driver} or newer, or pick an sglang whose image your "
                "driver runs (0.5.19 is the last CUDA 12 image, which drivers from 525.60.13 on run)",
            )
        if driver and minor_compat(driver, image):
            note.print(
                f"driver {driver} runs CUDA {image.cuda} under minor version compatibility (below the toolkit's "
                f"{image.toolkit_driver}): kernels built for the GPU run; PTX newer than the driver cannot be JIT-compiled"
            )
