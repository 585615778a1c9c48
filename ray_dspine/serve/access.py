"""The API-key gate in front of every route of the ingress app.

Rules:
  key        the key is the value of the environment variable named by ServerConfig.api_key_env in the
             ingress replica's process; unset or empty: every request passes (no key configured).
  gate       with a key, every HTTP request except GET/HEAD of LIVENESS_PATH needs `Authorization: Bearer <key>`
             or `x-api-key: <key>` (Anthropic's SDK sends the key that way), compared in constant time;
             otherwise 401 with an error object (OpenAI's shape, Anthropic's under /v1/messages), code
             `invalid_api_key`, before any route, framework handler or docs page runs, so a route added later
             is gated too, and an unknown path answers 401 rather than revealing 404.
  liveness   LIVENESS_PATH answers without the key and says only that the process serves HTTP.
The key is never logged or put in an answer.
"""

from __future__ import annotations

import hmac
import os
from typing import Callable

from .errors import ApiError, error_response

LIVENESS_PATH = "/health/live"


def current_api_key() -> str:
    """The key of the ingress serving this request: its core's `api_key_env` (a Serve replica's servable)."""
    from ray import serve

    try:
        core = serve.get_replica_context().servable_object.core
    except Exception:  # not inside a Serve replica: the default variable
        return os.environ.get("DSPINE_API_KEY", "")
    env = core.server.api_key_env
    return os.environ.get(env, "") if env else ""


REFUSAL = "invalid or missing API key: send `Authorization: Bearer <key>` or `x-api-key: <key>`"


def key_matches(authorization: str, api_key_header: str, key: str) -> bool:
    """Whether either header carries `key` (rule `gate`); both are compared, so the time does not say which."""
    bearer = hmac.compare_digest(authorization.encode("utf-8", "replace"), f"Bearer {key}".encode("utf-8"))
    plain = hmac.compare_digest(api_key_header.encode("utf-8", "replace"), key.encode("utf-8"))
    return bearer or plain


class ApiKeyGate:
    """Pure ASGI middleware applying the `gate` rule."""

    def __init__(self, app, key: Callable[[], str] = current_api_key):
        self.app = app
        self.key = key

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and not _open(scope):
            key = self.key()
            if key:
                headers = dict(scope.get("headers") or [])
                given = headers.get(b"authorization", b"").decode("latin-1")
                if not key_matches(given, headers.get(b"x-api-key", b"").decode("latin-1"), key):
                    refusal = ApiError(401, REFUSAL, code="invalid_api_key")
                    await error_response(refusal, path=scope.get("path", ""))(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def _open(scope) -> bool:
    return scope.get("path") == LIVENESS_PATH and scope.get("method") in ("GET", "HEAD")
