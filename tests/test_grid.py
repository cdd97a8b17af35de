"""The 19-action space and sglang's validity rules."""

import pytest

from harness.core.errors import InvalidConfigError
from harness.grid import ACTIONS, SpecConfig, action_index, build_actions, effective, parse_batch_sizes, parse_configs

PUBLISHED = [
    (0, 0, 0),
    (1, 1, 2),
    (1, 2, 2),
    (1, 4, 2),
    (1, 4, 4),
    (3, 1, 4),
    (3, 2, 2),
    (3, 2, 4),
    (3, 4, 2),
    (3, 4, 4),
    (3, 4, 8),
    (5, 1, 6),
    (5, 2, 2),
    (5, 2, 4),
    (5, 2, 8),
    (5, 4, 2),
    (5, 4, 4),
    (5, 4, 8),
    (5, 4, 16),
]


def test_actions_are_published_order():
    assert [a.as_tuple() for a in ACTIONS] == PUBLISHED


def test_topk1_rewrite_and_dedup():
    assert effective(3, 1, 2) == SpecConfig(3, 1, 4)
    assert build_actions([3], [1], [2, 4]) == [SpecConfig(3, 1, 4)]


@pytest.mark.parametrize(
    "triple, words",
    [
        ((3, 4, 16), "steps * topk + 1"),
        ((0, 4, 8), "only (0,0,0)"),
        ((3, 0, 0), "only (0,0,0)"),
        ((-1, 1, 1), "non-negative"),
    ],
)
def test_invalid_triples_name_the_rule(triple, words):
    with pytest.raises(InvalidConfigError) as info:
        effective(*triple)
    assert words in str(info.value)


def test_parse_configs_and_batch_sizes():
    assert parse_configs("0:0:0, 3:4:8,3:1:2") == [SpecConfig(0, 0, 0), SpecConfig(3, 4, 8), SpecConfig(3, 1, 4)]
    assert parse_batch_sizes("1,4,8,16") == [1, 4, 8, 16]
    with pytest.raises(InvalidConfigError):
        parse_configs("3,4,8")
    with pytest.raises(InvalidConfigError):
        parse_batch_sizes("0,4")
    assert action_index((3, 4, 8)) == 10
    with pytest.raises(InvalidConfigError):
        action_index((3, 4, 16))


def test_an_empty_item_in_a_list_is_refused_not_skipped():
    """Issue 38 A8: ``--batch-sizes 1,,16`` ran as 1,16 (the typo hid a batch size the user meant)."""
    assert parse_batch_sizes("1, 4 8") == [1, 4, 8]
    for text in ("1,,16", "1,16,", ",1"):
        with pytest.raises(InvalidConfigError, match="has an empty item"):
            parse_batch_sizes(text)
    assert parse_configs("0:0:0, 3:4:8;3:1:2") == [SpecConfig(0, 0, 0), SpecConfig(3, 4, 8), SpecConfig(3, 1, 4)]
    with pytest.raises(InvalidConfigError, match="has an empty item"):
        parse_configs("0:0:0,,3:4:8")
