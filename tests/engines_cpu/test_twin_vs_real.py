"""The twin engine held to the real sglang 0.5.23: the same requests to both, answers compared by shape.

One real server (EAGLE3 (3,1,4), the partial-acceptance tiny draft, ``--enable-metrics``, ``--decode-log-interval
1``) and one twin engine emulating 0.5.23 with the same speculative flags get the same request list: health, info,
models, ``/generate`` (text, streamed, ``input_ids``), ``/flush_cache`` idle and busy, bad requests, the OpenAI
routes, ``/metrics`` (by family name). Each answer is reduced to a shape (status, content-type family, JSON (path,
type) pairs; SSE: the first and last data events, the union of all, the terminator) and the two shapes are diffed.
Every difference must be listed as deliberate in docs/twin.md ("The twin held to the real sglang 0.5.23"), and every
listed one must still occur, so the list stays true. Run with `make engines-cpu`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from _server import start_sglang
from _twin_helpers import twin_engine, twin_gpu

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "twin.md"
BEGIN, END = "<!-- twin-vs-real:begin -->", "<!-- twin-vs-real:end -->"
SERVER_ARGS = "<ServerArgs>"
"""In a table pattern: exactly one key that is a field of sglang's ServerArgs (``server_args_fields``)."""
KINDS = ("status", "content-type", "missing", "extra", "type")
CONFIG = (3, 1, 4)
PROMPT = "the model can write a long sentence about energy and power"
GREEDY = {"temperature": 0, "max_new_tokens": 8}
# the sglang: series the twin renders (harness/twin/engine/metrics.py); the harness's sglang client reads meta_info and
# /server_info, not /metrics, so these are what a Prometheus scraper of either server would find
TWIN_METRICS = (
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:gen_throughput",
    "sglang:spec_accept_length",
    "sglang:prompt_tokens_total",
    "sglang:generation_tokens_total",
    "sglang:e2e_request_latency_seconds",
    "sglang:time_to_first_token_seconds",
    "sglang:inter_token_latency_seconds",
    "sglang:request_time_per_output_token_seconds",
    "sglang:spec_verify_calls_total",
    "sglang:spec_num_draft_tokens",
)


# --- answers and their shapes ---------------------------------------------------------------------------------------
@dataclass
class Answer:
    """One HTTP answer: status, content-type family (json, sse, text, prometheus, none) and the decoded body."""

    status: int
    family: str
    body: Any


def _family(resp: httpx.Response) -> str:
    """``json``, ``sse``, ``prometheus`` (text format 0.0.4 or OpenMetrics), ``text`` (other text/*), ``none`` (no
    Content-Type header), else the media type itself."""
    header = resp.headers.get("content-type", "")
    media = header.split(";")[0].strip().lower()
    if media == "text/event-stream":
        return "sse"
    if media == "application/json":
        return "json"
    if "version=0.0.4" in header or media == "application/openmetrics-text":
        return "prometheus"
    return "text" if media.startswith("text/") else media or "none"


def _answer(resp: httpx.Response) -> Answer:
    family = _family(resp)
    if family == "json":
        return Answer(resp.status_code, family, resp.json())
    return Answer(resp.status_code, family, resp.text)


def _read_sse(resp: httpx.Response, after_first: Callable[[], None] | None = None) -> Answer:
    """A streamed answer: the list of data events (decoded JSON, or the raw string such as ``[DONE]``)."""
    if _family(resp) != "sse":
        resp.read()
        return _answer(resp)
    events: list[Any] = []
    for line in resp.iter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        try:
            events.append(json.loads(data))
        except json.JSONDecodeError:
            events.append(data)
        if after_first is not None and len(events) == 1:
            after_first()
    return Answer(resp.status_code, "sse", events)


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    return "str"


def json_shape(value: Any, path: str = "$") -> set[tuple[str, str]]:
    """(json-path, type) pairs: objects by key (all-digit keys, such as ``step_time_dict``'s batch sizes, as
    ``<n>``), arrays by the union of their items' shapes (``[]``), scalars as int/float/str/bool/null."""
    if isinstance(value, dict):
        out = {(path, "object")}
        for k, v in value.items():
            key = "<n>" if re.fullmatch(r"\d+", str(k)) else str(k)
            out |= json_shape(v, f"{path}.{key}")
        return out
    if isinstance(value, list):
        out = {(path, "array")}
        for v in value:
            out |= json_shape(v, f"{path}[]")
        return out
    return {(path, _scalar(value))}


