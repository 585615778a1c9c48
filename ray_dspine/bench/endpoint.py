"""Talking to the endpoint outside the measured requests: the API key, `GET /v1/models` (also the
reachability check) and `GET /v1/dspine/engine` (engine arguments and model/draft hashes for the
receipt; a 404 is fine)."""

from __future__ import annotations

import json
import os

import httpx
from pydantic import JsonValue

API_KEY_ENV = "DSPINE_API_KEY"
METADATA_TIMEOUT_S = 30.0


class EndpointUnreachable(RuntimeError):
    """The endpoint refused or did not answer a connection."""


def api_key_from_env() -> str | None:
    return os.environ.get(API_KEY_ENV) or None


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def error_message(status: int, raw: bytes) -> str:
    """`HTTP <status>: <message>` from an OpenAI-style (or FastAPI-style) error body."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return f"HTTP {status}: {raw[:200].decode('utf-8', 'replace')}"
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and err.get("message"):
            return f"HTTP {status}: {err['message']}"
        if data.get("detail"):
            return f"HTTP {status}: {data['detail']}"
    return f"HTTP {status}: {str(data)[:200]}"


async def fetch_models(http: httpx.AsyncClient, endpoint: str, api_key: str | None) -> list[str]:
    """Model ids from GET /v1/models; raises EndpointUnreachable when nothing answers."""
    try:
        resp = await http.get(
            endpoint.rstrip("/") + "/v1/models", headers=auth_headers(api_key), timeout=METADATA_TIMEOUT_S
        )
    except httpx.TransportError as exc:
        raise EndpointUnreachable(f"cannot reach {endpoint}: {type(exc).__name__}: {exc}") from exc
    if resp.status_code >= 400:
        raise EndpointUnreachable(f"{endpoint}/v1/models answered {error_message(resp.status_code, resp.content)}")
    data = resp.json().get("data") or []
    return [str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id")]


async def fetch_engine_info(http: httpx.AsyncClient, endpoint: str, api_key: str | None) -> dict[str, JsonValue] | None:
    """GET /v1/dspine/engine (engine args, model/draft hashes); None on 404 or any failure."""
    try:
        resp = await http.get(
            endpoint.rstrip("/") + "/v1/dspine/engine", headers=auth_headers(api_key), timeout=METADATA_TIMEOUT_S
        )
        if resp.status_code >= 400:
            return None
        data = resp.json()
    except (httpx.HTTPError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None
