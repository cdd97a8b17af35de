"""A tiny deterministic tokenizer and filler-text generator for the twin engine.

Prompt tokens: one token per word-piece of at most 4 characters (words split into 4-char pieces, punctuation and
newlines are their own tokens), plus a BOS token, so counts are stable and roughly Llama-like (~4 chars/token).
Generated tokens are ids into a fixed filler vocabulary; each id decodes to one word (with a leading space) or a
punctuation mark, so ``len(text)`` grows with every token and stop strings can match.
"""

from __future__ import annotations

import hashlib
import re

BOS_ID = 128000
EOS_ID = 128009

_WORDS = (
    "the model decodes tokens while the draft head proposes a tree of candidates and the target verifies them in one "
    "forward pass so accepted tokens arrive faster when the draft is right energy per token falls as speed rises but "
    "power climbs toward the limit where clocks drop and heat builds slowly inside a laptop chassis with a small fan "
    "server request batch step time latency throughput cache memory graph kernel warp block thread register shared "
    "global tensor matrix vector layer attention head query key value softmax norm residual embedding vocabulary "
    "python function class return import async await loop list dict string number value error test assert print"
).split()
_PUNCT = (".", ",", "\n")
VOCAB: tuple[str, ...] = tuple(" " + w for w in _WORDS) + _PUNCT
_BASE_ID = 1000

_PIECE = re.compile(r"\w+|[^\w\s]|\n")


def count_tokens(text: str) -> int:
    """Tokens of a prompt: BOS + word pieces of <= 4 characters + punctuation/newlines."""
    n = 1
    for m in _PIECE.finditer(text):
        piece = m.group(0)
        n += (len(piece) + 3) // 4 if piece[0].isalnum() or piece[0] == "_" else 1
    return n


def encode(text: str) -> list[int]:
    """Deterministic ids for a prompt (only their count matters to the twin)."""
    ids = [BOS_ID]
    for m in _PIECE.finditer(text):
        piece = m.group(0)
        chunks = (
            [piece[i : i + 4] for i in range(0, len(piece), 4)] if piece[0].isalnum() or piece[0] == "_" else [piece]
        )
        for c in chunks:
            ids.append(int.from_bytes(hashlib.blake2b(c.encode(), digest_size=2).digest(), "little") + 2000)
    return ids


def stable_hash(*parts: object) -> int:
    """A process-independent 64-bit hash (Python's hash() is salted per process)."""
    h = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little")


def filler_id(stream_key: int, position: int) -> int:
    """The id of the generated token at ``position`` for a given stream (prompt + sampling salt)."""
    return _BASE_ID + stable_hash(stream_key, position) % len(VOCAB)


def decode(ids: list[int]) -> str:
    out = []
    for i in ids:
        if i == EOS_ID:
            continue
        j = i - _BASE_ID
        out.append(VOCAB[j] if 0 <= j < len(VOCAB) else "")
    return "".join(out)
