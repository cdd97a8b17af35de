"""sglang's context-length check as the twin applies it, at the boundaries sglang's own
``TokenizerManager._validate_one_request`` was measured to draw (0.5.2 from its installed source, 0.5.23 from its
wheel: a 2-token prompt, a 131072-token context, 0.5.23 reserving 6 EAGLE draft slots)."""

from __future__ import annotations

import pytest

from harness.twin.engine.sglang_contract import context_length_error

CONTEXT = 131072


@pytest.mark.parametrize(
    ("version", "reserved", "largest_accepted"),
    [("0.5.2", 0, CONTEXT - 2 - 1), ("0.5.23", 6, CONTEXT - 2 - 6)],
)
def test_the_largest_max_new_tokens_sglang_accepts(version: str, reserved: int, largest_accepted: int) -> None:
    assert context_length_error(version, CONTEXT, 2, largest_accepted, reserved) is None
    refused = context_length_error(version, CONTEXT, 2, largest_accepted + 1, reserved)
    inputs = 2 + reserved
    assert refused == (
        f"Requested token count exceeds the model's maximum context length of {CONTEXT} tokens. You requested a total "
        f"of {inputs + largest_accepted + 1} tokens: {inputs} tokens from the input messages and "
        f"{largest_accepted + 1} tokens for the completion. Please reduce the number of tokens in the input messages "
        "or the completion to fit within the limit."
    )


def test_a_prompt_that_fills_the_context_is_refused_whatever_the_limit() -> None:
    assert context_length_error("0.5.2", 100, 100, None, 0) == (
        "The input (100 tokens) is longer than the model's context length (100 tokens)."
    )
    assert context_length_error("0.5.23", 100, 95, None, 6) == (
        "The input (101 tokens) is longer than the model's context length (100 tokens)."
    )
    assert context_length_error("0.5.2", 100, 10, None, 0) is None  # no limit given: nothing to add up
