"""OpenAI-style error bodies: {"error": {"message", "type", "param", "code"}}, for every error the app answers.

Rules:
  shape      every 4xx and 5xx the app answers is this JSON object (Anthropic's under /v1/messages:
             anthropic.py), framework errors included:
             404 unknown route (`unknown_url`), 405 wrong method (`method_not_allowed`), FastAPI's request
             validation (400 `invalid_value`), any other Starlette HTTPException (its status), and an
             unexpected exception (500 `internal_error`, logged without the request body).
  type       by status (_TYPES); any status not listed is "server_error" at 5xx, "invalid_request_error" at 4xx.
  text       message and param are made valid UTF-8 (a lone surrogate is written as a backslash escape), so
             the answer itself can always be encoded.
  validation the pydantic error reported is the one deepest into the body (a union member that took the
             value's JSON type fails further in than those that did not), the first of equals; when several
             errors name that field their messages are joined with " or "; param is spelled as OpenAI does
             (params.py); a tagged union without a valid tag names the tag field (`messages[0].role`).
"""

from __future__ import annotations

import logging

from fastapi.responses import JSONResponse

from . import anthropic
from .params import kept_parts, spell

log = logging.getLogger("ray_dspine.ingress")

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_exceeded",
    503: "service_unavailable",
    504: "timeout",
}


class ApiError(Exception):
    def __init__(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None,
        retry_after_s: int | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.retry_after_s = retry_after_s


def _text(value: str | None) -> str | None:
    return None if value is None else value.encode("utf-8", "backslashreplace").decode("utf-8")


def error_type(status: int) -> str:
    return _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": _text(message), "type": error_type(status), "param": _text(param), "code": code}}


def error_response(error: ApiError, retry_after_s: int | None = None, path: str = "") -> JSONResponse:
    """The error as JSON: OpenAI's shape, or Anthropic's under its Messages API's `path` (anthropic.py)."""
    headers = {}
    retry = error.retry_after_s if error.retry_after_s is not None else retry_after_s
    if error.status in (429, 503) and retry is not None:
        headers["Retry-After"] = str(retry)
    if path.startswith(anthropic.PATH):
        return JSONResponse(anthropic.error_body(error.status, _text(error.message)), error.status, headers)
    return JSONResponse(error_body(error.status, error.message, error.param, error.code), error.status, headers)


def from_validation_error(exc, body=None) -> ApiError:
    """A 400 for the deepest pydantic error (rules above)."""
    found = []
    for error in exc.errors():
        loc = tuple(part for part in error.get("loc", ()) if part != "body")
        parts = kept_parts(loc, body, missing=error.get("type") == "missing")
        found.append((len(parts), spell(parts) or None, error))
    depth = max(item[0] for item in found)
    _, param, first = next(item for item in found if item[0] == depth)
    kind = first.get("type", "")
    if kind.startswith("union_tag"):
        tag = str((first.get("ctx") or {}).get("discriminator", "")).strip("'")
        param = f"{param}.{tag}" if param and tag else (param or tag or None)
        message = "is required" if kind == "union_tag_not_found" else f"{first.get('msg', 'invalid value')}"
        return ApiError(400, f"{param}: {message}", param=param, code="invalid_value")
    messages = []
    for _, other, error in found:
        msg = "is required" if error.get("type") == "missing" else error.get("msg", "invalid value")
        msg = msg.removeprefix("Value error, ")
        if other == param and msg not in messages:
            messages.append(msg.removeprefix("Input should be ") if messages else msg)
    message = " or ".join(messages) or "invalid request"
    return ApiError(400, f"{param}: {message}" if param else message, param=param, code="invalid_value")


def install_error_handlers(app) -> None:
    """Answer every framework error of `app` in OpenAI's shape (rules above)."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException

    @app.exception_handler(ApiError)
    async def _api_error(request, exc: ApiError):
        return error_response(exc, path=request.url.path)

    @app.exception_handler(HTTPException)
    async def _http_error(request, exc: HTTPException):
        if exc.status_code == 404:
            message, code = f"Unknown request URL: {request.method} {request.url.path}", "unknown_url"
        elif exc.status_code == 405:
            message, code = f"Method {request.method} is not allowed on {request.url.path}", "method_not_allowed"
        else:
            message, code = str(exc.detail), None
        response = error_response(ApiError(exc.status_code, message, code=code), path=request.url.path)
        for name, value in (exc.headers or {}).items():
            response.headers[name] = value
        return response

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        loc = [part for part in first.get("loc", ()) if part not in ("body", "path", "query")]
        param = ".".join(str(part) for part in loc) or None
        error = ApiError(400, first.get("msg", "invalid request"), param=param, code="invalid_value")
        return error_response(error, path=request.url.path)

    @app.exception_handler(Exception)
    async def _unexpected(request, exc: Exception):
        log.error("unexpected %s while serving a request", type(exc).__name__)
        error = ApiError(500, f"internal error: {type(exc).__name__}", code="internal_error")
        return error_response(error, path=request.url.path)