def shape(ans: Answer) -> set[tuple[str, str]]:
    """The shape of an answer: ``$status``, ``$content-type``, then the body (SSE: the ``$first`` and ``$last`` data
    events, ``$any`` the union of all of them, ``$done`` the terminator; a text body only as ``$text``)."""
    out = {("$status", str(ans.status)), ("$content-type", ans.family)}
    if ans.family == "json":
        return out | json_shape(ans.body)
    if ans.family == "sse":
        data = [e for e in ans.body if not isinstance(e, str)]
        if data:
            out |= json_shape(data[0], "$first") | json_shape(data[-1], "$last")
            out |= {pair for event in data for pair in json_shape(event, "$any")}
        if ans.body and isinstance(ans.body[-1], str):
            out.add(("$done", ans.body[-1]))
        return out
    return out | {("$text", "empty" if not ans.body else "text")}


@dataclass(frozen=True)
class Diff:
    request: str
    kind: str
    path: str
    detail: str

    def __str__(self) -> str:
        return f"{self.request} | {self.kind} | {self.path} | {self.detail}"


def diff(request: str, real: Answer, twin: Answer) -> list[Diff]:
    """Status, content-type, missing-in-twin, extra-in-twin and type differences of one request."""
    r, t = shape(real), shape(twin)
    out: list[Diff] = []
    for kind, key in (("status", "$status"), ("content-type", "$content-type")):
        rv, tv = {v for p, v in r if p == key}, {v for p, v in t if p == key}
        if rv != tv:
            out.append(Diff(request, kind, key, f"real {sorted(rv)} twin {sorted(tv)}"))
    r_types: dict[str, set[str]] = {}
    t_types: dict[str, set[str]] = {}
    for p, v in r - {x for x in r if x[0] in ("$status", "$content-type")}:
        r_types.setdefault(p, set()).add(v)
    for p, v in t - {x for x in t if x[0] in ("$status", "$content-type")}:
        t_types.setdefault(p, set()).add(v)
    for p in sorted(set(r_types) | set(t_types)):
        if p not in t_types:
            out.append(Diff(request, "missing", p, f"real {sorted(r_types[p])}"))
        elif p not in r_types:
            out.append(Diff(request, "extra", p, f"twin {sorted(t_types[p])}"))
        elif r_types[p] != t_types[p]:
            out.append(Diff(request, "type", p, f"real {sorted(r_types[p])} twin {sorted(t_types[p])}"))
    return out


# --- the deliberate differences (docs/twin.md) ----------------------------------------------------------------------
@dataclass(frozen=True)
class Allowed:
    request: str
    kind: str
    pattern: str
    why: str

    def matches(self, d: Diff, server_args: frozenset[str] = frozenset()) -> bool:
        if not (glob(d.request, self.request) and d.kind == self.kind):
            return False
        if SERVER_ARGS not in self.pattern:
            return glob(d.path, self.pattern)
        prefix, suffix = self.pattern.split(SERVER_ARGS, 1)
        if not d.path.startswith(prefix):
            return False
        rest = d.path[len(prefix) :]
        key = re.split(r"[.\[]", rest, maxsplit=1)[0]
        return key in server_args and glob(rest[len(key) :], suffix)


def glob(text: str, pattern: str) -> bool:
    """fnmatch's ``*`` and ``?`` only: brackets are literal (json paths have ``[]``)."""
    regex = re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")
    return re.fullmatch(regex, text) is not None


def server_args_fields(server_info: Any) -> frozenset[str]:
    """The ServerArgs field names of a real 0.5.23 ``/server_info`` body: its top level is the resolved server args
    plus server facts, its ``internal_states[0]`` the same args plus scheduler state, so the keys in both are the
    args (read off the answer: the test process does not import sglang)."""
    states = server_info.get("internal_states") or [{}]
    return frozenset(server_info) & frozenset(states[0])


