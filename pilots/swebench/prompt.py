"""Patch-generation prompts: a text dataset's ``text`` verbatim, or the project's own builder from a checkout.

Builder layout (the project's own, loosely in the spirit of SWE-bench's "style 3"): a task line naming the
repository, instance and base commit; ``<issue>``; optional ``<hints>`` (off by default, as in the official text
datasets); ``<repository_tree>``; ``<code>`` with the most relevant files as ``[start of PATH]`` + numbered lines +
``[end of PATH]``; then the answer instruction.

Relevance: keywords are identifier-like words (4+ characters, minus common English words) of the problem
statement. A file ranks by (its path, dotted module or file stem named in the issue; distinct keywords in its
text; distinct keywords in its directory path; path). Only files named or with a keyword in their text are
candidates.

Token budget and truncation (``TRUNCATION_RULE``; every cut is recorded in ``BuiltPrompt.truncation``):
1. the tree lists paths in git order until ``tree_token_budget`` is spent, then ``... N more paths``;
2. files are added in rank order while the code section stays within ``context_token_budget``; a file over
   ``max_file_tokens`` is cut at a line boundary with a marker; a file that no longer fits is dropped;
3. if the whole prompt (builder or verbatim ``text``) still exceeds ``max_prompt_tokens``, its middle is removed:
   the first 75% and the last 25% of the allowed tokens are kept, around a marker line saying how many were cut.
Tokens are estimated with ``estimate_tokens`` (a tokenizer-free rule, no downloads); the server's own
``prompt_tokens`` is recorded beside the estimate.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from pilots.swebench.checkout import Checkout
from pilots.swebench.instances import Instance

TOKEN_RULE = "regex-approx-v1: one token per run of letters, per 1-3 digits, per other non-space character"
TRUNCATION_RULE = (
    "swebench-pilot-v1: tree budget, ranked files within the context budget, then head75/tail25 of the prompt"
)
TEXT_EXTENSIONS = (
    ".py",
    ".pyx",
    ".pxd",
    ".rst",
    ".md",
    ".txt",
    ".cfg",
    ".toml",
    ".ini",
    ".yaml",
    ".yml",
    ".json",
    ".c",
    ".h",
)
STOP_WORDS = frozenset(
    """this that with from have when what which would could should there their then than also into only same
    does done each such some more most very just like will been were they them your about after before while where
    because other these those using used use make makes made work works need needs want wants here over under
    file files code line lines example error errors issue issues following shows show return returns value values
    true false none self class def import print model models""".split()
)
INSTRUCTION = (
    'Write a patch that resolves the issue. Answer with one unified diff in git format ("diff --git a/PATH b/PATH", '
    '"--- a/PATH", "+++ b/PATH" and "@@" hunks) that applies with `git apply` at the base commit. Put the diff in '
    "a ```diff fenced block and write nothing else."
)
_TOKEN_RE = re.compile(r"[A-Za-z]+|\d{1,3}|[^\sA-Za-z\d]")
_WORD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}")
_PATH_RE = re.compile(r"[A-Za-z0-9_./-]+\.(?:py|rst|md|cfg|toml|txt)")


class PromptSettings(BaseModel):
    context_token_budget: int = Field(default=6000, ge=0)
    max_prompt_tokens: int = Field(default=8192, ge=64)
    max_file_tokens: int = Field(default=2500, ge=16)
    tree_token_budget: int = Field(default=1200, ge=0)
    include_hints: bool = False
    chat_template: Literal["llama3", "none"] = "llama3"


class BuiltPrompt(BaseModel):
    text: str
    """The prompt before any chat template."""
    source: Literal["text_field", "builder", "builder_no_checkout"]
    tokens_estimate: int
    files: list[str] = Field(default_factory=list)
    truncation: dict[str, Any] = Field(default_factory=dict)


def estimate_tokens(text: str) -> int:
    """Tokenizer-free token estimate (``TOKEN_RULE``); close to BPE counts for code and English."""
    return len(_TOKEN_RE.findall(text))


def keywords(problem: str) -> list[str]:
    """Distinct identifier-like words of the issue, lowercased, in first-seen order, minus stop words."""
    seen: dict[str, None] = {}
    for w in _WORD_RE.findall(problem):
        lw = w.lower()
        if lw not in STOP_WORDS:
            seen.setdefault(lw, None)
    return list(seen)


def rank_files(problem: str, files: dict[str, str]) -> list[tuple[str, tuple[int, int, int]]]:
    """Candidate files (at least one hit) with their score, best first.

    Score = (named: the path, its dotted module or its file stem appears in the issue as a word;
    distinct issue keywords in the file's text; distinct issue keywords in its directory path).
    """
    kws = keywords(problem)
    lower = problem.lower()
    mentioned_paths = {m.strip("./") for m in _PATH_RE.findall(problem)}
    dotted = {m.lower() for m in re.findall(r"[A-Za-z_]+(?:\.[A-Za-z_]+)+", problem)}
    scored = []
    for path, text in files.items():
        lp = path.lower()
        directory, _, base = lp.rpartition("/")
        stem = base.rsplit(".", 1)[0]
        module = (lp[:-3] if lp.endswith(".py") else lp).replace("/", ".").removesuffix(".__init__")
        named = int(
            path in mentioned_paths
            or module in dotted
            or (
                stem != "__init__"
                and len(stem) >= 3
                and re.search(rf"(?<![a-z0-9_]){re.escape(stem)}(?![a-z0-9_])", lower) is not None
            )
        )
        lt = text.lower()
        text_hits = sum(1 for k in kws if k in lt)
        dir_hits = sum(1 for k in kws if k in directory)
        if named or text_hits:
            scored.append((path, (named, text_hits, dir_hits)))
    scored.sort(key=lambda item: (-item[1][0], -item[1][1], -item[1][2], item[0]))
    return scored


def _numbered(text: str) -> list[str]:
    return [f"{i} {line}" for i, line in enumerate(text.splitlines(), start=1)]


def _cut_lines(lines: list[str], limit: int) -> tuple[list[str], bool]:
    out: list[str] = []
    used = 0
    for line in lines:
        t = estimate_tokens(line) + 1
        if used + t > limit:
            return out, True
        out.append(line)
        used += t
    return out, False


def head_tail_cut(text: str, max_tokens: int) -> tuple[str, dict[str, Any] | None]:
    """Rule 3: keep the first 75% and last 25% of ``max_tokens`` (by estimated tokens) around a marker line."""
    total = estimate_tokens(text)
    if total <= max_tokens:
        return text, None

    def marker_for(n: int) -> str:
        return f"\n[... {n} tokens removed here by the prompt length rule (head 75% / tail 25%) ...]\n"

    keep = max(max_tokens - estimate_tokens(marker_for(total)), 2)
    head_n, tail_n = int(keep * 0.75), keep - int(keep * 0.75)
    spans = [m.span() for m in _TOKEN_RE.finditer(text)]
    head_end = spans[head_n - 1][1] if head_n else 0
    tail_start = spans[total - tail_n][0] if tail_n else len(text)
    cut = total - head_n - tail_n
    marker = marker_for(cut)
    return text[:head_end] + marker + text[tail_start:], {
        "rule": "head75_tail25",
        "original_tokens": total,
        "kept_head_tokens": head_n,
        "kept_tail_tokens": tail_n,
        "removed_tokens": cut,
    }


def build_prompt(inst: Instance, checkout: Checkout | None, settings: PromptSettings | None = None) -> BuiltPrompt:
    """The prompt of one instance (see the module doc for the layout, ranking and truncation rule)."""
    s = settings or PromptSettings()
    truncation: dict[str, Any] = {"rule": TRUNCATION_RULE, "token_rule": TOKEN_RULE, "applied": False}
    if inst.text:
        text, cut = head_tail_cut(inst.text, s.max_prompt_tokens)
        truncation.update(applied=cut is not None, prompt_cut=cut)
        return BuiltPrompt(text=text, source="text_field", tokens_estimate=estimate_tokens(text), truncation=truncation)

    parts = [
        f"You are fixing an issue in the {inst.repo} repository (instance {inst.instance_id}, base commit "
        f"{inst.base_commit}).",
        "",
        "<issue>",
        inst.problem_statement.strip(),
        "</issue>",
    ]
    if s.include_hints and inst.hints_text.strip():
        parts += ["", "<hints>", inst.hints_text.strip(), "</hints>"]
    included: list[str] = []
    if checkout is not None:
        listing = checkout.list_files()
        paths = [p for p, _ in listing]
        tree_lines, used = [], 0
        for p in paths:
            t = estimate_tokens(p) + 1
            if used + t > s.tree_token_budget:
                break
            tree_lines.append(p)
            used += t
        if len(tree_lines) < len(paths):
            tree_lines.append(f"... {len(paths) - len(tree_lines)} more paths")
        truncation["tree_paths_total"] = len(paths)
        truncation["tree_paths_shown"] = min(len(paths), len(tree_lines))
        parts += ["", "<repository_tree>", *tree_lines, "</repository_tree>"]

        text_paths = [p for p, size in listing if p.lower().endswith(TEXT_EXTENSIONS) and size <= 400_000]
        contents = {p: t for p, t in checkout.read_many(text_paths).items() if t is not None}
        ranked = rank_files(inst.problem_statement, contents)
        code_lines: list[str] = []
        budget = s.context_token_budget
        cut_files, dropped = [], []
        for path, _score in ranked:
            body, was_cut = _cut_lines(_numbered(contents[path]), s.max_file_tokens)
            block = [f"[start of {path}]", *body]
            if was_cut:
                block.append(f"[... {path} cut after {len(body)} lines by the per-file token limit ...]")
                cut_files.append(path)
            block.append(f"[end of {path}]")
            cost = sum(estimate_tokens(x) + 1 for x in block)
            if cost > budget:
                dropped.append(path)
                continue
            code_lines += block
            budget -= cost
            included.append(path)
        truncation.update(
            files_ranked=[p for p, _ in ranked],
            files_included=included,
            files_cut=cut_files,
            files_dropped=dropped,
            context_token_budget=s.context_token_budget,
            context_tokens_used=s.context_token_budget - budget,
        )
        parts += ["", "<code>", *code_lines, "</code>"]
    parts += ["", INSTRUCTION]
    text = "\n".join(parts) + "\n"
    text, cut = head_tail_cut(text, s.max_prompt_tokens)
    truncation["prompt_cut"] = cut
    truncation["applied"] = bool(
        cut
        or truncation.get("files_cut")
        or truncation.get("files_dropped")
        or truncation.get("tree_paths_shown", 0) < truncation.get("tree_paths_total", 0)
    )
    return BuiltPrompt(
        text=text,
        source="builder" if checkout is not None else "builder_no_checkout",
        tokens_estimate=estimate_tokens(text),
        files=included,
        truncation=truncation,
    )


def apply_chat_template(prompt: str, template: str) -> str:
    """Wrap a prompt for ``/generate``. ``llama3``: Llama 3 header tokens WITHOUT ``<|begin_of_text|>`` (the server
    adds BOS itself; adding it here would double it). ``none``: the prompt as is."""
    if template == "none":
        return prompt
    return (
        "<|start_header_id|>user<|end_header_id|>\n\n" + prompt.strip() + "<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
