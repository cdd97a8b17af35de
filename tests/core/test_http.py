"""harness.core.http: every httpx client of the harness on one verifying TLS context per process."""

from __future__ import annotations

import ast
import ssl
from pathlib import Path

from harness.core.http import http_client, tls_context

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [p for d in ("harness", "pilots", "policies") for p in (ROOT / d).rglob("*.py")]
HTTPX_MAKERS = {"Client", "AsyncClient", "get", "post", "put", "delete", "request", "stream"}


def test_clients_share_one_context_that_still_verifies_https() -> None:
    with http_client(timeout=1.0) as a, http_client(timeout=1.0, trust_env=False) as b:
        pools = [c._transport._pool for c in (a, b)]  # type: ignore[attr-defined]
        assert pools[0]._ssl_context is pools[1]._ssl_context is tls_context()
    ctx = tls_context()
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname and ctx.get_ca_certs() is not None


def test_no_module_makes_an_httpx_client_of_its_own() -> None:
    """A direct ``httpx.Client(...)`` or ``httpx.get(...)`` loads the CA bundle again (~20-40 ms of CPU a client)."""
    found = []
    for path in SOURCES:
        if path == ROOT / "harness" / "core" / "http.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            f = node.func if isinstance(node, ast.Call) else None
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "httpx":
                if f.attr in HTTPX_MAKERS:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} httpx.{f.attr}")
    assert not found, f"use harness.core.http.http_client / http_get: {found}"
