"""The speculative configuration space: sglang's validity rules and the 19 published actions.

A config is the triple (speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens).
Rules, applied in this order (they mirror sglang and its ``bench_speculative.py``):

1. ``(0, 0, 0)`` is the non-speculative baseline; any other triple containing a zero is invalid.
2. ``num_draft_tokens <= steps * topk + 1`` (the draft tree cannot propose more tokens than it has nodes).
3. ``topk == 1`` is rewritten server-side to ``num_draft_tokens = steps + 1``.

Validity is checked before the rewrite; de-duplication happens after it. Iterating the published grid
(steps, then topk, then draft tokens, ascending) and keeping first occurrences gives the 19 actions whose
index order is the I/O contract of every published policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Iterable, Sequence

from harness.core.errors import InvalidConfigError
from harness.core.option_values import checked_by, list_items, no_repeats, shown

PUBLISHED_STEPS: tuple[int, ...] = (0, 1, 3, 5)
PUBLISHED_TOPK: tuple[int, ...] = (0, 1, 2, 4)
PUBLISHED_DRAFT_TOKENS: tuple[int, ...] = (0, 2, 4, 8, 16)
PUBLISHED_BATCH_SIZES: tuple[int, ...] = (1, 4, 8, 16)


@dataclass(frozen=True, order=True)
class SpecConfig:
    """One speculative config (steps, topk, draft tokens); ``(0, 0, 0)`` means no speculation."""

    steps: int
    topk: int
    draft_tokens: int

    @property
    def is_baseline(self) -> bool:
        return self.steps == 0 and self.topk == 0 and self.draft_tokens == 0

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.steps, self.topk, self.draft_tokens)

    def as_list(self) -> list[int]:
        return [self.steps, self.topk, self.draft_tokens]

    @property
    def label(self) -> str:
        """``"3:4:8"``: the form ``--configs`` accepts."""
        return f"{self.steps}:{self.topk}:{self.draft_tokens}"

    def __str__(self) -> str:
        return f"({self.steps},{self.topk},{self.draft_tokens})"


BASELINE = SpecConfig(0, 0, 0)
REFERENCE = SpecConfig(3, 4, 8)


def violated_rule(steps: int, topk: int, draft_tokens: int) -> str | None:
    """Return a sentence naming the rule a raw triple breaks, or None when sglang accepts it."""
    triple = (steps, topk, draft_tokens)
    if any(v < 0 for v in triple):
        return f"{triple}: values must be non-negative"
    if triple == (0, 0, 0):
        return None
    if 0 in triple:
        return (
            f"{triple}: only (0,0,0) may contain a zero (it is the non-speculative baseline); "
            "a speculative config needs steps >= 1, topk >= 1 and draft tokens >= 1"
        )
    if draft_tokens > steps * topk + 1:
        return (
            f"{triple}: num_draft_tokens must be <= steps * topk + 1 = {steps * topk + 1} "
            "(the draft tree has no more nodes than that)"
        )
    return None


def effective(steps: int, topk: int, draft_tokens: int) -> SpecConfig:
    """Validate a raw triple and apply sglang's topk==1 rewrite; raise InvalidConfigError naming the rule."""
    rule = violated_rule(steps, topk, draft_tokens)
    if rule is not None:
        raise InvalidConfigError(
            f"invalid speculative config {rule}", fix="pick a triple that satisfies the rule, e.g. 3:4:8"
        )
    if topk == 1:
        draft_tokens = steps + 1
    return SpecConfig(steps, topk, draft_tokens)


def build_actions(
    steps: Iterable[int] = PUBLISHED_STEPS,
    topk: Iterable[int] = PUBLISHED_TOPK,
    draft_tokens: Iterable[int] = PUBLISHED_DRAFT_TOKENS,
) -> list[SpecConfig]:
    """Iterate steps, then topk, then draft tokens ascending; keep valid, rewritten, first-seen configs."""
    seen: dict[SpecConfig, None] = {}
    for s in sorted(set(steps)):
        for k in sorted(set(topk)):
            for d in sorted(set(draft_tokens)):
                if violated_rule(s, k, d) is None:
                    seen.setdefault(effective(s, k, d), None)
    return list(seen)


ACTIONS: tuple[SpecConfig, ...] = tuple(build_actions())
"""The 19 published actions in their published index order."""

N_ACTIONS = len(ACTIONS)


