"""Attention ops of the stand-in: paged decode and extend attention over sglang's token-to-KV pool.

The KV pool is one ``[slots, kv_heads, head_dim]`` buffer per layer; ``req_to_token[req, i]`` is the slot of token
``i`` of request ``req``. Both ops loop over the requests of the batch and compute each one's attention in float32
with plain tensor ops: correct, not fast (the models these tests serve are tiny)."""

from __future__ import annotations

import torch


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    visible: torch.Tensor | None,
    sm_scale: float,
    logit_cap: float,
    sinks: torch.Tensor | None,
) -> torch.Tensor:
    """Softmax attention of ``q`` [n, heads, d] over ``k``/``v`` [m, kv_heads, d]; ``visible`` is [n, m] bool or
    None (all visible). Grouped-query heads share their KV head. Returns [n, heads, dv] float32."""
    heads, kv_heads = q.shape[1], k.shape[1]
    if heads != kv_heads:
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
    scores = torch.einsum("nhd,mhd->hnm", q.float(), k.float()) * sm_scale
    if logit_cap and logit_cap > 0:
        scores = logit_cap * torch.tanh(scores / logit_cap)
    if visible is not None:
        scores = scores.masked_fill(~visible.unsqueeze(0), float("-inf"))
    if sinks is not None:
        sink = sinks.float().view(heads, 1, 1).expand(heads, scores.shape[1], 1)
        probs = torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1)
    return torch.einsum("hnm,mhd->nhd", probs, v.float())


def _window_mask(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int) -> torch.Tensor | None:
    """Keys within the sliding window of each query (``window`` = sglang's ``sliding_window_size + 1``; <= 0: off)."""
    if window is None or window <= 0:
        return None
    return (q_pos.view(-1, 1) - k_pos.view(1, -1)) < window


def decode_attention_cpu(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    key_scale: float,
    value_scale: float,
    o: torch.Tensor,
    k: torch.Tensor | None,
    v: torch.Tensor | None,
    loc: torch.Tensor,
    attn_logits: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float,
    logit_cap: float,
    is_cross_attention: bool = False,
    sliding_window: int = 0,
    encoder_lens: torch.Tensor | None = None,
    sinks: torch.Tensor | None = None,
) -> None:
    """Stands in for ``torch.ops.sgl_kernel.decode_attention_cpu`` (sglang/srt/layers/attention/intel_amx_backend.py
    ``IntelAMXAttnBackend.forward_decode``). First writes the new token's K/V (when given) to slot ``loc[b]`` (the
    real kernel does this write itself), then attends each query row over the first ``seq_lens[b]`` tokens of row
    ``req_pool_indices[b]`` of ``req_to_token``. Writes ``o`` in place; ``attn_logits`` (the real kernel's split-KV
    scratch) is not used."""
    del attn_logits, encoder_lens
    if is_cross_attention:
        raise NotImplementedError("sgl_kernel stand-in: cross attention is not supported")
    kv_heads = k_buffer.shape[1]
    if k is not None and v is not None:
        slots = loc.long().flatten()
        k_buffer[slots] = k.reshape(slots.numel(), kv_heads, -1).to(k_buffer.dtype)
        v_buffer[slots] = v.reshape(slots.numel(), kv_heads, -1).to(v_buffer.dtype)
    rows = req_pool_indices.long().tolist()
    lens = seq_lens.long().tolist()
    for b, (row, length) in enumerate(zip(rows, lens)):
        slots = req_to_token[row, :length].long()
        keys = k_buffer[slots].float() * key_scale
        values = v_buffer[slots].float() * value_scale
        pos = torch.arange(length)
        visible = _window_mask(pos[-1:], pos, sliding_window)
        out = _attend(q[b : b + 1], keys, values, visible, sm_scale, logit_cap, sinks)
        o[b] = out[0].to(o.dtype)


def extend_attention_cpu(
    q_extend: torch.Tensor,
    k_extend: torch.Tensor | None,
    v_extend: torch.Tensor | None,
    o_extend: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    key_scale: float,
    value_scale: float,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    extend_seq_lens: torch.Tensor,
    extend_start_loc: torch.Tensor,
    max_len_extend: int | None,
    sm_scale: float,
    logit_cap: float,
    is_cross_attention: bool = False,
    sliding_window: int = 0,
    encoder_lens: torch.Tensor | None = None,
    sinks: torch.Tensor | None = None,
    tree_mask: torch.Tensor | None = None,
    is_causal: bool = True,
) -> None:
    """Stands in for ``torch.ops.sgl_kernel.extend_attention_cpu`` (sglang/srt/layers/attention/intel_amx_backend.py
    ``IntelAMXAttnBackend.forward_extend``, prefill and EAGLE target verify). Request ``b`` has ``seq_lens[b]``
    tokens of which the last ``extend_seq_lens[b]`` are new, their queries at ``q_extend[extend_start_loc[b]:]``.
    The prefix K/V is read from the pool, the new tokens' from ``k_extend``/``v_extend`` (from the pool when those
    are None: ``set_kv_buffer`` has already written them there). The prefix is fully visible;
    among the new tokens visibility is causal, or, with ``tree_mask`` (EAGLE verify, QLEN_ONLY layout: ``[bs, n, n]``
    flattened, row = query, column = draft token), exactly what the mask allows. Writes ``o_extend`` in place."""
    del max_len_extend, encoder_lens
    if is_cross_attention:
        raise NotImplementedError("sgl_kernel stand-in: cross attention is not supported")
    rows = req_pool_indices.long().tolist()
    lens = seq_lens.long().tolist()
    ext_lens = extend_seq_lens.long().tolist()
    starts = extend_start_loc.long().tolist()
    have_new = k_extend is not None and v_extend is not None
    kv_heads = k_buffer.shape[1]
    mask_offset = 0
    for row, length, ext, start in zip(rows, lens, ext_lens, starts):
        prefix = length - ext
        slots = req_to_token[row, : prefix if have_new else length].long()
        keys = k_buffer[slots].float() * key_scale
        values = v_buffer[slots].float() * value_scale
        if have_new:
            new_k = k_extend[start : start + ext].reshape(ext, kv_heads, -1).float()
            new_v = v_extend[start : start + ext].reshape(ext, kv_heads, -1).float()
            keys, values = torch.cat((keys, new_k)), torch.cat((values, new_v))
        visible = torch.ones(ext, length, dtype=torch.bool)
        if tree_mask is not None:
            block = tree_mask.flatten()[mask_offset : mask_offset + ext * ext].view(ext, ext).bool()
            visible[:, prefix:] = block
            mask_offset += ext * ext
        elif is_causal:
            visible[:, prefix:] = torch.ones(ext, ext, dtype=torch.bool).tril()
        window = _window_mask(torch.arange(prefix, length), torch.arange(length), sliding_window)
        if window is not None:
            visible &= window
        out = _attend(q_extend[start : start + ext], keys, values, visible, sm_scale, logit_cap, sinks)
        o_extend[start : start + ext] = out.to(o_extend.dtype)
