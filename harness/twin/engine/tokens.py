"""A tiny deterministic tokenizer and filler-text generator for the twin engine.

Prompt tokens: one token per word-piece of at most 4 characters (words split into 4-char pieces, punctuation and
newlines are their own tokens), plus a BOS token, so counts are stable and roughly Llama-like (~4 chars/token).
Generated tokens are ids into a fixed filler vocabulary; each id decodes to one word of at most 4 characters (with a
leading space) or a punctuation mark, so ``len(text)`` grows with every token, stop strings can match, and a
client that counts the output text's tokens with the shipped tokenizer (``harness/data/twin_tokenizer/``, built by
``harness/twin/tokenizer_build.py`` from this module) counts what the engine reports as ``completion_tokens``.
"""

from __future__ import annotations

import hashlib
import re

BOS_ID = 128000
EOS_ID = 128009

_WORDS = (  # every word at most 4 characters: one token of its own under ``count_tokens`` (and the shipped tokenizer)
    "the a of to in on at by for and or but not is are was be it its this that with from as so if then when how why "
    "what who all any each one two few more less most fast slow hot cool heat fan chip core die watt volt amp cap "
    "load idle busy step time wait run stop go tree node leaf root path edge test pass fail ok true none list dict "
    "set map key val int str byte bit word text code line file call loop sum max min avg mean rate gain loss cost "
    "save keep drop fill move pick push pull read send ask say know see look make take give get put use need want "
    "like work plan goal data row cell grid band pace beat flow rise fall low high peak warm cold long wide deep "
    "near far new old big head"
).split()
_PUNCT = (".", ",", "\n")
VOCAB: tuple[str, ...] = tuple(" " + w for w in _WORDS) + _PUNCT
_BASE_ID = 1000

PIECE_PATTERN = r"\w+|[^\w\s]|\n"
_PIECE = re.compile(PIECE_PATTERN)


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
