"""Read a request body into a JSON object, refusing what could hurt the parser or the engines.

Rules, checked in this order; the first that applies refuses (OpenAI error shape, errors.py):
  media type   Content-Type absent, `application/json` or `*/*+json` (parameters such as charset=utf-8
               allowed); anything else: 415 `unsupported_media_type`.
  size         at most `max_bytes` bytes (ServerConfig.max_request_bytes): else 413 `request_too_large`.
  encoding     UTF-8 (a leading BOM is dropped): else 400 `invalid_json`.
  depth        arrays and objects nested at most MAX_JSON_DEPTH (64) deep, counted on the text before
               parsing (brackets inside strings do not count), so a 10,000-deep body never reaches the
               recursive parser: else 400 `invalid_json`.
  syntax       one JSON value (json.loads); NaN, Infinity and numbers that overflow a float (1e400) are
               not JSON numbers; integers longer than 4,300 digits are refused by Python: 400 `invalid_json`.
  shape        the value is an object: else 400 `invalid_json`.
  surrogates   no string (key or value) holds a lone UTF-16 surrogate (U+D800..U+DFFF, which JSON can
               spell as "\\ud800" but UTF-8 cannot carry to a tokenizer): 400 `invalid_value`, param = the
               string's path as OpenAI spells it (`messages[0].content`).
Complexity: O(body bytes) for the depth scan and the parse; O(values) for the surrogate walk.
"""

from __future__ import annotations

import json
import re

from .errors import ApiError
from .params import spell

MAX_JSON_DEPTH = 64
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_SURROGATE = re.compile("[\ud800-\udfff]")


def check_media_type(content_type: str | None) -> None:
    if not content_type:
        return
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "application/json" or (media.startswith("application/") and media.endswith("+json")):
        return
    raise ApiError(
        415, f"Content-Type {media!r} is not served: send the body as JSON with `Content-Type: application/json`",
        code="unsupported_media_type",
    )


def json_depth_exceeds(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when arrays/objects nest deeper than `limit` (brackets inside strings are skipped)."""
    depth = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > limit:
                return True
        elif token in "]}":
            depth -= 1
    return False


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"the number {text[:40]} is too large")
    return value


def parse_body(raw: bytes, content_type: str | None, max_bytes: int) -> dict:
    """The body as a dict, or ApiError by the rules in the module docstring."""
    check_media_type(content_type)
    if len(raw) > max_bytes:
        raise ApiError(413, f"request body is {len(raw)} bytes; the limit is {max_bytes}", code="request_too_large")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"request body is not UTF-8: byte {exc.start} is invalid", code="invalid_json") from exc
    text = text.removeprefix("\ufeff")
    if json_depth_exceeds(text):
        raise ApiError(400, f"request body nests arrays/objects deeper than {MAX_JSON_DEPTH}", code="invalid_json")
    try:
        data = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, float overflow, int digit limit
        raise ApiError(400, f"request body is not valid JSON: {exc}", code="invalid_json") from exc
    if not isinstance(data, dict):
        raise ApiError(400, "request body must be a JSON object", code="invalid_json")
    found = find_surrogate(data)
    if found is not None:
        raise ApiError(
            400, f"{found or 'a key'} holds a lone UTF-16 surrogate (\\ud800-\\udfff), which is not valid Unicode text",
            param=found or None, code="invalid_value",
        )
    return data


def find_surrogate(value, path: tuple = ()) -> str | None:
    """The OpenAI-spelled path of the first string holding a lone surrogate, or None (depth is bounded)."""
    if isinstance(value, str):
        return spell(path) if _SURROGATE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            if _SURROGATE.search(key):
                return spell(path + (key,))
            found = find_surrogate(item, path + (key,))
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = find_surrogate(item, path + (index,))
            if found is not None:
                return found
    return None
