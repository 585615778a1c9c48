"""`bench routing` through Ray Serve: the CPU the serving path spent on one replay.

Rules, per replay (one router's pass over the slice, the probe request left out):
  reading     each process's CPU seconds so far (`time.process_time()`: user and system time of all its
              threads), read just before the replay's first request and just after its last answer, in
              the bench's own process (the client: rendering prompts, HTTP, parsing SSE), Serve's HTTP
              proxy, the ingress replica (parsing, the router, relaying chunks) and each replica of the
              pool (engine and chunk streaming), summed over the replicas.
  spent       spent = after - before, per part; total = the sum of the four parts; per request =
              total / requests sent. Ray's own daemons (GCS, raylet, Serve's controller) are left out.
  missing     a part whose reading failed (an actor gone) is None, and so is the total.
The parts share the host's cores with each other, so a part's seconds are time taken from the
others: on 2 cores, a replay of ~60 wall seconds has ~120 CPU seconds to go round.
Complexity: O(parts) per replay.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

PARTS = ("client", "proxy", "ingress", "replicas")


class ServingCpu(BaseModel):
    model_config = ConfigDict(extra="forbid")

    client_s: float | None = Field(description="The bench's process: prompts, HTTP client, SSE parsing; CPU s.")
    proxy_s: float | None = Field(description="Serve's HTTP proxy actor, CPU s.")
    ingress_s: float | None = Field(description="The ingress replica (OpenAI parsing, the router, chunks), CPU s.")
    replicas_s: float | None = Field(description="The pool's replicas, summed, CPU s.")
    total_s: float | None = Field(description="The four parts together, CPU s.")
    per_request_ms: float | None = Field(description="total_s per request sent, CPU milliseconds.")


def spent(before: Mapping[str, float | None], after: Mapping[str, float | None], num_requests: int) -> ServingCpu:
    """The replay's CPU seconds by part from two readings (rules spent and missing)."""
    parts: dict[str, float | None] = {}
    for name in PARTS:
        a, b = before.get(name), after.get(name)
        parts[name] = None if a is None or b is None else b - a
    total = None if any(v is None for v in parts.values()) else sum(v for v in parts.values() if v is not None)
    per_request = None if total is None or num_requests <= 0 else 1000.0 * total / num_requests
    return ServingCpu(
        client_s=parts["client"], proxy_s=parts["proxy"], ingress_s=parts["ingress"], replicas_s=parts["replicas"],
        total_s=total, per_request_ms=per_request,
    )  # fmt: skip


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def format_total(cpu: ServingCpu) -> str:
    """The replay's total for a progress line: "41 s (97 ms a request)", or "-" when a part is missing."""
    if cpu.total_s is None or cpu.per_request_ms is None:
        return "-"
    return f"{cpu.total_s:.0f} s ({cpu.per_request_ms:.0f} ms a request)"


def format_serving_cpu(name: str, by_replay: list[ServingCpu]) -> list[str]:
    """One line per replay."""
    lines = []
    for index, c in enumerate(by_replay, start=1):
        per_request = "-" if c.per_request_ms is None else f"{c.per_request_ms:.0f}"
        lines.append(
            f"{name:<12} replay {index}: serving-path CPU s: client {_s(c.client_s)}, proxy {_s(c.proxy_s)}, "
            f"ingress {_s(c.ingress_s)}, replicas {_s(c.replicas_s)}; total {_s(c.total_s)} "
            f"({per_request} ms a request)"
        )
    return lines
