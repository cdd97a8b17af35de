"""EAGLE tree ops of the stand-in: build the draft token tree, verify it greedily against the target's argmax, and
lay out the per-branch KV rows the multi-step draft decode attends over. Plain Python loops over small lists,
written from sglang's Triton reference kernels (sglang/kernels/ops/speculative/spec_tree.py and cache_locs.py)."""

from __future__ import annotations

import torch

_FULL_MASK = 0  # sglang TreeMaskMode.FULL_MASK; QLEN_ONLY = 1 is what the CPU path uses


def _parent_position(selected: list[int], parents: list[int], index: int, topk: int) -> int | None:
    """Tree position (1-based among the draft tokens, 0 = the verified root) of draft token ``index``'s parent,
    or None when the parent is not among the selected tokens."""
    parent_tb = selected[index] // topk
    if parent_tb == 0:
        return 0
    parent_token = parents[parent_tb]
    for pos, sel in enumerate(selected):
        if sel == parent_token:
            return pos + 1
    return None


def build_tree_kernel_efficient_cpu(
    parent_list: torch.Tensor,
    selected_index: torch.Tensor,
    verified_seq_len: torch.Tensor,
    tree_mask: torch.Tensor,
    positions: torch.Tensor,
    retrieve_index: torch.Tensor,
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
    topk: int,
    depth: int,
    draft_token_num: int,
    tree_mask_mode: int = 1,
) -> None:
    """Stands in for ``build_tree_kernel_efficient_cpu`` (sglang/kernels/ops/speculative/spec_tree.py
    ``build_tree_kernel_efficient_func``; Triton reference ``sgl_build_tree_kernel_efficient_triton``). For each
    request: the retrieve index (flat token ids), first-child / next-sibling links, each token's position (prefix
    length + depth) and its tree-mask row (the root and its own ancestors-or-self among the draft tokens). All
    outputs are written in place; the mask is ``[bs, n, n]`` (QLEN_ONLY) or ``[n, prefix + n]`` rows per request
    (FULL_MASK)."""
    n = draft_token_num
    mode = int(tree_mask_mode)
    seq_lens = verified_seq_len.tolist()
    mask_flat = tree_mask.view(-1)
    ridx = retrieve_index.view(-1, n)
    rnext = retrieve_next_token.view(-1, n)
    rsib = retrieve_next_sibling.view(-1, n)
    pos_out = positions.view(-1, n)
    prefix_sum = 0
    for b, seq_len in enumerate(seq_lens):
        selected = selected_index[b].tolist()[: n - 1]
        parents = parent_list[b].tolist() if parent_list.dim() > 1 else parent_list.tolist()
        ridx[b, 0] = b * n
        pos_out[b, 0] = seq_len
        for i in range(n - 1, 0, -1):
            ridx[b, i] = b * n + i
            parent = _parent_position(selected, parents, i - 1, topk)
            if parent is None:
                continue
            first_child = int(rnext[b, parent])
            rnext[b, parent] = i
            if first_child != -1:
                rsib[b, i] = first_child
        for x in range(n):
            if mode == _FULL_MASK:
                row = n * n * b + prefix_sum * n + (seq_len + n) * x + seq_len
            else:
                row = n * n * b + n * x
            mask_flat[row : row + n] = False
            mask_flat[row] = True
            if x == 0:
                continue
            cur, depth_of_x = x - 1, 0
            for _ in range(depth):
                depth_of_x += 1
                mask_flat[row + 1 + cur] = True
                parent = _parent_position(selected, parents, cur, topk)
                if parent is None or parent == 0:
                    break
                cur = parent - 1
            pos_out[b, x] = seq_len + depth_of_x
        prefix_sum += seq_len


def verify_tree_greedy_cpu(
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    target_predict: torch.Tensor,
) -> None:
    """Stands in for ``verify_tree_greedy_cpu`` (sglang/kernels/ops/speculative/spec_tree.py
    ``verify_tree_greedy_func``; Triton reference ``verify_tree_greedy_kernel_triton``). Walks each request's tree
    from the root: at every level the child whose draft token equals the target's argmax at the last accepted node
    is accepted. Writes the accepted flat indices to ``accept_index`` (row starts with the root), their count
    (without the root) to ``accept_token_num`` and the target's tokens at the accepted nodes to ``predicts``."""
    bs, n = candidates.shape[0], candidates.shape[1]
    steps = accept_index.shape[1]
    cand = candidates.view(bs, n).tolist()
    ridx = retrive_index.view(bs, n).tolist()
    rnext = retrive_next_token.view(bs, n).tolist()
    rsib = retrive_next_sibling.view(bs, n).tolist()
    target = target_predict.view(-1).tolist()
    pred_flat = predicts.view(-1)
    for b in range(bs):
        last = ridx[b][0]
        accept_index[b, 0] = last
        accepted = 0
        cur = 0
        for _ in range(1, steps):
            cur = rnext[b][cur]
            want = target[last]
            matched = False
            while cur != -1:
                if cand[b][cur] == want:
                    pred_flat[last] = want
                    accepted += 1
                    accept_index[b, accepted] = ridx[b][cur]
                    last = ridx[b][cur]
                    matched = True
                    break
                cur = rsib[b][cur]
            if not matched:
                break
        accept_token_num[b] = accepted
        pred_flat[last] = target[last]


def build_draft_decode_metadata_cpu(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    topk: int,
    num_steps: int,
    pool_len: int,
) -> torch.Tensor:
    """Stands in for ``build_draft_decode_metadata_cpu`` (sglang/srt/layers/attention/intel_amx_backend.py
    ``IntelAMXMultiStepDraftBackend.init_forward_metadata``; the GPU counterpart is Triton
    ``generate_draft_decode_kv_indices``). Returns a ``[bs * topk, pool_len]`` table whose row ``b * topk + j`` is
    request ``b``'s prefix (``seq_lens[b]`` slots) followed by branch ``j``'s draft slots, which the draft cache
    layout keeps at ``seq_lens[b] + j * num_steps + step`` of the request's own row."""
    rows = req_pool_indices.long().tolist()
    lens = seq_lens.long().tolist()
    out = torch.zeros((len(rows) * topk, pool_len), dtype=req_to_token.dtype)
    for b, (row, length) in enumerate(zip(rows, lens)):
        for j in range(topk):
            dst = out[b * topk + j]
            dst[:length] = req_to_token[row, :length]
            start = length + j * num_steps
            dst[length : length + num_steps] = req_to_token[row, start : start + num_steps]
    return out
