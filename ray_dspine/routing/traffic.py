"""Traffic policy: a request's reasoning level and session -> (pool, arm). Pure functions.

Reasoning level, read from an OpenAI-style body:

    effort value -> level:  "none" -> none, "minimal" -> low, "low" -> low, "medium" -> medium,
                            "high" -> high, "xhigh" -> xhigh          (case-insensitive)
    fields read:            reasoning_effort, reasoning.effort, chat_template_kwargs.reasoning_effort,
                            chat_template_kwargs.enable_thinking (false -> none; true alone -> default,
                            or medium when the default is none)
    no field set:           default
    fields that disagree:   ValueError naming both; an invalid value or type: ValueError naming the field

Session key:  x-session-id header -> "sid:<id>";  else body.user -> "user:<user>";
              else "fp:" + session_fingerprint(messages), or of the prompt's first 2048 characters.

Arm assignment (sticky, deterministic):

    u       = int(first 8 bytes of sha256(salt || session_key)) / 2^64            in [0, 1)
    arm k   if  sum_{j<k} share_j <= u < sum_{j<=k} share_j   (arms in listed order)
    control (rule.pool, rule.control_arm)  if  u >= sum_j share_j

Raising an arm's share only moves control sessions into it (its interval grows at its upper end when it
is last); the same session always lands in the same arm. Complexity: O(body) / O(rules + arms).
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping

from ray_dspine.engines.protocol import ReasoningLevel
from ray_dspine.routing.config import TrafficConfig
from ray_dspine.routing.fingerprint import session_fingerprint

EFFORT_TO_LEVEL: dict[str, ReasoningLevel] = {
    "none": "none",
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "xhigh",
}
_PROMPT_FINGERPRINT_CHARS = 2048


def _effort(value: Any, field: str) -> ReasoningLevel | None:
    if value is None:
        return None
    if not isinstance(value, str) or value.strip().lower() not in EFFORT_TO_LEVEL:
        allowed = ", ".join(EFFORT_TO_LEVEL)
        raise ValueError(f"invalid value {value!r} for `{field}`; expected one of: {allowed}")
    return EFFORT_TO_LEVEL[value.strip().lower()]


def _object(body: Mapping[str, Any], field: str) -> Mapping[str, Any]:
    value = body.get(field)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"`{field}` must be an object, got {type(value).__name__}")
    return value


def reasoning_level_of(body: Mapping[str, Any], default: ReasoningLevel = "medium") -> ReasoningLevel:
    reasoning = _object(body, "reasoning")
    template = _object(body, "chat_template_kwargs")
    found: list[tuple[str, ReasoningLevel]] = []
    for field, value in (
        ("reasoning_effort", body.get("reasoning_effort")),
        ("reasoning.effort", reasoning.get("effort")),
        ("chat_template_kwargs.reasoning_effort", template.get("reasoning_effort")),
    ):
        level = _effort(value, field)
        if level is not None:
            found.append((field, level))
    thinking = template.get("enable_thinking")
    if thinking is not None and not isinstance(thinking, bool):
        raise ValueError(f"`chat_template_kwargs.enable_thinking` must be a boolean, got {thinking!r}")
    if thinking is False:
        found.append(("chat_template_kwargs.enable_thinking", "none"))
    for field, level in found[1:]:
        if level != found[0][1]:
            raise ValueError(
                f"`{found[0][0]}` asks for reasoning level {found[0][1]!r} but `{field}` asks for {level!r}"
            )
    if found:
        return found[0][1]
    if thinking is True and default == "none":
        return "medium"
    return default


def session_key(headers: Mapping[str, str], body: Mapping[str, Any]) -> str:
    lowered = {k.lower(): v for k, v in headers.items()}
    header_id = (lowered.get("x-session-id") or "").strip()
    if header_id:
        return f"sid:{header_id}"
    user = body.get("user")
    if isinstance(user, str) and user.strip():
        return f"user:{user.strip()}"
    messages = body.get("messages")
    if messages:
        return f"fp:{session_fingerprint(messages)}"
    prompt = body.get("prompt")
    if isinstance(prompt, str) and prompt:
        head = prompt[:_PROMPT_FINGERPRINT_CHARS]
        return f"fp:{session_fingerprint([{'role': 'user', 'content': head}])}"
    raise ValueError("cannot derive a session key: no x-session-id header, `user`, `messages` or `prompt`")


def unit_hash(salt: str, key: str) -> float:
    """u in [0, 1): the first 8 bytes of sha256(salt || key) as a big-endian integer over 2^64."""
    digest = hashlib.sha256((salt + key).encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def assign(traffic: TrafficConfig, level: ReasoningLevel, session: str) -> tuple[str, str]:
    """(pool, arm) for a session at a reasoning level."""
    rule = next((r for r in traffic.rules if level in r.reasoning_levels), None)
    if rule is None:
        raise ValueError(f"no traffic rule serves reasoning level {level!r}")
    u = unit_hash(traffic.salt, session)
    lower = 0.0
    for arm in rule.arms:
        if lower <= u < lower + arm.share:
            return arm.pool, arm.name
        lower += arm.share
    return rule.pool, rule.control_arm
