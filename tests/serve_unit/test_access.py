"""The API-key gate (ray_dspine/serve/access.py) on every route of the ingress's real FastAPI app.

The routes are enumerated from the app itself, so a route added without the gate fails here.
"""

import asyncio

import pytest
from starlette.routing import Route

from asgi_app import MODEL, client, ingress_app

from ray_dspine.serve.access import LIVENESS_PATH

KEY = "k-123"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


def routes_of(routes, prefix=""):
    """Every Route under `routes`, walking included routers (FastAPI nests them), with its full path."""
    for route in routes:
        if isinstance(route, Route):
            yield prefix + route.path, route
        elif hasattr(route, "original_router"):
            inner = prefix + (getattr(getattr(route, "include_context", None), "prefix", "") or "")
            yield from routes_of(route.original_router.routes, inner)
        else:
            raise AssertionError(f"a route of unknown kind: {route!r}")


def requests_for_every_route(app):
    """(method, path) for each method of each route of the app, path parameters filled in."""
    out = []
    for path, route in routes_of(app.routes):
        path = path.replace("{model:path}", MODEL).replace("{response_id}", "resp_1")
        for method in sorted(route.methods or {"GET"}):
            out.append((method, path))
    return sorted(set(out))


def answers(app, calls, headers):
    async def go():
        async with client(app) as http:
            return [await http.request(m, p, json=BODY if m == "POST" else None, headers=headers) for m, p in calls]

    return asyncio.run(go())


@pytest.fixture
def gated(monkeypatch):
    monkeypatch.setenv("DSPINE_ASGI_TEST_KEY", KEY)
    app, _core = ingress_app(monkeypatch)
    return app


def test_the_app_has_the_routes_this_test_expects(gated):
    calls = set(requests_for_every_route(gated))
    for call in [("POST", "/v1/chat/completions"), ("POST", "/v1/completions"), ("POST", "/v1/messages"),
                 ("POST", "/v1/responses"), ("GET", "/v1/responses/resp_1"), ("GET", "/v1/models"),
                 ("GET", f"/v1/models/{MODEL}"), ("GET", "/v1/dspine/engine"), ("GET", "/health"),
                 ("GET", LIVENESS_PATH), ("GET", "/openapi.json")]:
        assert call in calls


def test_every_route_but_liveness_needs_the_key(gated):
    calls = requests_for_every_route(gated) + [("GET", "/no-such-route"), ("POST", "/v1/embeddings")]
    for (method, path), response in zip(calls, answers(gated, calls, {})):
        if path == LIVENESS_PATH and method in ("GET", "HEAD"):
            assert response.status_code == 200, path
            continue
        assert response.status_code == 401, (method, path, response.status_code)
        if method != "HEAD" and path.startswith("/v1/messages"):  # Anthropic's error shape
            assert response.json()["error"]["type"] == "authentication_error"
        elif method != "HEAD":  # a HEAD answer has no body
            assert response.json()["error"]["code"] == "invalid_api_key"
        assert KEY not in response.text


def test_wrong_key_is_refused_and_the_right_key_passes(gated):
    calls = requests_for_every_route(gated)
    wrong = answers(gated, calls, {"authorization": "Bearer k-124"})
    assert {response.status_code for response in wrong if LIVENESS_PATH not in str(response.url)} == {401}
    right = answers(gated, calls, {"authorization": f"Bearer {KEY}"})
    assert all(response.status_code != 401 for response in right)
    by_call = dict(zip(calls, right))
    assert by_call[("POST", "/v1/chat/completions")].status_code == 200
    assert by_call[("GET", "/v1/models")].json()["data"][0]["id"] == MODEL


def test_the_key_may_come_as_x_api_key_as_anthropic_clients_send_it(gated):
    calls = [("POST", "/v1/chat/completions"), ("GET", "/v1/models")]
    assert [r.status_code for r in answers(gated, calls, {"x-api-key": KEY})] == [200, 200]
    assert [r.status_code for r in answers(gated, calls, {"x-api-key": "k-124"})] == [401, 401]
    # one right header is enough
    assert [r.status_code for r in answers(gated, calls, {"x-api-key": "k-124", "authorization": f"Bearer {KEY}"})] \
        == [200, 200]  # fmt: skip


def test_no_key_configured_leaves_routes_open(monkeypatch):
    monkeypatch.delenv("DSPINE_ASGI_TEST_KEY", raising=False)
    app, _core = ingress_app(monkeypatch)
    [models] = answers(app, [("GET", "/v1/models")], {})
    assert models.status_code == 200
