"""Helpers for the Terminal-Bench pilot tests: the Harbor venv and a scripted OpenAI-compatible chat server.

The scripted server is the LLM *peer* of Terminus 2 (not the thing under test): it answers chat completions from a
script, and can hang one call to reproduce a never-returning generation.
"""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pilots.terminalbench.harbor_install import HarborNotFoundError, resolve_harbor_bin


def harbor_bin_or_skip() -> Path:
    """The Harbor executable (.harbor-venv or $HARBOR_BIN). Under CI a missing Harbor is a failure, not a skip."""
    try:
        return resolve_harbor_bin()
    except HarborNotFoundError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{exc.message}; CI must run `harness pilot setup --suite terminalbench` first")
        pytest.skip(f"Harbor not installed ({exc.message}); run `harness pilot setup --suite terminalbench`")


def terminus_reply(keystrokes: str = "ls\n", complete: bool = False) -> str:
    return json.dumps(
        {
            "analysis": "scripted",
            "plan": "scripted",
            "commands": [{"keystrokes": keystrokes, "duration": 0.1}],
            "task_complete": complete,
        }
    )


class ScriptedChatServer:
    """``/v1/chat/completions`` answering ``replies`` in order; a reply ``None`` hangs until ``close()``."""

    def __init__(self, replies: list[str | None]) -> None:
        self.replies = list(replies)
        self.calls: list[dict] = []
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_GET(self) -> None:  # /v1/models
                self._send(
                    {"object": "list", "data": [{"id": "scripted-model", "object": "model", "max_model_len": 8192}]}
                )

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                server.calls.append(body)
                idx = len(server.calls) - 1
                reply = server.replies[min(idx, len(server.replies) - 1)] if server.replies else ""
                if reply is None:
                    server._stop.wait(120)
                    return
                self._send(
                    {
                        "id": f"c{idx}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", "scripted-model"),
                        "choices": [
                            {"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}
                        ],
                        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
                    }
                )

            def _send(self, obj: dict) -> None:
                data = json.dumps(obj).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
