"""The `Server-Timing` response header (W3C Server Timing): where a request's time to first chunk went.

Every answer that has a first chunk carries, in this order:
  parse;dur=P     the ingress, from taking the request to the typed request built: body read (from
                  the proxy), JSON parsed, fields validated, pool and arm chosen, prefix hashed.
  replica;dur=R   the replica, from receiving the request to its engine's first chunk: queueing and
                  prefill in the engine.
  ingress;dur=I   the ingress, from taking the request to that first chunk in hand: P, the router's
                  choice and its waits, Ray's transport both ways, and R.
Durations are milliseconds with one decimal, as the header's `dur` parameter is defined. A client's time
to first chunk minus R is the time the request spent outside the replica (HTTP, the proxy, the ingress,
the router, Ray's transport); I - P - R is the router's and Ray's share inside the ingress.

Reading (`parse_server_timing`): metrics are separated by commas and parameters by semicolons; a metric
without a finite numeric `dur` and any part that does not parse are left out; names are lower-cased; a repeated
name keeps its first value, as the specification says. Complexity: O(length of the header).
"""

from __future__ import annotations

import math

HEADER = "server-timing"


def server_timing(parse_s: float, replica_s: float | None, ingress_s: float) -> str:
    """The header's value; `replica` is left out when the replica did not say (an older replica)."""
    parts = [("parse", parse_s), ("replica", replica_s), ("ingress", ingress_s)]
    return ", ".join(f"{name};dur={seconds * 1000.0:.1f}" for name, seconds in parts if seconds is not None)


def parse_server_timing(value: str | None) -> dict[str, float]:
    """Durations by metric name, in seconds (see the reading rule above)."""
    found: dict[str, float] = {}
    for metric in (value or "").split(","):
        name, *params = (part.strip() for part in metric.split(";"))
        name = name.lower()
        if not name or name in found:
            continue
        for param in params:
            key, _, raw = param.partition("=")
            if key.strip().lower() != "dur":
                continue
            try:
                ms = float(raw.strip().strip('"'))
            except ValueError:
                break
            if math.isfinite(ms):
                found[name] = ms / 1000.0
            break
    return found
