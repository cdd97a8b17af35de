"""One client request as the twin engine sees it, and an iteration computed ahead of the device clock."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from harness.twin.engine.loop_hint import LoopHint
from harness.twin.engine.tokens import decode, filler_id
from harness.twin.model import Iteration, SimRequest


@dataclass
class EngineRequest:
    """One client request as the server sees it."""

    sim: SimRequest
    stream_key: int
    stops: list[str] = field(default_factory=list)
    stop_ids: set[int] = field(default_factory=set)
    no_stop_trim: bool = False
    streaming: bool = False  # streams wake on every iteration; plain requests only when done
    visible: int = 0
    snapshots: list[int] = field(default_factory=list)  # visible count after each iteration that added tokens
    done: bool = False
    stop_matched: str | None = None
    event: threading.Event = field(default_factory=threading.Event)
    received_ns: int = 0
    forward_entry_ns: int | None = None  # start of the iteration that admitted it (its prefill)
    loop: LoopHint | None = None
    computed: int = 0  # tokens computed so far (published: ``visible``)
    computed_cap: int | None = None  # where a stop token / string cut the output

    _ids: list[int] = field(default_factory=list)
    _text: list[str] = field(default_factory=list)
    _ends: list[int] = field(default_factory=list)  # cumulative character length after each token

    def _extend(self, n: int) -> None:
        """Generate the filler tokens up to ``n`` (deterministic in ``stream_key``)."""
        while len(self._ids) < n:
            i = filler_id(self.stream_key, len(self._ids))
            piece = decode([i])
            self._ids.append(i)
            self._text.append(piece)
            self._ends.append((self._ends[-1] if self._ends else 0) + len(piece))

    def ids(self, n: int | None = None) -> list[int]:
        """The first ``n`` output token ids (default: the published ones)."""
        count = self.visible if n is None else n
        self._extend(count)
        return self._ids[:count]

    def raw_text(self, n: int | None = None) -> str:
        """The text of the first ``n`` output tokens, untrimmed."""
        count = self.visible if n is None else n
        self._extend(count)
        if len(self._text) > 1:
            self._text[:] = ["".join(self._text)]  # keep one joined string, sliced by the cumulative ends
        return self._text[0][: self._ends[count - 1]] if count > 0 else ""

    def wait_done(self) -> None:
        """Block until the request is finished (its event wakes on publication)."""
        while not self.done:
            self.event.wait(0.5)
            self.event.clear()

    def text(self) -> str:
        """The published text, cut at a matched stop string unless ``no_stop_trim``."""
        t = self.raw_text()
        if self.stop_matched and not self.no_stop_trim and self.stop_matched in t:
            t = t[: t.find(self.stop_matched)]
        return t


@dataclass
class Computed:
    """An iteration computed ahead of the device clock, waiting to be published: per request (tokens, finished)."""

    it: Iteration
    counts: dict[str, tuple[int, bool]]
    early: bool  # a client waits on it (a closed-loop finish): publish up to the lead before its end


def iter_counts(q: EngineRequest) -> Iterator[tuple[int, bool]]:
    """Yield (completion count, final) once per decode iteration that produced tokens (sglang's stream_interval 1)."""
    idx = 0
    while True:
        q.event.wait(0.5)
        q.event.clear()
        done = q.done
        snaps = q.snapshots
        end = len(snaps)
        while idx < end:
            n = snaps[idx]
            idx += 1
            if not (done and idx == end):
                yield n, False
        if done:
            yield q.visible, True
            return