def allowed_differences(doc: Path = DOC) -> list[Allowed]:
    """The rows of the table between the markers in docs/twin.md (``request | kind | pattern | why``)."""
    text = doc.read_text()
    assert BEGIN in text and END in text, f"{doc} lacks the {BEGIN} ... {END} table"
    rows = []
    for line in text.split(BEGIN, 1)[1].split(END, 1)[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or set(cells[0]) <= set("-: ") or cells[0] == "request":
            continue
        request, kind, pattern, why = (c.strip("`") if i < 3 else c for i, c in enumerate(cells))
        assert kind in KINDS, f"unknown kind {kind!r} in {line!r}"
        assert why, f"a row without a reason: {line!r}"
        rows.append(Allowed(request, kind, pattern, why))
    return rows


# --- the request list -----------------------------------------------------------------------------------------------
def _post(c: httpx.Client, path: str, body: Any) -> Answer:
    return _answer(c.post(path, json=body))


def _stream(c: httpx.Client, path: str, body: Any, after_first: Callable[[], None] | None = None) -> Answer:
    with c.stream("POST", path, json=body) as resp:
        return _read_sse(resp, after_first)


def _flush_while_streaming(c: httpx.Client, out: dict[str, Answer]) -> Answer:
    """A streamed request long enough to be running when ``/flush_cache`` arrives after its first event."""
    body = {"text": PROMPT, "sampling_params": {"temperature": 0, "max_new_tokens": 160, "ignore_eos": True}}

    def flush() -> None:
        out["POST /flush_cache busy"] = _answer(c.post("/flush_cache"))

    return _stream(c, "/generate", {**body, "stream": True}, flush)


def run_requests(base: str, model: str) -> dict[str, Answer]:
    """Every request of the comparison, in order, against the server at ``base``."""
    out: dict[str, Answer] = {}
    with httpx.Client(base_url=base, timeout=120.0, trust_env=False) as c:
        for path in ("/health", "/health_generate", "/get_server_info", "/server_info", "/v1/models", "/model_info"):
            out[f"GET {path}"] = _answer(c.get(path))
        out["GET /get_model_info"] = _answer(c.get("/get_model_info"))
        out["POST /generate text"] = _post(c, "/generate", {"text": PROMPT, "sampling_params": GREEDY})
        out["POST /generate text stream"] = _stream(
            c, "/generate", {"text": PROMPT, "sampling_params": GREEDY, "stream": True}
        )
        out["POST /generate input_ids"] = _post(c, "/generate", {"input_ids": [5, 6, 7, 8], "sampling_params": GREEDY})
        out["POST /generate text batch"] = _post(
            c, "/generate", {"text": [PROMPT, "one two"], "sampling_params": GREEDY}
        )
        out["POST /flush_cache idle"] = _answer(c.post("/flush_cache"))
        out["GET /server_info after flush"] = _answer(c.get("/server_info"))
        out["POST /generate stream during flush"] = _flush_while_streaming(c, out)
        bad = {
            "max_new_tokens -1": {"text": PROMPT, "sampling_params": {"max_new_tokens": -1}},
            "max_new_tokens str": {"text": PROMPT, "sampling_params": {"max_new_tokens": "x"}},
            "unknown sampling key": {"text": PROMPT, "sampling_params": {"max_new_tokens": 4, "bogus": 1}},
            "no input": {"sampling_params": GREEDY},
            "json list": [{"text": PROMPT}],
        }
        for name, body in bad.items():
            out[f"POST /generate bad {name}"] = _post(c, "/generate", body)
        out["POST /generate bad not json"] = _answer(
            c.post("/generate", content=b"{not json", headers={"content-type": "application/json"})
        )
        out["GET /no_such_path"] = _answer(c.get("/no_such_path"))
        chat = {"model": model, "messages": [{"role": "user", "content": "how fast is the draft ?"}]}
        chat |= {"max_tokens": 8, "temperature": 0}
        comp = {"model": model, "prompt": PROMPT, "max_tokens": 8, "temperature": 0}
        out["POST /v1/completions"] = _post(c, "/v1/completions", comp)
        out["POST /v1/completions stream"] = _stream(c, "/v1/completions", {**comp, "stream": True})
        out["POST /v1/chat/completions"] = _post(c, "/v1/chat/completions", chat)
        out["POST /v1/chat/completions spec details"] = _post(
            c, "/v1/chat/completions", {**chat, "return_spec_tokens_details": True}
        )
        out["POST /v1/chat/completions stream usage"] = _stream(
            c, "/v1/chat/completions", {**chat, "stream": True, "stream_options": {"include_usage": True}}
        )
        out["POST /v1/chat/completions default model"] = _post(c, "/v1/chat/completions", {**chat, "model": "default"})
        out["POST /v1/chat/completions bad max_tokens"] = _post(c, "/v1/chat/completions", {**chat, "max_tokens": -1})
        out["GET /metrics"] = _answer(c.get("/metrics"))
    return out


# --- the servers ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_answers(engines_python: Path, tiny_models: dict[str, Path], server_logs: Path) -> Iterator[dict[str, Answer]]:
    log = server_logs / "twin-vs-real.log"
    with start_sglang(
        engines_python,
        tiny_models["target"],
        draft=tiny_models["draft-partial"],
        config=CONFIG,
        log_path=log,
        env={"SGLANG_RECORD_STEP_TIME": "1"},  # as the harness launches it (and the twin helper does)
    ) as base:
        model = httpx.get(base + "/v1/models", timeout=30).json()["data"][0]["id"]
        yield run_requests(base, model)


@pytest.fixture(scope="module")
def twin_answers(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Answer]]:
    steps, topk, tokens = CONFIG
    args = ["--model-path", str(tiny_models["target"]), "--dtype", "float16", "--emulate-version", "0.5.23"]
    args += ["--mem-fraction-static", "0.5", "--decode-log-interval", "1", "--enable-metrics"]
    args += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(tiny_models["draft-partial"])]
    args += ["--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk)]
    args += ["--speculative-num-draft-tokens", str(tokens), "--twin-launch-scale", "0.02"]
    logs = str(tmp_path_factory.mktemp("twin-vs-real"))
    with twin_gpu(time_scale=1.0, seed=5, log_dir=logs) as gpu, twin_engine(gpu.url, args, log_dir=logs) as eng:
        model = httpx.get(eng.url + "/v1/models", timeout=30).json()["data"][0]["id"]
        yield run_requests(eng.url, model)


@pytest.fixture(scope="module")
def differences(real_answers: dict[str, Answer], twin_answers: dict[str, Answer]) -> list[Diff]:
    assert real_answers.keys() == twin_answers.keys()
    return [d for name in real_answers for d in diff(name, real_answers[name], twin_answers[name])]


@pytest.fixture(scope="module")
def server_args(real_answers: dict[str, Answer]) -> frozenset[str]:
    fields = server_args_fields(real_answers["GET /server_info"].body)
    assert len(fields) > 300 and "speculative_num_steps" in fields, sorted(fields)[:20]
    return fields


# --- the tests ------------------------------------------------------------------------------------------------------
def test_every_difference_is_listed_as_deliberate(differences: list[Diff], server_args: frozenset[str]) -> None:
    rows = allowed_differences()
    new = [d for d in differences if not any(row.matches(d, server_args) for row in rows)]
    assert not new, "differences from the real sglang 0.5.23 not listed in docs/twin.md:\n" + "\n".join(map(str, new))


def test_every_listed_difference_still_occurs(differences: list[Diff], server_args: frozenset[str]) -> None:
    stale = [row for row in allowed_differences() if not any(row.matches(d, server_args) for d in differences)]
    assert not stale, "rows of docs/twin.md's twin-vs-real table that no longer occur:\n" + "\n".join(
        f"{r.request} | {r.kind} | {r.pattern}" for r in stale
    )


def _metric_families(text: str) -> set[str]:
    """The ``sglang:`` metric family names of a Prometheus text body (histogram and summary suffixes dropped)."""
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line.startswith("sglang:")}
    return {re.sub(r"_(bucket|count|sum|created)$", "", n) for n in names}


