"""What every scenario shares: the settings, one HTTP client, the model, clocks, progress, and the normal request.

The normal request is a short chat turn (a fixed prompt, never logged) with `max_tokens` from the settings;
it is correct when the answer is 200 with non-empty content. The capacity (completions/s) is filled in by
the concurrency scenario and read by the soak.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from ..bench.endpoint import auth_headers
from .exchange import Exchange, send
from .result import Progress
from .settings import DrillSettings

CHAT = "/v1/chat/completions"
NORMAL_PROMPT = "Count from one to twenty, separated by spaces."


@dataclass
class DrillContext:
    settings: DrillSettings
    http: httpx.AsyncClient
    model: str
    progress: Progress
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    capacity_rps: float | None = None

    def url(self, path: str) -> str:
        return self.settings.endpoint.rstrip("/") + path

    def headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**(extra or {}), **auth_headers(self.settings.api_key)}

    def chat_body(self, *, stream: bool, max_tokens: int | None = None) -> bytes:
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": NORMAL_PROMPT}],
            "max_tokens": max_tokens or self.settings.max_tokens,
            "temperature": 0.0,
            "stream": stream,
        }
        return json.dumps(body).encode()

    async def chat(
        self, *, stream: bool, max_tokens: int | None = None, headers: dict[str, str] | None = None, **kwargs
    ) -> Exchange:
        """One chat request under the client timeout (kwargs go to exchange.send)."""
        return await send(
            self.http, "POST", self.url(CHAT), body=self.chat_body(stream=stream, max_tokens=max_tokens),
            headers=self.headers({"content-type": "application/json", **(headers or {})}),
            timeout_s=self.settings.client_timeout_s, clock=self.clock, **kwargs,
        )

    async def get(self, path: str, timeout_s: float | None = None) -> Exchange:
        return await send(self.http, "GET", self.url(path), headers=self.headers(),
                          timeout_s=timeout_s or self.settings.client_timeout_s, clock=self.clock)


def normal_ok(ex: Exchange) -> bool:
    """The normal request answered correctly: 200, whole, non-empty content."""
    return ex.kind == "ok" and ex.status == 200 and ex.content_chars > 0