def action_index(config: SpecConfig | Sequence[int]) -> int:
    """Index of a config in the published 19-action space."""
    cfg = config if isinstance(config, SpecConfig) else SpecConfig(*map(int, config))
    try:
        return ACTIONS.index(cfg)
    except ValueError:
        raise InvalidConfigError(
            f"config {cfg} is not one of the {N_ACTIONS} published actions",
            fix="use one of: " + ", ".join(str(a) for a in ACTIONS),
        ) from None


def parse_config(text: str) -> SpecConfig:
    """Parse ``"s:k:d"`` (also ``"s,k,d"`` or ``"(s,k,d)"``) into an effective config."""
    cleaned = text.strip().strip("()[] ")
    parts = [p for p in cleaned.replace(",", ":").split(":") if p.strip() != ""]
    if len(parts) != 3:
        raise InvalidConfigError(
            f"cannot parse config {text!r}: expected three integers steps:topk:draft_tokens", fix="write it like 3:4:8"
        )
    try:
        s, k, d = (int(p) for p in parts)
    except ValueError:
        raise InvalidConfigError(
            f"cannot parse config {text!r}: steps, topk and draft tokens must be integers", fix="write it like 3:4:8"
        ) from None
    return effective(s, k, d)


def parse_configs(value: str | Sequence[Any]) -> list[SpecConfig]:
    """Configs from ``"0:0:0,3:4:8"`` (comma-separated ``s:k:d`` items) or a list (``["3:4:8", [0, 0, 0]]``), after
    sglang's rewrite, order kept; an empty item, an empty list or a config given twice (``3:1:4`` and ``3:1:2`` are
    one config after the rewrite) is refused."""
    items = list_items(value, "--configs", "0:0:0,3:4:8", separators=",;", error=InvalidConfigError)
    # Items are s:k:d; commas above only separate items, so a bare "3,4,8" would be split: reject it clearly.
    out: dict[SpecConfig, str] = {}
    for item in items:
        if item.count(":") != 2:
            raise InvalidConfigError(
                f"cannot parse config {item!r} in --configs {shown(items)!r}",
                fix="separate items with commas, e.g. 0:0:0,3:4:8",
            )
        config = parse_config(item)
        if config in out:
            same = (
                "" if out[config] == item else f" ({out[config]} and {item} are {config.label} after sglang's rewrite)"
            )
            raise InvalidConfigError(
                f"config {config.label} is listed twice in --configs{same}", fix="list each config once"
            )
        out[config] = item
    if not out:
        raise InvalidConfigError("--configs is empty", fix="give at least one config, e.g. 3:4:8")
    return list(out)


def parse_int_list(value: str | Sequence[Any], name: str) -> list[int]:
    """Integers from ``"1,4,8,16"`` or ``[1, 4, 8, 16]`` (for --batch-sizes, --steps ...; items as ``list_items``
    reads them)."""
    pieces = list_items(value, name, "1,4,8,16", error=InvalidConfigError)
    if not pieces:
        raise InvalidConfigError(f"{name} is empty", fix=f"e.g. {name} 1,4,8,16")
    try:
        return [int(t) for t in pieces]
    except ValueError:
        raise InvalidConfigError(
            f"{name} must be comma-separated integers, got {shown(pieces)!r}", fix=f"e.g. {name} 1,4,8,16"
        ) from None


MAX_BATCH_SIZE = 4096
"""Largest batch size a sweep accepts (sglang's --cuda-graph-max-bs and --max-running-requests take it as given)."""


def parse_batch_sizes(value: str | Sequence[Any]) -> list[int]:
    """Batch sizes from ``"1,4,8,16"`` or ``[1, 4, 8, 16]``: each in 1..MAX_BATCH_SIZE, each once, order kept."""
    values = parse_int_list(value, "--batch-sizes")
    bad = [v for v in values if v < 1 or v > MAX_BATCH_SIZE]
    if bad:
        raise InvalidConfigError(
            f"--batch-sizes {shown(values)!r}: batch size {bad[0]} is not between 1 and {MAX_BATCH_SIZE}",
            fix="e.g. --batch-sizes 1,4,8,16",
        )
    no_repeats(values, "--batch-sizes", "batch size", error=InvalidConfigError)
    return values


BatchSizes = Annotated[list[int], checked_by(parse_batch_sizes)]
"""A sweep's batch sizes, checked at every door (``parse_batch_sizes``)."""
SpecConfigs = Annotated[list[tuple[int, int, int]], checked_by(lambda v: [c.as_tuple() for c in parse_configs(v)])]
"""Speculative configs ``s:k:d``, checked at every door (``parse_configs``); stored as triples."""
