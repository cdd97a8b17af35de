"""The shared HTTP layer (harness/core/httpserve.py) on a real loopback socket: routes, path parameters, JSON in/out, the
one error shape for every failure, chunked streams, and a stream whose client goes away is closed."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from harness.core.httpserve import Request, Response, Router, Stream, error, make_server, serve_in_thread, sse


@pytest.fixture
def served() -> Iterator[tuple[str, dict]]:
    seen: dict = {"closed": threading.Event()}
    r = Router()

    def echo(req: Request) -> dict:
        return {
            "method": req.method,
            "eid": req.params["eid"],
            "q": req.query,
            "body": req.json(),
            "hdr": req.headers.get("X-Test"),
        }

    def numbers(req: Request) -> dict:
        return {"n": req.int_param("n"), "x": req.float_param("x", 0.5)}

    def endless(req: Request) -> Stream:
        def gen() -> Iterator[str]:
            try:
                i = 0
                while True:
                    yield sse({"i": i})
                    i += 1
            finally:
                seen["closed"].set()  # runs when the server closes the generator after the client left

        return Stream(gen())

    r.add("GET,POST", "/v1/echo/{eid}", echo)
    r.add("GET", "/numbers", numbers)
    r.add("GET", "/boom", lambda req: {"x": 1 / 0})
    r.add("GET", "/teapot", lambda req: error(418, "short and stout", spout=True))
    r.add("GET", "/text", lambda req: Response(200, text="plain", content_type="text/plain"))
    r.add("GET", "/stream", lambda req: Stream(iter([sse({"a": 1}), sse("[DONE]")])))
    r.add("GET", "/endless", endless)
    srv = make_server("127.0.0.1", 0, r, server_header="test-svc")
    serve_in_thread(srv)
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", seen
    finally:
        srv.shutdown()
        srv.server_close()


def test_routes_json_and_params(served):
    url, _ = served
    r = httpx.post(f"{url}/v1/echo/abc?k=1&k=2", json={"a": [1, 2]}, headers={"X-Test": "yes"})
    assert (
        r.status_code == 200 and r.headers["content-type"] == "application/json" and r.headers["server"] == "test-svc"
    )
    assert r.json() == {"method": "POST", "eid": "abc", "q": {"k": "2"}, "body": {"a": [1, 2]}, "hdr": "yes"}
    assert httpx.get(f"{url}/numbers", params={"n": "7"}).json() == {"n": 7, "x": 0.5}
    assert httpx.get(f"{url}/text").text == "plain"
    head = httpx.head(f"{url}/text")
    assert head.status_code == 200 and head.content == b"" and head.headers["content-length"] == "5"


@pytest.mark.parametrize(
    ("method", "path", "status", "needle"),
    [
        ("GET", "/nope", 404, "GET /nope: not found"),
        ("DELETE", "/v1/echo/x", 405, "method not allowed"),
        ("GET", "/numbers", 400, "missing query parameter n"),
        ("GET", "/numbers?n=seven", 400, "n must be an integer, got 'seven'"),
        ("GET", "/numbers?n=1&x=big", 400, "x must be a number, got 'big'"),
        ("GET", "/boom", 500, "internal error: ZeroDivisionError"),
        ("GET", "/teapot", 418, "short and stout"),
    ],
)
def test_every_failure_has_the_one_error_shape(served, method, path, status, needle):
    url, _ = served
    r = httpx.request(method, url + path)
    assert r.status_code == status and needle in r.json()["error"]["message"]


def test_bad_json_body_is_400_and_the_server_keeps_serving(served):
    url, _ = served
    r = httpx.post(f"{url}/v1/echo/a", content=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("invalid JSON body")
    assert httpx.get(f"{url}/teapot").json()["error"]["spout"] is True


def test_chunked_sse_stream(served):
    url, _ = served
    with httpx.stream("GET", f"{url}/stream") as r:
        assert r.headers["content-type"] == "text/event-stream" and r.headers["transfer-encoding"] == "chunked"
        events = [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]
    assert [json.loads(events[0]), events[1]] == [{"a": 1}, "[DONE]"]


def test_a_stream_whose_client_leaves_is_closed(served):
    url, seen = served
    host, port = url.removeprefix("http://").split(":")
    with contextlib.closing(socket.create_connection((host, int(port)))) as s:
        s.sendall(b"GET /endless HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"200" in s.recv(4096)
    assert seen["closed"].wait(10.0), "the stream's generator was not closed after the client went away"


def test_bind_failure_is_an_oserror():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(OSError):
            make_server("127.0.0.1", s.getsockname()[1], Router())


def test_bodies_that_are_not_a_utf8_json_object_are_400s_naming_what_came(served) -> None:
    """Issue 38 A4: these used to be 500s (a route's ``body.get`` on a list, a decode error in ``json.loads``)."""
    url, _ = served
    for content, says in (
        (b'{"a": "\xff\xfe"}', "not UTF-8"),
        (b"[1, 2, 3]", "must be a JSON object, got list"),
        (b'"text"', "must be a JSON object, got str"),
        (b"{not json", "invalid JSON body"),
    ):
        r = httpx.post(f"{url}/v1/echo/x", content=content, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and says in r.json()["error"]["message"], (content, r.text)
    ok = httpx.post(f"{url}/v1/echo/x", json={"a": 1})
    assert ok.status_code == 200 and ok.json()["body"] == {"a": 1}


def test_a_web_page_cannot_change_state_of_a_loopback_service(served) -> None:
    """Issue 38 A6: a ``text/plain`` POST with a foreign Origin (what a web page can send without a preflight), or a
    hostile Host (DNS rebinding), changed the twin GPU's limit and clocks. Programs send neither and are served."""
    url, _ = served
    post = f"{url}/v1/echo/x"
    for headers in (
        {"Origin": "https://evil.example", "Content-Type": "text/plain"},
        {"Origin": "null"},
        {"Host": "evil.example:8000"},
    ):
        r = httpx.post(post, content=b'{"a": 1}', headers=headers)
        assert r.status_code == 403 and "refused" in r.json()["error"]["message"], (headers, r.text)
    for headers in ({}, {"Origin": "http://localhost:3000"}, {"Host": "localhost"}, {"Origin": "http://127.0.0.1:9"}):
        assert httpx.post(post, json={"a": 1}, headers=headers).status_code == 200, headers
    assert httpx.get(f"{url}/v1/echo/x", headers={"Origin": "https://evil.example"}).status_code == 200  # reads stay


def test_the_twin_gpu_refuses_a_cross_site_power_limit(tmp_path) -> None:
    from _twin_helpers import twin_gpu

    with twin_gpu(time_scale=20) as gpu:
        before = gpu.get("/v1/power_limit").json()["power_limit_w"]
        r = httpx.post(
            f"{gpu.url}/v1/power_limit",
            content=json.dumps({"power_limit_w": 40}),
            headers={"Origin": "https://evil.example", "Content-Type": "text/plain"},
        )
        assert r.status_code == 403 and gpu.get("/v1/power_limit").json()["power_limit_w"] == before
