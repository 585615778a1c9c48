"""Which requests set a replay's p99 TTFT, and what held each of them up (`bench routing --tail N`).

Rules (simulated seconds; one replay of n requests, virtual or through Ray: routing_ray_tail.py):
  p99 ranks   numpy's linear rule puts the p99 at position x = 0.99 (n - 1) of the ascending TTFTs, between
              the values at floor(x) and ceil(x): the (n - floor(x))-th and (n - ceil(x))-th slowest
              (rank 1 = slowest). With n = 419 that is ranks 5 and 6.
  slowest     the N requests with the largest TTFT, slowest first (ties: the earlier sent first).
  own prefill p(q) = t_alone(prompt(q) - cached(q), cached(q)) / 1000, cached(q) = the prompt tokens its
              engine served from cache: the length of q's own prefill (step_model.py).
  waited      w(q) = max(0, ttft(q) - p(q)): from q's arrival at the router to the start of its prefill step.
  lost cache  l(q) = max(0, p(q) - floor(q)): prefill q ran that the floor's ideal cache would have saved
              (None without a floor).
  ahead       the longest prefill step on q's replica that ran (in part) inside [sent(q), start(q)], and
              whose request it was: what q queued behind.
  kind        'floor' if ttft(q) - floor(q) <= near_floor_s (0.5 s); else 'queued' if w(q) >= l(q) (or no
              floor); else 'lost_cache'. The cause reads 'at its floor', 'queued W s, behind R's X s prefill'
              and 'prefilled L s its ideal cache holds' respectively.
  census      over many replays, the rows at the p99 ranks counted by kind, with the mean wait of the
              queued ones and the mean lost prefill of the lost_cache ones (rows not listed are not counted).
Parameters: near_floor_s >= 0 (s). Complexity: O(n log n) to rank, O(n) per listed request for `ahead`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

NEAR_FLOOR_S = 0.5
SlowKind = Literal["floor", "queued", "lost_cache"]


@dataclass(frozen=True)
class ServedRequest:
    """One request of a replay as the tail rules need it (times in simulated seconds)."""

    request_id: str
    replica: int | str  # an index in virtual time, the Ray replica's unique id through Ray Serve
    sent_s: float
    first_token_s: float
    prompt_tokens: int
    cached_tokens: int
    floor_s: float | None = None


class SlowRequest(BaseModel):
    """One of a replay's slowest requests, with what held it up."""

    model_config = ConfigDict(extra="forbid")

    rank: int = Field(description="1 = the slowest of the replay.")
    request_id: str
    replica: int | str = Field(description="Index in virtual time; the Ray replica's unique id through Ray Serve.")
    ttft_s: float
    floor_s: float | None
    own_prefill_s: float = Field(description="Its own prefill step (uncached prompt tokens).")
    waited_s: float = Field(description="From arrival to the start of its prefill step.")
    lost_cache_s: float | None = Field(description="Prefill beyond the floor's (ideal cache).")
    prompt_tokens: int
    cached_tokens: int
    ahead_request_id: str | None = Field(description="The longest prefill it queued behind, if any.")
    ahead_prefill_s: float | None
    kind: SlowKind
    cause: str


def p99_ranks(num_requests: int) -> tuple[int, ...]:
    """The slowest-first ranks (1 = slowest) between which numpy's linear p99 lies; one rank if exact."""
    if num_requests < 1:
        raise ValueError(f"num_requests must be >= 1, got {num_requests}")
    x = 0.99 * (num_requests - 1)
    low, high = num_requests - math.ceil(x), num_requests - math.floor(x)
    return (low,) if low == high else (low, high)


def _own_prefill_s(r: ServedRequest, prefill_s: Callable[[int, int], float]) -> float:
    return prefill_s(r.prompt_tokens - r.cached_tokens, r.cached_tokens)


