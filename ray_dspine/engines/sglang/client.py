"""The few HTTP calls the engine makes to its SGLang server (httpx, injected).

Endpoints (SGLang 0.5.23's http_server.py): `GET /health` and `GET /health_generate` share one handler: it
answers 503 while the server starts, then runs a 1-token generation (SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION,
on by default) and answers 200 as soon as the scheduler answers anything, 503 after
SGLANG_HEALTH_CHECK_TIMEOUT (20 s); `POST /v1/chat/completions` and `/v1/completions` stream Server-Sent Events
(`data: {json}` lines, then `data: [DONE]`); `GET /v1/loads?include=core,memory,spec` (sgl-project/sglang
#16976) answers `{"timestamp", "version", "dp_rank_count", "loads": [per-DP-rank GetLoadsReqOutput]}`;
`GET /metrics` is Prometheus text when launched with --enable-metrics (404 otherwise);
`POST /abort_request {"rid": ...}` aborts a request. Closing a stream is meant to abort it server-side,
but several releases leave such requests decoding (sgl-project/sglang#36333, #37833), so the engine also
posts /abort_request when a stream is cancelled.
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator

import httpx


class UpstreamError(Exception):
    """A non-200 answer from the SGLang server."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _error_message(raw: bytes) -> str:
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")[:500]
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and "message" in inner:
            return str(inner["message"])
    return str(body)[:500]


class SGLangClient:
    def __init__(self, http: httpx.AsyncClient):
        self._http = http

    async def healthy(self, base_url: str) -> bool:
        try:
            response = await self._http.get(f"{base_url}/health", timeout=5.0)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def health_generate(self, base_url: str, timeout_s: float) -> bool:
        """True on a 200 from /health_generate within `timeout_s`; any error or other status is False."""
        try:
            response = await self._http.get(f"{base_url}/health_generate", timeout=timeout_s)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def stream(self, base_url: str, path: str, payload: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Yield each SSE event's JSON until `[DONE]`; closing the iterator closes the connection."""
        async with self._http.stream("POST", f"{base_url}{path}", json=payload) as response:
            if response.status_code != 200:
                raise UpstreamError(response.status_code, _error_message(await response.aread()))
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    return
                if data:
                    yield json.loads(data)

    async def count_tokens(self, base_url: str, payload: dict[str, Any]) -> dict[str, Any]:
        response = await self._http.post(f"{base_url}/v1/messages/count_tokens", json=payload, timeout=30.0)
        if response.status_code != 200:
            raise UpstreamError(response.status_code, _error_message(response.content))
        return response.json()

    async def loads(self, base_url: str, include: str = "core,memory,spec") -> dict[str, Any]:
        response = await self._http.get(f"{base_url}/v1/loads", params={"include": include}, timeout=5.0)
        if response.status_code != 200:
            raise UpstreamError(response.status_code, _error_message(response.content))
        return response.json()

    async def metrics(self, base_url: str) -> str | None:
        response = await self._http.get(f"{base_url}/metrics", timeout=5.0)
        return response.text if response.status_code == 200 else None

    async def abort(self, base_url: str, rid: str) -> None:
        try:
            await self._http.post(f"{base_url}/abort_request", json={"rid": rid}, timeout=5.0)
        except httpx.HTTPError:
            pass  # the server is gone or busy; a dead request cannot run on
