"""Closed-loop client hints: the ``X-Twin-Loop`` / ``X-Twin-Seq`` / ``X-Twin-Next`` request headers, parsed."""

from __future__ import annotations

from dataclasses import dataclass
from email.message import Message

LOOP_HEADER = "X-Twin-Loop"
SEQ_HEADER = "X-Twin-Seq"
NEXT_HEADER = "X-Twin-Next"


@dataclass(frozen=True)
class LoopSpec:
    """One closed-loop batch of a client: SESSION sends TOTAL requests at CONCURRENCY."""

    session: str
    total: int
    concurrency: int


@dataclass(frozen=True)
class LoopHint:
    """A closed-loop client's declaration, from the headers ``X-Twin-Loop: SESSION TOTAL CONCURRENCY`` (this batch),
    ``X-Twin-Seq: I`` (this request is the batch's I-th, 0-based: the first CONCURRENCY go out together, request I
    after that goes out when the (I - CONCURRENCY + 1)-th request of the batch finishes) and ``X-Twin-Next: SESSION
    TOTAL CONCURRENCY`` (the batch the client starts right after this one ends, e.g. the measured requests after the
    warm-up)."""

    loop: LoopSpec
    seq: int
    next: LoopSpec | None = None


def _loop_spec(header: str, value: str) -> LoopSpec:
    parts = value.split()
    try:
        if len(parts) != 3 or int(parts[1]) < 1 or int(parts[2]) < 1:
            raise ValueError
    except ValueError:
        raise ValueError(f"{header} must be 'SESSION TOTAL CONCURRENCY' (positive integers), got {value!r}") from None
    return LoopSpec(parts[0], int(parts[1]), int(parts[2]))


def parse_loop_hint(headers: Message) -> LoopHint | None:
    """The closed-loop hint of a request's headers (None without ``X-Twin-Loop``); ValueError names a bad header."""
    loop = headers.get(LOOP_HEADER)
    if not loop:
        return None
    seq = headers.get(SEQ_HEADER)
    try:
        if seq is None or int(seq) < 0:
            raise ValueError
    except ValueError:
        raise ValueError(
            f"{SEQ_HEADER} must be the request's 0-based index in its {LOOP_HEADER} batch, got {seq!r}"
        ) from None
    spec = _loop_spec(LOOP_HEADER, loop)
    if int(seq) >= spec.total:
        raise ValueError(f"{SEQ_HEADER} {seq} is not below the batch's TOTAL {spec.total}")
    nxt = headers.get(NEXT_HEADER)
    return LoopHint(spec, int(seq), _loop_spec(NEXT_HEADER, nxt) if nxt else None)
