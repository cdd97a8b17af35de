"""The EAGLE3 pairing check (issue 46, item 7): a draft made for another target is refused before the first launch,
from the two models' config.json (sglang ``srt/models/llama_eagle3.py``: ``target_hidden_size`` else
``hidden_size``, and ``vocab_size``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _engine_helpers import FAST, read_lines, run_harness

from harness.core.errors import DataError, UsageError
from harness.engine.model_pair import check_pair, config_path

LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "vocab_size": 128256}
LLAMA_1B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "vocab_size": 128256}
DRAFT_1B = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 2048, "vocab_size": 128256,
            "draft_vocab_size": 32000}  # fmt: skip
DRAFT_8B = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4096, "vocab_size": 128256}


def model(root: Path, name: str, config: dict) -> str:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def test_a_draft_for_another_target_is_refused_naming_what_differs(tmp_path: Path) -> None:
    t8, t1, d1, d8 = (model(tmp_path, n, c) for n, c in
                      (("t8", LLAMA_8B), ("t1", LLAMA_1B), ("d1", DRAFT_1B), ("d8", DRAFT_8B)))  # fmt: skip
    assert check_pair(t1, d1)["checked"] is True and check_pair(t8, d8)["checked"] is True
    with pytest.raises(UsageError, match="reads hidden states of size 2048, the target's are 4096") as info:
        check_pair(t8, d1)
    assert "--draft-model-path" in (info.value.fix or "") and info.value.exit_code == 2
    with pytest.raises(UsageError, match="name no EAGLE3 draft"):
        check_pair(t1, t1)  # a plain model given as the draft
    other_vocab = model(tmp_path, "dv", {**DRAFT_1B, "vocab_size": 32000})
    with pytest.raises(UsageError, match="vocabulary has 32000 tokens, the target's 128256"):
        check_pair(t1, other_vocab)
    wide = model(tmp_path, "dw", {**DRAFT_1B, "hidden_size": 1024, "target_hidden_size": 2048})
    assert check_pair(t1, wide)["draft_target_hidden_size"] == 2048  # the draft's own width may differ


def test_hub_ids_are_read_from_the_cache_and_never_fetched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    snap = tmp_path / "hub" / "models--org--target" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(LLAMA_8B))
    (tmp_path / "hub" / "models--org--target" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--target" / "refs" / "main").write_text("abc123")
    assert config_path("org/target") == snap / "config.json"
    found = check_pair("org/target", "org/not-downloaded")
    assert found["checked"] is False and "draft" in found["unchecked_because"]
    broken = model(tmp_path, "broken", {})
    (Path(broken) / "config.json").write_text("{not json")
    with pytest.raises(DataError, match="not a readable model config") as info:  # bad data: exit 3
        check_pair("org/target", broken)
    assert info.value.exit_code == 3


def test_the_sweep_refuses_the_pair_before_any_launch(tmp_path: Path) -> None:
    t8, d1 = model(tmp_path, "t8", LLAMA_8B), model(tmp_path, "d1", DRAFT_1B)
    run = tmp_path / "run"
    r = run_harness("sweep", "--engine", "twin", "--model-path", t8, "--draft-model-path", d1,
                    "--configs", "0:0:0,3:4:8", "--batch-sizes", "1", "--out", str(run), *FAST)  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert "is not an EAGLE3 draft of the target" in r.stderr and "fix:" in r.stderr and "Traceback" not in r.stderr
    assert not (run / "rows.jsonl").exists() or read_lines(run / "rows.jsonl") == []
    logs = run / "logs"
    assert not logs.exists() or not list(logs.iterdir()), list(logs.iterdir())  # no twin GPU, sampler or server
    assert json.loads((run / "manifest.json").read_text())["status"] == "failed"
