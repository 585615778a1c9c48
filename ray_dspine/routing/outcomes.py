"""What became of each request the router placed, one word per request, for the router's metrics.

    home(q)   = the replica that took the previous request of q's session (the router's own bounded
                table of sessions; none without a session id, on a session's first request, or once
                the table has forgotten the session)
    placement outcome, judged on the replica Ray handed q to:
      new_session      home(q) is none
      stayed           the replica is home(q)
      moved_ttft       the TTFT guard dropped home(q): waiting there was predicted to cost more than
                       its allowance over the best replica (ttft_guard.py)
      moved_capacity   a filter removed home(q): unhealthy, its report too old, or short of KV or
                       state slots for q (filters.py)
      moved_home_gone  home(q) is no longer among the candidates (scaled down or restarted)
      moved_score      otherwise: the scores, or a baseline's rule, preferred another replica, or
                       Ray fell through to the next one because home(q)'s queue was full
    hold kind, once per request that was told to wait at least once before it was placed:
      memory     held for a replica only short of memory (memory_wait.py)
      capacity   no replica can hold it now (our filters count an unhealthy replica among those)
      unhealthy  no healthy replica (the baselines' one reason to wait)

A moved turn is prefilled again where it lands, so the share of `moved_ttft` among a pool's
placements is what the TTFT guard trades for first-token time, and its prefix-cache cost.
Complexity: O(1) per request.
"""

from __future__ import annotations

from typing import Literal

PlacementOutcome = Literal["new_session", "stayed", "moved_ttft", "moved_capacity", "moved_home_gone", "moved_score"]
HoldKind = Literal["memory", "capacity", "unhealthy"]

# Decision.rejected_by values: which stage of the pipeline removed a replica.
STAGE_FILTER = "filter"
STAGE_TTFT_GUARD = "ttft_guard"

PLACEMENT_OUTCOMES: tuple[str, ...] = PlacementOutcome.__args__
HOLD_KINDS: tuple[str, ...] = HoldKind.__args__


def placement_outcome(
    routed_to: str, home: str | None, candidates: frozenset[str], rejected_by: dict[str, str]
) -> PlacementOutcome:
    """The outcome of a placement on `routed_to`; `candidates` and `rejected_by` are of the last decision."""
    if home is None:
        return "new_session"
    if routed_to == home:
        return "stayed"
    stage = rejected_by.get(home)
    if stage == STAGE_TTFT_GUARD:
        return "moved_ttft"
    if stage == STAGE_FILTER:
        return "moved_capacity"
    if home not in candidates:
        return "moved_home_gone"
    return "moved_score"
