"""Append-only JSONL: fsynced appends, torn tails repaired, malformed lines named."""

import pytest

from harness.core.errors import DataError, MissingFileError
from harness.core.jsonl import JsonlAppender, read_jsonl, repair_torn_tail


def test_append_and_torn_tail(tmp_path):
    p = tmp_path / "rows.jsonl"
    with JsonlAppender(p) as out:
        out.append({"a": 1})
        out.append({"a": 2})
    with open(p, "ab") as f:
        f.write(b'{"a": 3, "b"')
    assert [r["a"] for r in read_jsonl(p)] == [1, 2]
    assert repair_torn_tail(p) > 0
    with JsonlAppender(p) as out:
        out.append({"a": 4})
    assert [r["a"] for r in read_jsonl(p)] == [1, 2, 4]


def test_malformed_middle_line_is_an_error(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"a": 1}\nnot json\n{"a": 2}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:2"):
        read_jsonl(p)
    with pytest.raises(MissingFileError):
        read_jsonl(tmp_path / "missing.jsonl")
