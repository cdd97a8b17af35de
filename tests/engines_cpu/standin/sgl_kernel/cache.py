"""Cache-slot bookkeeping ops of the stand-in: copies between ``req_to_token`` rows and flat ``out_cache_loc``
lists, the bonus-token and accepted-slot gathers after EAGLE verify, and the KV move between slots."""

from __future__ import annotations

import ctypes

import torch


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Stands in for ``assign_req_to_token_pool_cpu`` (sglang/srt/mem_cache/allocation.py
    ``assign_req_to_token_pool_func``; Triton reference ``assign_req_to_token_pool`` there). For each request ``b``
    in order: ``req_to_token[req_pool_indices[b], start[b]:end[b]]`` = the next ``end[b] - start[b]`` entries of
    ``out_cache_loc``."""
    del pool_len
    offset = 0
    for row, start, end in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist()):
        n = end - start
        req_to_token[row, start:end] = out_cache_loc[offset : offset + n].to(req_to_token.dtype)
        offset += n


def assign_extend_cache_locs_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Stands in for ``assign_extend_cache_locs_cpu`` (sglang/kernels/ops/speculative/cache_locs.py
    ``assign_extend_cache_locs_func`` and ``fill_front_out_cache_loc_func``; Triton reference
    ``assign_extend_cache_locs``): the reverse copy, ``req_to_token[row, start:end]`` appended to ``out_cache_loc``."""
    del pool_len
    offset = 0
    for row, start, end in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist()):
        n = end - start
        out_cache_loc[offset : offset + n] = req_to_token[row, start:end].to(out_cache_loc.dtype)
        offset += n


def assign_draft_cache_locs_contiguous_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
    topk: int,
    num_steps: int,
) -> None:
    """Stands in for ``assign_draft_cache_locs_contiguous_cpu`` (sglang/kernels/ops/speculative/cache_locs.py
    ``assign_draft_cache_locs_contiguous_func``; Triton reference ``assign_draft_cache_locs_contiguous``): request
    ``b``'s ``topk * num_steps`` draft slots, read from its row just past ``seq_lens[b]``."""
    del pool_len
    width = topk * num_steps
    for b, (row, length) in enumerate(zip(req_pool_indices.tolist(), seq_lens.tolist())):
        out_cache_loc[b * width : (b + 1) * width] = req_to_token[row, length : length + width].to(out_cache_loc.dtype)


def fill_bonus_tokens_cpu(
    accept_tokens: torch.Tensor, accept_lens: torch.Tensor, bonus_tokens: torch.Tensor, accept_stride: int
) -> None:
    """Stands in for ``fill_bonus_tokens_cpu`` (sglang/kernels/ops/speculative/eagle.py ``fill_bonus_tokens_func``;
    Triton reference ``fill_bonus_tokens``): ``bonus[b] = accept_tokens.flat[stride * b + accept_lens[b] - 1]``."""
    flat = accept_tokens.flatten()
    for b, n in enumerate(accept_lens.tolist()):
        bonus_tokens[b] = flat[accept_stride * b + n - 1]


def fill_accept_out_cache_loc_cpu(
    accept_index: torch.Tensor, out_cache_loc: torch.Tensor, accept_out_cache_loc: torch.Tensor
) -> None:
    """Stands in for ``fill_accept_out_cache_loc_cpu`` (sglang/kernels/ops/speculative/eagle.py
    ``fill_accept_out_cache_loc_func``; Triton reference ``fill_accept_out_cache_loc``): the slots of the accepted
    tokens (``accept_index != -1``, in order) packed to the front of ``accept_out_cache_loc``."""
    flat = accept_index.flatten().long()
    picked = flat[flat != -1]
    accept_out_cache_loc[: picked.numel()] = out_cache_loc[picked].to(accept_out_cache_loc.dtype)


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor, src_loc: torch.Tensor
) -> None:
    """Stands in for ``copy_all_layer_kv_cache_cpu`` (sglang/kernels/ops/kvcache/cache_move.py
    ``copy_all_layer_kv_cache_func``, used by ``MHATokenToKVPool.move_kv_cache``; Triton reference
    ``copy_all_layer_kv_cache_tiled``). ``data_ptrs`` holds the base address of every K and V buffer and ``strides``
    the bytes of one slot in it; slot ``src_loc[i]`` is copied to ``tgt_loc[i]`` in every buffer. Like the
    reference it reads all sources before writing, so overlapping moves are safe."""
    src = src_loc.long().tolist()
    tgt = tgt_loc.long().tolist()
    for base, stride in zip(data_ptrs.long().tolist(), strides.long().tolist()):
        rows = [ctypes.string_at(base + s * stride, stride) for s in src]
        for t, row in zip(tgt, rows):
            ctypes.memmove(base + t * stride, row, stride)


def store_cache_cpu(
    k: torch.Tensor,
    v: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    indices: torch.Tensor,
    row_dim: int,
) -> None:
    """Stands in for ``torch.ops.sgl_kernel.store_cache_cpu`` (sglang/srt/mem_cache/memory_pool.py
    ``_set_kv_buffer_impl``, the KV write of ``set_kv_buffer``): rows of ``row_dim`` (= heads * head_dim) values of
    ``k`` and ``v`` written to slots ``indices`` of the caches."""
    slots = indices.long().flatten()
    k_cache.view(-1, row_dim)[slots] = k.reshape(-1, row_dim).to(k_cache.dtype)
    v_cache.view(-1, row_dim)[slots] = v.reshape(-1, row_dim).to(v_cache.dtype)