def slowest_requests(
    served: Sequence[ServedRequest],
    prefill_s: Callable[[int, int], float],
    count: int,
    near_floor_s: float = NEAR_FLOOR_S,
) -> list[SlowRequest]:
    """The `count` slowest of `served` (rules above); `prefill_s(uncached_tokens, cached_tokens)` is a prompt's
    prefill in seconds."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    steps = {r.request_id: (r.first_token_s - _own_prefill_s(r, prefill_s), r) for r in served}
    ranked = sorted(served, key=lambda r: (-(r.first_token_s - r.sent_s), r.sent_s))
    out = []
    for rank, q in enumerate(ranked[:count], start=1):
        ttft = q.first_token_s - q.sent_s
        own = _own_prefill_s(q, prefill_s)
        start = steps[q.request_id][0]
        waited = max(0.0, ttft - own)
        lost = None if q.floor_s is None else max(0.0, own - q.floor_s)
        ahead = _longest_ahead(q, start, steps.values())
        kind = _kind(ttft, q.floor_s, waited, lost, near_floor_s)
        out.append(
            SlowRequest(
                rank=rank,
                request_id=q.request_id,
                replica=q.replica,
                ttft_s=ttft,
                floor_s=q.floor_s,
                own_prefill_s=own,
                waited_s=waited,
                lost_cache_s=lost,
                prompt_tokens=q.prompt_tokens,
                cached_tokens=q.cached_tokens,
                ahead_request_id=None if ahead is None else ahead[1],
                ahead_prefill_s=None if ahead is None else ahead[0],
                kind=kind,
                cause=_cause(kind, waited, lost, ahead),
            )
        )
    return out


def _longest_ahead(
    q: ServedRequest, start_s: float, steps: Iterable[tuple[float, ServedRequest]]
) -> tuple[float, str] | None:
    """(seconds, request id) of the longest prefill step on q's replica overlapping [sent(q), start(q))."""
    best: tuple[float, str] | None = None
    for step_start, r in steps:
        if r.request_id == q.request_id or r.replica != q.replica:
            continue
        if r.first_token_s > q.sent_s and step_start < start_s:
            length = r.first_token_s - step_start
            if best is None or length > best[0]:
                best = (length, r.request_id)
    return best


def _kind(ttft: float, floor: float | None, waited: float, lost: float | None, near_floor_s: float) -> SlowKind:
    if floor is not None and ttft - floor <= near_floor_s:
        return "floor"
    return "queued" if lost is None or waited >= lost else "lost_cache"


def _cause(kind: SlowKind, waited: float, lost: float | None, ahead: tuple[float, str] | None) -> str:
    if kind == "floor":
        return "at its floor"
    if kind == "queued":
        behind = "" if ahead is None else f", behind {ahead[1]}'s {ahead[0]:.2f} s prefill"
        return f"queued {waited:.2f} s{behind}"
    return f"prefilled {lost or 0.0:.2f} s its ideal cache holds"


def p99_census(replays: Iterable[tuple[int, Sequence[SlowRequest]]]) -> str:
    """The census rule over (num_requests, listed rows) of each replay, as one line."""
    rows = [r for n, listed in replays for r in listed if r.rank in p99_ranks(n)]
    queued = [r.waited_s for r in rows if r.kind == "queued"]
    lost = [r.lost_cache_s or 0.0 for r in rows if r.kind == "lost_cache"]
    parts = [f"{sum(r.kind == 'floor' for r in rows)} at their floor"]
    parts.append(f"{len(queued)} queued" + (f" (mean wait {sum(queued) / len(queued):.2f} s)" if queued else ""))
    parts.append(f"{len(lost)} lost cache" + (f" (mean {sum(lost) / len(lost):.2f} s of prefill)" if lost else ""))
    return f"{len(rows)} rows at the p99 ranks: " + ", ".join(parts)


def format_slowest(label: str, num_requests: int, ttft_p99_s: float, rows: Sequence[SlowRequest]) -> list[str]:
    """A replay's slowest requests as table lines, headed by where its p99 sits."""
    ranks = " and ".join(str(r) for r in p99_ranks(num_requests))
    lines = [
        f"{label}: p99 {ttft_p99_s:.2f} s, set by rank {ranks} of {num_requests}",
        f"  {'rank':>4} {'TTFT':>6} {'floor':>6} {'prefill':>7} {'waited':>6} {'replica':>7} "
        f"{'prompt':>7} {'cached':>7}  {'request':<10} cause",
    ]
    for r in rows:
        floor = "-" if r.floor_s is None else f"{r.floor_s:.2f}"
        lines.append(
            f"  {r.rank:>4} {r.ttft_s:>6.2f} {floor:>6} {r.own_prefill_s:>7.2f} {r.waited_s:>6.2f} {r.replica:>7} "
            f"{r.prompt_tokens:>7} {r.cached_tokens:>7}  {r.request_id:<10} {r.cause}"
        )
    return lines


@dataclass(frozen=True)
class ListedReplay:
    """One replay's listed rows as the table prints them."""

    label: str
    num_requests: int
    ttft_p99_s: float
    rows: Sequence[SlowRequest]


def format_tail(header: str, by_router: dict[str, list[ListedReplay]], replays_per_router: int) -> list[str]:
    """Each router's listed replays under `header`, then each router's census; nothing when none is listed."""
    lines: list[str] = []
    census: list[str] = []
    for name, replays in by_router.items():
        for replay in replays:
            lines.extend(format_slowest(replay.label, replay.num_requests, replay.ttft_p99_s, replay.rows))
        if replays:
            census.append(f"{name}: {p99_census((r.num_requests, r.rows) for r in replays)}")
    if not lines:
        return []
    return [header, *lines, f"what sets the p99, over {replays_per_router} replays per router:", *census]
