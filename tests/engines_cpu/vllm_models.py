"""Convert sglang-layout EAGLE3 heads (as tiny_models.py writes them) for vLLM: `python vllm_models.py SRC OUT`.

SRC is a tiny_models.py output dir (target/ and draft-*/); OUT gets target/ (a symlink to SRC/target) and each
draft-*/ converted. Needs only the standard library plus safetensors and torch (either engines venv has them).

vLLM 0.32 (vllm/model_executor/models/llama_eagle3.py) loads the same `LlamaForCausalLMEagle3` architecture and the
same weight names (fc, midlayer.*, norm, lm_head, no embed_tokens: the target's is shared). Two things differ:

1. `eagle_aux_hidden_state_layer_ids` (in `eagle_config`, or top-level) counts differently. sglang captures, for
   id k, the input of target layer k + 1 (= the output of layer k; it adds 1 itself in set_eagle3_layers_to_capture).
   vLLM captures, for id k, the residual stream after k layers (0 = the embeddings), i.e. the input of layer k. So
   the same states need vLLM id = sglang id + 1: tiny_models' [-1, 0] (inputs of layers 0 and 1) becomes [0, 1].
   (With no ids given both default to inputs of layers (2, L//2, L-3), which agree; with a 2-layer target that
   default captures only 2 states in vLLM and 1 in sglang, so explicit ids are needed for vLLM's fc, which it always
   applies, while sglang skips fc when the captured width already equals hidden_size.)
2. `d2t` with `draft_vocab_size == vocab_size`: vLLM creates no `draft_id_to_target_id` parameter then, and a `d2t`
   tensor in the checkpoint fails the load ("There is no module or parameter named 'draft_id_to_target_id' in
   Eagle3LlamaForCausalLM"). sglang accepts it. So d2t (and t2d, which vLLM skips anyway) are dropped in that case;
   with a smaller draft vocabulary they are kept.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path


def convert_config(config: dict) -> dict:
    """Return a copy of an sglang EAGLE3 head config with vLLM's aux-layer numbering."""
    out = json.loads(json.dumps(config))
    eagle = out.get("eagle_config")
    if isinstance(eagle, dict) and eagle.get("eagle_aux_hidden_state_layer_ids") is not None:
        eagle["eagle_aux_hidden_state_layer_ids"] = [i + 1 for i in eagle["eagle_aux_hidden_state_layer_ids"]]
    if out.get("eagle_aux_hidden_state_layer_ids") is not None:
        out["eagle_aux_hidden_state_layer_ids"] = [i + 1 for i in out["eagle_aux_hidden_state_layer_ids"]]
    return out


def convert_draft(src: Path, dst: Path) -> dict:
    """Write the vLLM form of the EAGLE3 head in `src` to `dst`; return what changed."""
    from safetensors.torch import load_file, save_file

    config = json.loads((src / "config.json").read_text())
    new_config = convert_config(config)
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "config.json").write_text(json.dumps(new_config, indent=2) + "\n")
    weights = load_file(str(src / "model.safetensors"))
    same_vocab = config.get("draft_vocab_size", config["vocab_size"]) == config["vocab_size"]
    dropped = [k for k in ("d2t", "t2d") if k in weights] if same_vocab else []
    for key in dropped:
        del weights[key]
    save_file(weights, str(dst / "model.safetensors"), metadata={"format": "pt"})
    for name in os.listdir(src):  # tokenizer files and the like, if any
        if name not in ("config.json", "model.safetensors") and (src / name).is_file():
            shutil.copy2(src / name, dst / name)
    return {
        "aux_layer_ids": (new_config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids"),
        "dropped": dropped,
    }


def convert_tree(src: Path, out: Path) -> dict:
    """Convert every draft-*/ under `src` into `out`, and link out/target to src/target."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / "target"
    if not target.exists():
        target.symlink_to((src / "target").resolve(), target_is_directory=True)
    summary = {"target": str(target)}
    for draft in sorted(p for p in src.iterdir() if p.is_dir() and p.name.startswith("draft")):
        summary[draft.name] = convert_draft(draft, out / draft.name)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("src", type=Path, help="a tiny_models.py output dir")
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    print(json.dumps(convert_tree(args.src, args.out), indent=2))


if __name__ == "__main__":
    main()
