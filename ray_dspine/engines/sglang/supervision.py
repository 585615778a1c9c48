"""What the supervisor checks on a running SGLang server, and what it reports: settings, the drafter probe, status.

Drafter probe (after /health answers, drafter launches only, before the server counts as ready):
  request   POST /v1/completions {prompt: PROBE_PROMPT, max_tokens: drafter_probe_max_tokens, temperature 0,
            stream: true, return_spec_tokens_details: true}. SGLang 0.5.23's OpenAI layer answers such a
            request with `sglext.spec_tokens_details` (one object; a list when n > 1, the first is read),
            built from meta_info only when the scheduler reported speculative metrics; without them
            there is no sglext at all.
  P1  works   spec_verify_ct > 0 (and spec_accept_length >= drafter_probe_min_accept_length when set).
  P2  broken  spec_verify_ct = 0 or no spec details: the server decodes without speculating, or (P2b) the
            acceptance is under the floor. The supervisor relaunches without the drafter at once
            (fallback, not a crash), reason "drafter probe: spec_verify_ct 0 ...".
  P3  silent  no answer within drafter_probe_timeout_s, or an error: counted as a crash with the drafter
            on (the crash policy decides).
Hang check (ready servers): GET /health_generate every health_check_interval_s with a deadline of
health_check_timeout_s; SGLang's handler runs a 1-token generation and answers 200 once the scheduler
answers anything, 503 after its own SGLANG_HEALTH_CHECK_TIMEOUT (20 s by default), so the deadline sits
above that. A miss is no 200 within the deadline; hang_after_misses consecutive misses are a hang.
The probe prompt is fixed text of ours, never a user's.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..protocol import ServedPath
from .startup_errors import ConfigError

PROBE_PROMPT = "Count from one to forty in words, separated by commas: one, two, three, four, five,"
SupervisorState = Literal["stopped", "starting", "ready", "backoff", "failed", "config_error"]


class SupervisionConfig(BaseModel):
    """How the supervisor watches its server after it starts."""

    model_config = ConfigDict(extra="forbid")

    health_check_interval_s: float = Field(
        default=10.0, gt=0, le=600, description="Interval between /health_generate checks of a ready server."
    )
    health_check_timeout_s: float = Field(
        default=30.0, gt=0, le=600,
        description="Deadline of one /health_generate check; above SGLang's own SGLANG_HEALTH_CHECK_TIMEOUT (20 s).",
    )
    hang_after_misses: int = Field(
        default=3, ge=1, le=100, description="Consecutive missed checks after which the server counts as hung."
    )
    drafter_probe: bool = Field(
        default=True, description="Probe a drafter launch with one greedy request before it serves."
    )
    drafter_probe_max_tokens: int = Field(default=16, ge=2, le=256, description="max_tokens of the probe request.")
    drafter_probe_timeout_s: float = Field(
        default=120.0, gt=0, le=3600, description="Longest wait for the probe's answer (first request: warm-up)."
    )
    drafter_probe_min_accept_length: float | None = Field(
        default=None, ge=1.0, le=64.0,
        description="Also require spec_accept_length (tokens per verify step) of at least this; None checks "
        "spec_verify_ct > 0 only.",
    )
    log_tail_bytes: int = Field(
        default=262_144, ge=4096, le=16_777_216,
        description="Bytes of the server log read to tell a config error from a crash (SGLang's usage text "
        "before argparse's error line is about 38 KB in 0.5.23).",
    )


class SupervisionStatus(BaseModel):
    """The supervisor's state as the replica reports it (path header, gauges, describe)."""

    model_config = ConfigDict(extra="forbid")

    state: SupervisorState
    path: ServedPath = Field(description="How requests are served now; autoregressive-fallback: drafter lost.")
    drafter_fallback: bool = Field(description="A drafter pool serving (or starting) without its drafter.")
    fallback_reason: str | None = None
    config_error: ConfigError | None = None
    num_launches: int = 0
    num_crashes: int = Field(default=0, description="Exits, start-up timeouts, hangs and silent probes.")
    num_hangs: int = 0
    num_probe_failures: int = Field(default=0, description="Drafter probes that showed no speculation.")


def probe_payload(model: str, max_tokens: int) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": PROBE_PROMPT,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "return_spec_tokens_details": True,
    }


def spec_details_of(event: dict[str, Any]) -> dict[str, Any] | None:
    """`sglext.spec_tokens_details` of one response event (the first one when a list), else None."""
    sglext = event.get("sglext")
    details = sglext.get("spec_tokens_details") if isinstance(sglext, dict) else None
    if isinstance(details, list):
        details = details[0] if details else None
    return details if isinstance(details, dict) else None


def probe_verdict(spec: dict[str, Any] | None, max_tokens: int, min_accept_length: float | None) -> str | None:
    """Rules P1/P2: None when the drafter works, else the fallback reason."""
    verify = int((spec or {}).get("spec_verify_ct") or 0)
    if verify <= 0:
        shown = "no spec details" if spec is None else "spec details"
        return f"drafter probe: spec_verify_ct 0 ({shown} in a {max_tokens}-token greedy completion)"
    accept = float((spec or {}).get("spec_accept_length") or 0.0)
    if min_accept_length is not None and accept < min_accept_length:
        return f"drafter probe: spec_accept_length {accept:.2f} < {min_accept_length:g} over {verify} verify steps"
    return None
