"""Dense-layer ops of the stand-in: what sglang's ``intel_amx`` path calls for linear layers, norms, activations
and rotary embeddings. Every op computes in float32 and returns the input dtype."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def convert_weight_packed(weight: torch.Tensor) -> torch.Tensor:
    """Stands in for ``torch.ops.sgl_kernel.convert_weight_packed`` (sglang/srt/layers/amx_utils.py,
    ``amx_process_weight_after_loading``): the real op repacks a weight into the AMX VNNI layout. The stand-in keeps
    the plain ``[out, in]`` layout, so it returns the weight unchanged."""
    return weight


def weight_packed_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, is_vnni: bool = True
) -> torch.Tensor:
    """Stands in for ``torch.ops.sgl_kernel.weight_packed_linear`` (sglang/srt/layers/quantization/unquant.py
    ``UnquantizedLinearMethod.apply`` and the LM head in sglang/srt/layers/logits_processor.py): ``x @ weight.T +
    bias`` with the unpacked weight (see ``convert_weight_packed``), accumulated in float32."""
    del is_vnni
    out = F.linear(x.float(), weight.float(), None if bias is None else bias.float())
    return out.to(x.dtype)


def rmsnorm_cpu(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Stands in for ``torch.ops.sgl_kernel.rmsnorm_cpu`` (sglang/srt/layers/layernorm.py ``RMSNorm.forward_cpu``):
    ``x / sqrt(mean(x^2) + eps) * weight``."""
    xf = x.float()
    out = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    return out.to(x.dtype)


def fused_add_rmsnorm_cpu(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """Stands in for ``torch.ops.sgl_kernel.fused_add_rmsnorm_cpu`` (sglang/srt/layers/layernorm.py
    ``RMSNorm.forward_cpu`` with a residual). In place: ``residual += x`` then ``x = rmsnorm(residual)``."""
    summed = x.float() + residual.float()
    residual.copy_(summed.to(residual.dtype))
    normed = summed * torch.rsqrt(summed.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    x.copy_(normed.to(x.dtype))


def silu_and_mul_cpu(x: torch.Tensor) -> torch.Tensor:
    """Stands in for ``torch.ops.sgl_kernel.silu_and_mul_cpu`` (sglang/srt/layers/activation.py
    ``SiluAndMul.forward_cpu``): ``silu(x[..., :d]) * x[..., d:]`` with ``d = x.shape[-1] // 2``."""
    d = x.shape[-1] // 2
    xf = x.float()
    return (F.silu(xf[..., :d]) * xf[..., d:]).to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    """Apply the rotation to ``x`` ([tokens, heads, rot_dim], float32); cos/sin are [tokens, 1, rot_dim // 2]."""
    if is_neox:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)


def rotary_embedding_cpu(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Stands in for ``torch.ops.sgl_kernel.rotary_embedding_cpu`` (sglang/srt/layers/rotary_embedding/base.py
    ``RotaryEmbedding.forward_cpu``). ``cos_sin_cache[pos]`` holds ``rot_dim // 2`` cosines then as many sines; the
    first ``rot_dim`` channels of every head are rotated (NeoX halves or GPT-J interleaved pairs), the rest pass.
    Returns new (query, key) shaped like the inputs."""
    cos_sin = cos_sin_cache.index_select(0, positions.flatten().long()).float()
    cos, sin = cos_sin.chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    rot_dim = cos_sin.shape[-1]

    def apply(t: torch.Tensor) -> torch.Tensor:
        heads = t.reshape(positions.numel(), -1, head_size).float()
        rotated = _rotate(heads[..., :rot_dim], cos, sin, is_neox)
        out = torch.cat((rotated, heads[..., rot_dim:]), dim=-1)
        return out.to(t.dtype).reshape(t.shape)

    return apply(query), (None if key is None else apply(key))


def init_cpu_threads_env(cpu_ids: str) -> str:
    """Stands in for ``torch.ops.sgl_kernel.init_cpu_threads_env`` (sglang/srt/distributed/bootstrap.py
    ``_init_cpu_threads_env``): the real op pins one OpenMP thread per listed core. The stand-in only sets torch's
    thread count to the number of listed cores (``"0-3,8"`` style lists) and pins nothing."""
    count = 0
    for part in str(cpu_ids or "").split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        count += (int(hi) - int(lo) + 1) if hi else 1
    if count > 0:
        torch.set_num_threads(count)
    return ""


def initialize(size: int, rank: int) -> None:
    """Stands in for ``torch.ops.sgl_kernel.initialize`` (sglang/srt/distributed/bootstrap.py): the real op sets
    up shared-memory all-reduce between tensor-parallel ranks. One rank needs none: a no-op."""
    del size, rank
