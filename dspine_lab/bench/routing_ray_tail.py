"""`bench routing --tail N` through Ray Serve: each replay's slowest requests from the client's records.

Rules (one replay = one router's pass over the slice, `repetition` i of `--repeats`):
  served      a record becomes a ServedRequest (routing_tail.py) with
                request_id = its trace request id (unique within a replay),
                replica    = its x-dspine-replica header (the Ray replica's unique id),
                sent       = start_offset_s / engine_time_scale,
                first      = (start_offset_s + ttft_s) / engine_time_scale,
                prompt     = usage.prompt_tokens, cached = usage's cached prompt tokens (0 when untold),
                floor      = the slice's floor for its trace request id;
              times are simulated seconds read off the client's clock, so HTTP, the proxy, the ingress
              and the router's own waiting count as waiting. Failed requests (no first token) are left
              out: they have no TTFT to rank.
  p99         numpy's linear p99 of the served requests' TTFTs (simulated seconds).
  slowest     routing_tail.slowest_requests over one replay's served requests, with the engine profile's
              prefill step (step_model.py) as each request's own prefill.
  table       each replay's rows (routing_tail.format_slowest), labelled "[repeat i] router", then each
              router's census of the rows at the p99 ranks (routing_tail.p99_census).
Complexity: O(n log n) per replay to rank, O(n) per listed request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from ray_dspine.bench.records import RequestRecord
from dspine_lab.bench.routing_tail import ListedReplay, ServedRequest, SlowRequest, format_tail, slowest_requests


def served_from_records(
    records: Iterable[RequestRecord], floors_sim_s: dict[str, float], engine_time_scale: float
) -> list[ServedRequest]:
    """The `served` rule for one replay's records."""
    if engine_time_scale <= 0.0:
        raise ValueError(f"engine_time_scale must be > 0, got {engine_time_scale}")
    out = []
    for r in records:
        if not r.ok or r.ttft_s is None:
            continue
        out.append(
            ServedRequest(
                request_id=r.trace_request_id,
                replica=r.replica,
                sent_s=r.start_offset_s / engine_time_scale,
                first_token_s=(r.start_offset_s + r.ttft_s) / engine_time_scale,
                prompt_tokens=r.prompt_tokens,
                cached_tokens=r.cached_prompt_tokens or 0,
                floor_s=floors_sim_s.get(r.trace_request_id),
            )
        )
    return out


def replay_slowest(
    records: Sequence[RequestRecord],
    floors_sim_s: dict[str, float],
    engine_time_scale: float,
    prefill_s: Callable[[int, int], float],
    count: int,
) -> dict:
    """One replay's entry: repeat, served requests, p99 (simulated s) and its `count` slowest rows."""
    served = served_from_records(records, floors_sim_s, engine_time_scale)
    repeats = {r.repetition for r in records}
    if len(repeats) > 1:
        raise ValueError(f"records of one replay expected, got repetitions {sorted(repeats)}")
    ttfts = [q.first_token_s - q.sent_s for q in served]
    return {
        "repeat": next(iter(repeats), 0),
        "num_requests": len(served),
        "ttft_p99_sim_s": float(np.percentile(ttfts, 99)) if ttfts else None,
        "slowest": [row.model_dump(mode="json") for row in slowest_requests(served, prefill_s, count)],
    }


def slowest_by_router(
    records: dict[str, list[RequestRecord]],
    floors_sim_s: dict[str, float],
    engine_time_scale: float,
    prefill_s: Callable[[int, int], float],
    count: int,
) -> dict[str, list[dict]]:
    """router -> one `replay_slowest` entry per repeat, in repeat order."""
    out: dict[str, list[dict]] = {}
    for policy, these in records.items():
        by_repeat: dict[int, list[RequestRecord]] = {}
        for record in these:
            by_repeat.setdefault(record.repetition, []).append(record)
        out[policy] = [
            replay_slowest(by_repeat[i], floors_sim_s, engine_time_scale, prefill_s, count) for i in sorted(by_repeat)
        ]
    return out


def format_ray_slowest(slowest: dict[str, list[dict]]) -> list[str]:
    """The `table` rule; nothing when no replay served a request."""
    listed = {
        name: [
            ListedReplay(f"[repeat {replay['repeat'] + 1}] {name}", replay["num_requests"], replay["ttft_p99_sim_s"],
                         [SlowRequest.model_validate(r) for r in replay["slowest"]])  # fmt: skip
            for replay in replays
            if replay["slowest"]
        ]
        for name, replays in slowest.items()
    }
    header = (
        "slowest requests (simulated s = wall s / engine_time_scale, on the client's clock; prefill: its own "
        "prefill step; waited: sent to that step):"
    )
    return format_tail(header, listed, len(next(iter(slowest.values()), [])))