def test_metrics_have_the_series_the_twin_renders(
    real_answers: dict[str, Answer], twin_answers: dict[str, Answer]
) -> None:
    """Both ``/metrics`` are Prometheus text with the twin's series, and every series the twin renders is one the
    real server has (label sets are not compared: see docs/twin.md)."""
    families = {}
    for who, answers in (("real", real_answers), ("twin", twin_answers)):
        ans = answers["GET /metrics"]
        assert ans.status == 200 and ans.family == "prometheus" and isinstance(ans.body, str), (who, ans.status)
        families[who] = _metric_families(ans.body)
        missing = [m for m in TWIN_METRICS if m not in families[who]]
        assert not missing, f"{who} /metrics lacks {missing}"
    assert families["twin"] <= families["real"], sorted(families["twin"] - families["real"])


def test_the_shape_diff_itself() -> None:
    """The reduction and the diff on known answers (runs without any server)."""
    real = Answer(200, "json", {"a": 1, "b": [{"c": "x"}], "d": {"7": 0.5}})
    twin = Answer(400, "json", {"a": 1.0, "b": [{"c": "x", "e": None}], "d": {"12": 0.25}, "f": True})
    got = {(d.kind, d.path) for d in diff("r", real, twin)}
    assert got == {("status", "$status"), ("type", "$.a"), ("extra", "$.b[].e"), ("extra", "$.f")}
    assert ("missing", "$.x") in {(d.kind, d.path) for d in diff("r", Answer(200, "json", {"x": 1}), twin)}
    row = Allowed("POST /generate*", "extra", "$.meta_info.twin_*", "twin clock stamps")
    assert row.matches(Diff("POST /generate text", "extra", "$.meta_info.twin_finish_ns", ""))
    assert not row.matches(Diff("POST /generate text", "missing", "$.meta_info.twin_finish_ns", ""))
    args_row = Allowed("GET /server_info", "missing", f"$.{SERVER_ARGS}*", "the parser models a few")
    fields = server_args_fields(
        {"dtype": "auto", "cfg": {}, "status": "ready", "internal_states": [{"dtype": 1, "cfg": 2}]}
    )
    assert fields == {"dtype", "cfg"}
    assert args_row.matches(Diff("GET /server_info", "missing", "$.cfg.decode.bs[]", ""), fields)
    assert not args_row.matches(Diff("GET /server_info", "missing", "$.status", ""), fields)
    sse_shape = shape(Answer(200, "sse", [{"i": 1}, {"i": 2, "z": None}, "[DONE]"]))
    assert (
        ("$last.z", "null") in sse_shape and ("$first.z", "null") not in sse_shape and ("$done", "[DONE]") in sse_shape
    )
    assert allowed_differences(), "the table in docs/twin.md is empty or unparsed"
