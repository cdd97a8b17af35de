"""Names sglang binds at import time on its CPU path (``x = torch.ops.sgl_kernel.name`` at module level) in modules
the server imports, but which a Llama target with an EAGLE3 draft never calls. They must exist for the imports to
succeed; calling one raises NotImplementedError. None of them is a name sglang feature-probes with ``hasattr``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

# name -> the sglang module that binds it at import time
IMPORT_TIME_NAMES: dict[str, str] = {
    "apply_rotary_pos_emb_cpu": "sglang/srt/layers/rotary_embedding/utils.py",
    "conv3d_embed_cpu": "sglang/srt/layers/conv.py",
    "flash_attn_varlen_func": "sglang/srt/layers/attention/vision.py",
}


def make_stub(name: str) -> Callable[..., Any]:
    """A function that refuses to run, naming the op and the stand-in."""

    def stub(*args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(
            f"sgl_kernel stand-in: {name} (bound by {IMPORT_TIME_NAMES[name]}) is not implemented; "
            "only the ops a Llama target with an EAGLE3 draft needs are"
        )

    stub.__name__ = name
    stub.__doc__ = f"Placeholder for ``torch.ops.sgl_kernel.{name}``, bound at import by {IMPORT_TIME_NAMES[name]}."
    return stub
