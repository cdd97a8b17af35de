"""Build the twin's shipped tokenizer (``harness/data/twin_tokenizer/``) with Hugging Face ``tokenizers``, so load
tools (aiperf, guidellm, sglang's bench_serving, ``transformers.AutoTokenizer``) count tokens as the twin engine does.

It is ``harness/twin/engine/tokens.py``'s count as a tokenizer: a word-level model over the pieces that module counts
(``\\w{1,4}`` runs of a word, one punctuation mark, a newline; other whitespace dropped) and a BOS token in front of a
prompt, so ``len(tok.encode(prompt))`` is ``count_tokens(prompt)`` and ``len(tok.encode(output,
add_special_tokens=False))`` is the engine's ``completion_tokens`` (every filler word is one piece). Pieces outside the
vocabulary (most 4-character runs) map to ``unk``, still one token each; ``unk`` is itself an ordinary piece, so
decoded text re-encodes to the same count. The filler words sit at the engine's own output ids (1000 + index), so the
engine's ``output_ids`` decode with this tokenizer to its words. Deterministic: the same files from the same source.

Run with a Python that has ``tokenizers``: ``PYTHONPATH=. python -m harness.twin.tokenizer_build [OUT_DIR]``.
"""

from __future__ import annotations

import itertools
import json
import string
import sys
from pathlib import Path
from typing import Any

from harness.twin.engine.tokens import _BASE_ID, VOCAB

BOS, EOS, END = "<|begin_of_text|>", "<|eot_id|>", "<|end_of_text|>"
UNK = "unk"
CHUNK = r"\w{1,4}|[^\w\s]|\n"  # tokens.py's pieces: ``\w+`` cut into 4-character runs, punctuation, newlines
DEFAULT_DIR = Path(__file__).resolve().parents[1] / "data" / "twin_tokenizer"


def vocabulary() -> list[str]:
    """Every token in id order: the specials, pieces up to the engine's filler ids, its filler words at their ids,
    then the remaining pieces (punctuation, digits, 1-2 letter pieces in both cases, 3 lowercase letters)."""
    lower, upper = string.ascii_lowercase, string.ascii_uppercase
    pieces = itertools.chain(
        (c for c in string.punctuation),
        ["\n"],
        (str(i) for i in range(100)),
        lower,
        upper,
        ("".join(p) for p in itertools.product(lower, repeat=2)),
        (a + b for a in upper for b in lower),
        ("".join(p) for p in itertools.product(lower, repeat=3)),
    )
    filler = [w.strip(" ") or w for w in VOCAB]
    taken = set(filler) | {BOS, EOS, END}
    out = [BOS, END, EOS]
    rest: list[str] = []
    for p in pieces:
        if p in taken:
            continue
        taken.add(p)
        (out if len(out) < _BASE_ID else rest).append(p)
    return out + filler + rest


def build(out_dir: Path = DEFAULT_DIR) -> Path:
    from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers, processors

    vocab = {tok: i for i, tok in enumerate(vocabulary())}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(CHUNK), behavior="removed", invert=True)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in (BOS, END, EOS)])
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"), pretty=False)
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": END,
        "model_max_length": 131072,
        "clean_up_tokenization_spaces": False,
        "model_input_names": ["input_ids", "attention_mask"],
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out_dir / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": BOS, "eos_token": EOS, "pad_token": END}, indent=2) + "\n"
    )
    return out_dir


if __name__ == "__main__":
    print(build(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_DIR))
