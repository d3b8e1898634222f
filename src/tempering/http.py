"""The one HTTP client for every server tempering talks to (vLLM, teacher servers, plan judges, bundle
generators, OpenEnv): JSON over httpx, with the timeout, the retries of transient answers and the
bearer key handled here, and every failure one `ServerError` whose `kind` the caller turns into its
own message (what to start, which key to fix)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

TRANSIENT = frozenset({429, 500, 502, 503, 504})
"""Statuses worth a retry: rate limits and a server's hiccups (never a refusal of the request)."""


class ServerError(Exception):
    """A call that got no usable answer. `kind`: `status` (an HTTP error status, with `status` and the
    start of `body`), `timeout` (no answer within the timeout), `unreachable` (no connection, or one cut
    mid-answer) or `not_json` (an answer that is not JSON)."""

    def __init__(self, kind: str, url: str, reason: str, status: int | None = None, body: bytes = b"") -> None:
        super().__init__(f"{url}: {reason}")
        self.kind, self.url, self.reason, self.status, self.body = kind, url, reason, status, body


def request_json(
    method: str,
    url: str,
    body: Any = None,
    *,
    timeout_s: float,
    api_key: str | None = None,
    retries: int = 0,
    backoff_s: float = 0.5,
) -> Any:
    """The decoded JSON answer of one call (an empty answer is `{}`); a transient status is retried up
    to `retries` times, waiting `backoff_s` doubling; anything else raises `ServerError` at once."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    content = None if body is None else json.dumps(body).encode()
    for attempt in range(retries + 1):
        try:
            r = httpx.request(method, url, content=content, headers=headers, timeout=timeout_s)
        except httpx.TimeoutException:
            raise ServerError("timeout", url, f"no answer within {timeout_s:g} s") from None
        except httpx.TransportError as e:
            raise ServerError("unreachable", url, str(e) or type(e).__name__) from None
        if r.status_code in TRANSIENT and attempt < retries:
            time.sleep(backoff_s * 2**attempt)
            continue
        if r.status_code >= 400:
            raise ServerError("status", url, f"HTTP {r.status_code}", r.status_code, r.content[:300])
        raw = r.content
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise ServerError("not_json", url, f"not JSON: {raw[:200]!r}", r.status_code, raw[:300]) from None
    raise AssertionError("unreachable: the last attempt returns or raises")
