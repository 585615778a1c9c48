"""Where a replay's prefix hits fall short of the ideal cache, by kind of request.

The prefix-hit goal compares two routers' hit rates; this splits what each router leaves on the table
against the ideal cache (routing_workload.py: every block any earlier request of the slice sent) by
where the request went, so a gap between routers can be read as eviction or as placement.

Rules (one replay; tokens):
  ideal    ideal_i = IdealCache.hit_tokens of request i's trace request (routing_workload.py).
  lost     lost_i = max(0, ideal_i - cached_i), cached_i = the prompt tokens its engine reported cached
           (a replay may send requests in another order than the trace, so a request can hit more than
           the ideal rule gives it; that surplus is not counted against other requests' losses).
  kind     requests in order of sending (ties: request id); per conversation (session id):
             first_turn  no earlier request of its conversation in this replay: all it could reuse
                         came from other conversations;
             stayed      placed on the replica of its conversation's previous request: what it lost,
                         that replica no longer held (evicted) or never had;
             moved       placed on another replica: it left its conversation's cache behind.
  points   points(kind) = 100 * sum of lost_i over the kind / sum of prompt_i over every request given;
           so each reads in points of hit rate, and the kinds sum to at least the ideal cache's hit rate
           minus the replay's, over the same prompt tokens.
  unknown  a request without an ideal entry counts in the prompt total and in its conversation's
           order, with nothing lost.
  nowhere  with held_i = the most prompt tokens any replica of the pool cached for request i when it
           was placed (known in virtual replays, where every engine's cache can be read):
           nowhere_i = max(0, ideal_i - max(held_i, cached_i)): the part no replica's cache held, because
           every replica had evicted it or because the request that sent it was not yet admitted (only
           following that request could have hit it); the rest of lost_i another replica held (or the
           chosen one lost between placement and admission).
           nowhere_points = 100 * sum of nowhere_i / the same prompt total, over every kind; None when
           any request given lacks held_i.
Complexity: O(n log n) to order the requests, O(n) to sum.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

KINDS = ("first_turn", "stayed", "moved")


@dataclass(frozen=True)
class PlacedRequest:
    """One served request of a replay as the rules need it."""

    request_id: str  # the trace request id: the key of the ideal cache
    session_id: str
    replica: int | str
    sent_s: float
    prompt_tokens: int
    cached_tokens: int
    held_tokens: int | None = None  # most prompt tokens any replica cached for it when placed


class HitLoss(BaseModel):
    """Points of prefix-hit rate lost to the ideal cache, by kind of request, and how many of each."""

    model_config = ConfigDict(extra="forbid")

    first_turn_points: float = Field(description="Lost by first turns: reuse across conversations.")
    stayed_points: float = Field(description="Lost by turns on their conversation's previous replica.")
    moved_points: float = Field(description="Lost by turns placed away from their conversation's replica.")
    num_first_turns: int
    num_stayed: int
    num_moved: int
    nowhere_points: float | None = Field(
        default=None,
        description="Of the three, lost where no replica's cache held the prefix when the request was placed "
        "(evicted everywhere, or its sender not yet admitted). Virtual replays only.",
    )

    @property
    def total_points(self) -> float:
        return self.first_turn_points + self.stayed_points + self.moved_points


def hit_loss(requests: Iterable[PlacedRequest], ideal_hit_tokens: Mapping[str, int]) -> HitLoss | None:
    """The rules above over one replay's served requests; None when they hold no prompt tokens."""
    ordered = sorted(requests, key=lambda r: (r.sent_s, r.request_id))
    total = sum(r.prompt_tokens for r in ordered)
    if total <= 0:
        return None
    last_replica: dict[str, int | str] = {}
    lost = dict.fromkeys(KINDS, 0)
    count = dict.fromkeys(KINDS, 0)
    nowhere: int | None = 0 if all(r.held_tokens is not None for r in ordered) else None
    for r in ordered:
        if r.session_id not in last_replica:
            kind = "first_turn"
        elif last_replica[r.session_id] == r.replica:
            kind = "stayed"
        else:
            kind = "moved"
        last_replica[r.session_id] = r.replica
        count[kind] += 1
        ideal = ideal_hit_tokens.get(r.request_id)
        if ideal is not None:
            lost[kind] += max(0, ideal - r.cached_tokens)
            if nowhere is not None and r.held_tokens is not None:
                nowhere += max(0, ideal - max(r.held_tokens, r.cached_tokens))
    return HitLoss(
        first_turn_points=100.0 * lost["first_turn"] / total,
        stayed_points=100.0 * lost["stayed"] / total,
        moved_points=100.0 * lost["moved"] / total,
        num_first_turns=count["first_turn"],
        num_stayed=count["stayed"],
        num_moved=count["moved"],
        nowhere_points=None if nowhere is None else 100.0 * nowhere / total,
    )


def mean_hit_loss(losses: Sequence[HitLoss | None]) -> HitLoss | None:
    """Field by field mean over the replays that have one (counts rounded; nowhere_points only when
    every one has it); None when none has."""
    known = [x for x in losses if x is not None]
    if not known:
        return None
    n = len(known)
    nowhere = [x.nowhere_points for x in known if x.nowhere_points is not None]
    return HitLoss(
        first_turn_points=sum(x.first_turn_points for x in known) / n,
        stayed_points=sum(x.stayed_points for x in known) / n,
        moved_points=sum(x.moved_points for x in known) / n,
        num_first_turns=round(sum(x.num_first_turns for x in known) / n),
        num_stayed=round(sum(x.num_stayed for x in known) / n),
        num_moved=round(sum(x.num_moved for x in known) / n),
        nowhere_points=sum(nowhere) / n if len(nowhere) == n else None,
    )


def format_hit_losses(losses: Mapping[str, HitLoss | None], replays: int) -> list[str]:
    """A legend, then one line per router with figures: its loss by kind (requests of each kind), and
    when known how much of it no replica held when the request was placed."""
    known = {name: loss for name, loss in losses.items() if loss is not None}
    if not known:
        return []
    over = "" if replays == 1 else f"; mean of {replays} replays"
    lines = [
        "prefix hit lost to the ideal cache, points (requests): first turns (reuse across conversations) + turns "
        f"that stayed on their conversation's replica + turns that moved{over}"
    ]
    if any(loss.nowhere_points is not None for loss in known.values()):
        lines[0] += (
            "; nowhere: of that, what no replica's cache held when the request was placed (evicted everywhere, "
            "or its sender not yet admitted)"
        )
    for name, loss in known.items():
        line = (
            f"{name:<12} {loss.total_points:.2f} = {loss.first_turn_points:.2f} ({loss.num_first_turns}) + "
            f"{loss.stayed_points:.2f} ({loss.num_stayed}) + {loss.moved_points:.2f} ({loss.num_moved})"
        )
        if loss.nowhere_points is not None:
            line += f"; nowhere {loss.nowhere_points:.2f}"
        lines.append(line)
    return lines
