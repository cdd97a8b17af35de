"""The harness's HTTP clients: httpx with one TLS context per process.

httpx builds a TLS context (and reads the CA bundle) for every client it makes, ~20-40 ms of CPU each, even for the
plain-HTTP loopback URLs that nearly all of the harness's clients talk to; a sweep makes dozens. ``client`` shares
one verified context instead, so https URLs are still checked against the same CA bundle.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The process's verifying TLS context (httpx's default: certifi's CA bundle), made on first use."""
    return httpx.create_ssl_context()


def http_client(**kwargs: Any) -> httpx.Client:
    """``httpx.Client(**kwargs)`` on the shared TLS context (unless ``verify`` is given)."""
    kwargs.setdefault("verify", tls_context())
    return httpx.Client(**kwargs)


def http_get(url: str, **kwargs: Any) -> httpx.Response:
    """``httpx.get`` on the shared TLS context."""
    trust_env = kwargs.pop("trust_env", True)
    with http_client(trust_env=trust_env) as http:
        return http.get(url, **kwargs)
