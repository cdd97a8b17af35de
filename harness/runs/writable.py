"""Whether this user can write where a run writes: its run folder and the caches its engines fill.

A sweep once run as root (the old ``sweep-settings`` compose service) leaves root-owned folders behind: the run
folder, ``~/.cache/sglang`` (sglang 0.5.23's flashinfer JIT workspace and its file locks), new
``huggingface/hub/models--*`` folders. A later sweep as uid 1000 then turns every cell into a launch-error row (no
kernel built, no lock taken, no model downloaded). ``unwritable`` finds such paths from their owner and mode bits
(ACLs aside), before the first launch, so the refusal names them, their owner, and the one ``chown`` that fixes them.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterable

from harness.core.errors import OutputError

ENGINE_CACHES = ("sglang", "flashinfer", "huggingface", "triton", "torchinductor", "nv", "vllm", "torch_extensions")
"""The folders under the cache root that the engines (and their kernels' JIT) write."""
CACHE_ENV = ("HF_HOME", "HF_HUB_CACHE", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH")
"""Variables that move one of those folders elsewhere."""
DEPTH = 3
"""How deep under each root to look (``huggingface/hub/models--org--name``), files included (sglang's lock files)."""


def can_write(st: os.stat_result, uid: int, gids: set[int]) -> bool:
    """Whether ``uid`` (with groups ``gids``) may write what ``st`` describes, from owner and mode bits (root may)."""
    if uid == 0:
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IWUSR)
    if st.st_gid in gids:
        return bool(st.st_mode & stat.S_IWGRP)
    return bool(st.st_mode & stat.S_IWOTH)


def _walk(root: Path, depth: int) -> Iterable[Path]:
    yield root
    if depth <= 0 or root.is_symlink() or not root.is_dir():
        return
    try:
        children = sorted(root.iterdir())
    except OSError:
        return
    for child in children:
        yield from _walk(child, depth - 1)


def unwritable(
    roots: Iterable[Path], uid: int | None = None, gids: set[int] | None = None, depth: int = DEPTH
) -> list[tuple[Path, int]]:
    """The existing paths under ``roots`` (to ``depth``) that ``uid`` cannot write, with their owner's uid."""
    uid = os.geteuid() if uid is None else uid
    gids = {os.getegid(), *os.getgroups()} if gids is None else gids
    out = []
    for root in roots:
        for path in _walk(root, depth):
            try:
                st = path.lstat()
            except OSError:
                continue
            if not stat.S_ISLNK(st.st_mode) and not can_write(st, uid, gids):
                out.append((path, st.st_uid))
    return out


def engine_cache_roots(env: dict[str, str] | None = None) -> list[Path]:
    """The cache folders the engines write: those of ``ENGINE_CACHES`` under ``XDG_CACHE_HOME`` (``~/.cache``) and
    the ones ``CACHE_ENV`` names. With ``HF_HUB_OFFLINE=1`` the model cache is only read (a shared read-only cache of
    a cluster is fine), so it is left out."""
    env = dict(os.environ) if env is None else env
    base = Path(env.get("XDG_CACHE_HOME") or Path(env.get("HOME") or Path.home()) / ".cache")
    offline = str(env.get("HF_HUB_OFFLINE", "")).strip().lower() in ("1", "true", "yes", "on")
    names = [n for n in ENGINE_CACHES if not (offline and n == "huggingface")]
    hf_vars = ("HF_HOME", "HF_HUB_CACHE")
    roots = [base / name for name in names] + [
        Path(env[k]) for k in CACHE_ENV if env.get(k) and not (offline and k in hf_vars)
    ]
    return list(dict.fromkeys(roots))


def check_writable(roots: Iterable[Path], what: str, uid: int | None = None, gids: set[int] | None = None) -> None:
    """Refuse (``OutputError``) when this user cannot write a path under ``roots``, naming the first few, their
    owner and the fix."""
    uid = os.geteuid() if uid is None else uid
    bad = unwritable(roots, uid, gids)
    if not bad:
        return
    shown = ", ".join(f"{p} (owner uid {owner})" for p, owner in bad[:3]) + (
        f" and {len(bad) - 3} more" if len(bad) > 3 else ""
    )
    tops = " ".join(sorted({str(p) for p, _ in bad if not any(str(p).startswith(str(q) + "/") for q, _ in bad)})[:4])
    raise OutputError(
        f"uid {uid} cannot write {what}: {shown}; a run as root (an older sweep-settings service) leaves such "
        "folders behind, and every cell would fail to build a kernel, take a lock or download a model",
        fix=f"give them back to uid {uid}: sudo chown -R {uid}:{uid} {tops} (in compose: docker compose run --rm "
        f"--user 0:0 --entrypoint chown sweep -R {uid}:{uid} /home/harness/.cache /work/results); power caps and "
        'clocks need no root sweep: see docs/powercap.md, "The settings agent"',
    )
