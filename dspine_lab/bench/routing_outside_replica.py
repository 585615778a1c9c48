"""`bench routing` through Ray Serve: how much of each request's TTFT passed outside its replica.

Rules, per replay (one router's pass over the slice):
  outside     for an ok record with a TTFT and a Server-Timing `replica` duration (server_timing.py):
              outside = ttft_s - server_replica_s (RequestRecord.ttft_outside_replica_s), wall seconds:
              the client's HTTP, the proxy, the ingress, the router's choice and Ray's transport, both
              ways. The replica's own share (its engine's queueing and prefill) is what is left of the
              TTFT. A record without the header has no outside time.
  figures     p50 / p99 / max of the outside times (stats.describe: numpy's linear percentile), over the records that
              have one; None with none.
  p99 ranks   the requests the replay's TTFT p99 is interpolated between: over its ok records with a
              TTFT, in ascending TTFT order (ties by request id), positions floor(0.99 (n - 1)) and
              ceil(0.99 (n - 1)), once when they are equal; each with its TTFT and its outside time
              (None without the header). They say whether the path or the replica set the p99.
Complexity: O(n log n) per replay.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from ray_dspine.bench.records import RequestRecord
from ray_dspine.bench.stats import describe


class RankRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: str = Field(description="The trace's request id.")
    ttft_s: float = Field(description="Its TTFT, wall seconds.")
    outside_s: float | None = Field(description="Of it, outside its replica, wall seconds; None if untold.")


class OutsideReplica(BaseModel):
    model_config = ConfigDict(extra="forbid")

    num_requests: int = Field(description="Ok requests whose answer told the replica's share.")
    p50_s: float | None
    p99_s: float | None
    max_s: float | None
    at_p99_ranks: list[RankRequest] = Field(description="The one or two requests the TTFT p99 rests on.")


def outside_replica(records: Sequence[RequestRecord]) -> OutsideReplica:
    """The figures and p99 ranks of one replay's records."""
    outside = [v for v in (r.ttft_outside_replica_s for r in records) if v is not None]
    timed = sorted((r for r in records if r.ok and r.ttft_s is not None), key=lambda r: (r.ttft_s, r.trace_request_id))
    ranks: list[RankRequest] = []
    if timed:
        position = 0.99 * (len(timed) - 1)
        for index in sorted({math.floor(position), math.ceil(position)}):
            r = timed[index]
            outside_s = r.ttft_outside_replica_s
            ranks.append(RankRequest(request_id=r.trace_request_id, ttft_s=r.ttft_s, outside_s=outside_s))
    spread = describe(outside)
    return OutsideReplica(
        num_requests=spread.count, p50_s=spread.p50, p99_s=spread.p99, max_s=spread.max, at_p99_ranks=ranks
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000.0:.0f}"


def format_outside(name: str, by_replay: Sequence[OutsideReplica]) -> list[str]:
    """One line per replay that has outside times."""
    lines = []
    for index, f in enumerate(by_replay, start=1):
        if f.num_requests == 0:
            continue
        ranks = ", ".join(f"{r.request_id}: {_ms(r.outside_s)} ms of {r.ttft_s:.2f} s" for r in f.at_p99_ranks)
        lines.append(
            f"{name:<12} replay {index}: TTFT outside the replica (HTTP, proxy, ingress, router, Ray) "
            f"p50 {_ms(f.p50_s)} / p99 {_ms(f.p99_s)} / max {_ms(f.max_s)} ms; at the TTFT p99 ranks: {ranks}"
        )
    return lines
