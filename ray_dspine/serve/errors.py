"""OpenAI-style error bodies: {"error": {"message", "type", "param", "code"}}."""

from __future__ import annotations

from fastapi.responses import JSONResponse

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_exceeded",
    503: "service_unavailable",
    504: "timeout",
}


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": _TYPES.get(status, "server_error"), "param": param, "code": code}}


def error_response(error: ApiError, retry_after_s: int | None = None) -> JSONResponse:
    headers = {}
    if error.status in (429, 503) and retry_after_s is not None:
        headers["Retry-After"] = str(retry_after_s)
    return JSONResponse(error_body(error.status, error.message, error.param, error.code), error.status, headers)


def from_validation_error(exc) -> ApiError:
    """The first pydantic error, naming the field as a dotted path (e.g. messages.0.content)."""
    first = exc.errors()[0]
    param = ".".join(str(part) for part in first.get("loc", ()) if part != "body") or None
    message = first.get("msg", "invalid request")
    return ApiError(400, f"{param}: {message}" if param else message, param=param, code="invalid_value")
