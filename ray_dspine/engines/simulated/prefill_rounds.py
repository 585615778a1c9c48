"""Prefill rounds: which admitted requests one prefill forward pass takes, and how many tokens of each.

A request's work w is its prompt tokens still to prefill (uncached, not yet prefilled; at least 1).
SGLang runs prefill in forward passes ("rounds") of at most B prompt tokens (`--chunked-prefill-size`);
a request that does not fit what is left of a round is cut, and the cut request (the "chunked" one,
at most one at a time) continues first in the next round. A whole request is charged ceil_p(w) of
the round's budget (p = page size in tokens); a cut is floored to whole pages. Policies
(`--schedule-policy`):

  unchunked (B = None):  the oldest request alone, whole: one prompt per prefill step.
  fcfs:                  the chunked request continues with min(w_c, B); then the waiting requests in
                         arrival order, each whole while ceil_p(w) fits what is left; the first that
                         does not fit is cut to what is left (it becomes the chunked request), and the
                         round ends.
  shortest-prefill-first (SGLang PR #40024):  the waiting requests ordered by (w, arrival). Before the
                         chunked request continues, the round reserves room for the shorter ones:
                           reserved = sum of ceil_p(w_i) in that order, stopping at the first i with
                                      w_i >= w_c or reserved + ceil_p(w_i) > B - p
                           limit    = floor_p(B - reserved) when reserved > 0, else B
                                      (no reservation when B < 2p; the limit is >= p, so the chunked
                                      request always progresses)
                         the chunked request continues with min(w_c, limit); then the waiting requests
                         as under fcfs, in this order, except that none is cut while the chunked
                         request stays unfinished (no second unfinished chunk).
So under shortest-prefill-first a turn that needs a few hundred tokens joins the next round of a
100,000-token prompt already under way, where under fcfs it waits for all of that prompt but its
last chunk.
Parameters: B >= 1 tokens or None; p >= 1 tokens (SGLang's page size; 1 by default).
Complexity: O(n log n) per round for n waiting requests (the sort).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ray_dspine.engines.protocol import SchedulePolicy


@dataclass(frozen=True, slots=True)
class PrefillWork:
    """One admitted request still to prefill: `work_tokens` left, `arrival` its order of admission."""

    request_id: str
    work_tokens: int
    arrival: int


def ceil_pages(tokens: int, page_tokens: int) -> int:
    return -(-tokens // page_tokens) * page_tokens


def spf_order(waiting: Sequence[PrefillWork]) -> list[PrefillWork]:
    """Shortest work first, then arrival (SGLang's `_sort_by_shortest_prefill`)."""
    return sorted(waiting, key=lambda w: (max(1, w.work_tokens), w.arrival))


def reserved_tokens(chunked: PrefillWork, ordered: Sequence[PrefillWork], budget: int, page_tokens: int) -> int:
    """Room the round keeps for waiting requests shorter than the chunked one (rule `reserved`)."""
    if budget < 2 * page_tokens:
        return 0
    reserved = 0
    for waiting in ordered:
        work = max(1, waiting.work_tokens)
        charge = ceil_pages(work, page_tokens)
        if work >= chunked.work_tokens or reserved + charge > budget - page_tokens:
            break
        reserved += charge
    return reserved


def plan_round(
    chunked: PrefillWork | None,
    waiting: Sequence[PrefillWork],
    budget_tokens: int | None,
    policy: SchedulePolicy = "fcfs",
    page_tokens: int = 1,
) -> list[tuple[str, int]]:
    """[(request_id, tokens prefilled this round)], the chunked request first; [] when nothing waits."""
    if page_tokens < 1:
        raise ValueError(f"page_tokens must be >= 1, got {page_tokens}")
    if budget_tokens is None:
        if chunked is not None:
            raise ValueError("an unchunked schedule has no chunked request")
        if not waiting:
            return []
        oldest = min(waiting, key=lambda w: w.arrival)
        return [(oldest.request_id, max(1, oldest.work_tokens))]
    if budget_tokens < 1:
        raise ValueError(f"budget_tokens must be >= 1, got {budget_tokens}")
    ordered = spf_order(waiting) if policy == "shortest-prefill-first" else sorted(waiting, key=lambda w: w.arrival)
    out: list[tuple[str, int]] = []
    left = budget_tokens
    unfinished_chunk = False
    if chunked is not None:
        limit = budget_tokens
        if policy == "shortest-prefill-first":
            reserved = reserved_tokens(chunked, ordered, budget_tokens, page_tokens)
            if reserved:
                limit = (budget_tokens - reserved) // page_tokens * page_tokens
        taken = min(chunked.work_tokens, limit)
        out.append((chunked.request_id, taken))
        left -= taken
        unfinished_chunk = taken < chunked.work_tokens
    for request in ordered:
        if left <= 0:
            break
        work = max(1, request.work_tokens)
        charge = ceil_pages(work, page_tokens)
        if charge <= left:
            out.append((request.request_id, work))
            left -= charge
            continue
        if unfinished_chunk:
            break  # no second unfinished chunk
        cut = left // page_tokens * page_tokens
        if cut > 0:
            out.append((request.request_id, cut))
        break
    return out
