"""What the models on disk say before any launch: whether an EAGLE3 draft was made for its target (from the two
models' ``config.json``), and how much memory their weights take (``weights_mb``).

sglang's EAGLE3 draft (``srt/models/llama_eagle3.py``) reads the target's hidden states through a layer sized
``target_hidden_size`` (else its own ``hidden_size``, lines 151-154) and predicts over ``vocab_size`` tokens (line
144): a draft for another target (the 1B draft under an 8B target) fails at load or, worse, serves with an
acceptance near zero. The configs are read where they already are (a local folder, or the Hugging Face cache); a
model not on disk yet is reported unchecked, never downloaded here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness.core.errors import UsageError
from harness.core.jsonl import read_json_object


def hub_cache() -> Path:
    """The Hugging Face hub cache as ``huggingface_hub`` finds it (``HF_HUB_CACHE``, ``HF_HOME``/hub, ~/.cache)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    return Path(home) / "hub"


def config_path(model: str) -> Path | None:
    """The ``config.json`` of ``model`` (a folder, or a hub id in the cache: its ``refs/main`` snapshot first)."""
    local = Path(model).expanduser()
    if (local / "config.json").is_file():
        return local / "config.json"
    repo = hub_cache() / f"models--{model.replace('/', '--')}"
    ref = repo / "refs" / "main"
    snapshots = [repo / "snapshots" / ref.read_text().strip()] if ref.is_file() else []
    snapshots += sorted((repo / "snapshots").glob("*")) if (repo / "snapshots").is_dir() else []
    return next((s / "config.json" for s in snapshots if (s / "config.json").is_file()), None)


def _read(path: Path) -> dict[str, Any]:
    return read_json_object(path, "model config", "repair or re-download the model")


def check_pair(target: str, draft: str) -> dict[str, Any]:
    """What the two configs say (for the manifest's ``preflight``); raises ``UsageError`` when the draft is not an
    EAGLE3 draft of this target. ``checked`` is False when a config is not on disk yet (nothing is fetched)."""
    paths = {"target": config_path(target), "draft": config_path(draft)}
    out: dict[str, Any] = {"target": target, "draft": draft, "checked": False}
    missing = [k for k, p in paths.items() if p is None]
    if missing:
        out["unchecked_because"] = f"no local config.json for the {' and the '.join(missing)} (not downloaded yet)"
        return out
    t, d = _read(paths["target"]), _read(paths["draft"])  # type: ignore[arg-type]
    found = {
        "target_architectures": t.get("architectures"),
        "draft_architectures": d.get("architectures"),
        "target_hidden_size": t.get("hidden_size"),
        "draft_target_hidden_size": d.get("target_hidden_size", d.get("hidden_size")),
        "target_vocab_size": t.get("vocab_size"),
        "draft_vocab_size": d.get("vocab_size"),
    }
    out.update(found, checked=True)
    problems = []
    if not any("eagle3" in str(a).lower() for a in d.get("architectures") or []):
        problems.append(f"its architectures {d.get('architectures')} name no EAGLE3 draft")
    if found["draft_target_hidden_size"] != found["target_hidden_size"]:
        problems.append(
            f"it reads hidden states of size {found['draft_target_hidden_size']}, the target's are "
            f"{found['target_hidden_size']}"
        )
    if found["draft_vocab_size"] != found["target_vocab_size"]:
        problems.append(
            f"its vocabulary has {found['draft_vocab_size']} tokens, the target's {found['target_vocab_size']}"
        )
    if problems:
        raise UsageError(
            f"the draft {draft} is not an EAGLE3 draft of the target {target}: {'; '.join(problems)} "
            f"({paths['draft']}, {paths['target']})",
            fix="pass --draft-model-path with the EAGLE3 draft trained for this target (or --model-path with its target)",
        )
    return out


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def weights_mb(model: str) -> float | None:
    """The MB of ``model``'s weight files beside its ``config.json`` (a folder, or the hub cache's snapshot; links
    followed), or None when the model is not on disk."""
    config = config_path(model)
    if config is None:
        return None
    files = [p for p in config.parent.iterdir() if p.name.endswith(WEIGHT_SUFFIXES) and p.is_file()]
    return sum(p.stat().st_size for p in files) / 2**20 if files else None


def footprint_mb(target: str, draft: str | None) -> float | None:
    """The weights a server of ``target`` (with ``draft``) loads, in MB; None unless the target's are on disk."""
    base = weights_mb(target)
    if base is None:
        return None
    return base + ((weights_mb(draft) or 0.0) if draft else 0.0)
