"""Scorer registry: every headroom-pipeline scorer by name, and how to build the weighted set.

The names are exactly the fields of `ScorerWeights`; a weight of 0 leaves the scorer out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ray_dspine.routing.config import ScorerWeights
from ray_dspine.routing.prefix_index import PrefixIndex
from ray_dspine.routing.scorers.base import Scorer
from ray_dspine.routing.scorers.kv_headroom import KvHeadroomScorer
from ray_dspine.routing.scorers.mamba_headroom import MambaHeadroomScorer
from ray_dspine.routing.scorers.predicted_decode import PredictedDecodeScorer
from ray_dspine.routing.scorers.predicted_ttft import PredictedTtftScorer
from ray_dspine.routing.scorers.prefix_match import PrefixMatchScorer
from ray_dspine.routing.scorers.queue import QueueScorer
from ray_dspine.routing.scorers.session_affinity import SessionAffinityScorer
from ray_dspine.routing.session_table import SessionTable


@dataclass(frozen=True, slots=True)
class ScorerContext:
    """Router-side state scorers may read."""

    prefix_index: PrefixIndex
    sessions: SessionTable
    default_prefill_tokens_per_s: float = 10_000.0
    latency_slack_s: float = 0.5
    ttft_indifference_s: float = 1.0
    typical_output_tokens: int = 256
    prefix_half_tokens: float = 32_768.0


SCORERS: dict[str, Callable[[ScorerContext], Scorer]] = {
    "session_affinity": lambda ctx: SessionAffinityScorer(ctx.sessions),
    "prefix_match": lambda ctx: PrefixMatchScorer(ctx.prefix_index, ctx.prefix_half_tokens),
    "kv_headroom": lambda ctx: KvHeadroomScorer(),
    "mamba_headroom": lambda ctx: MambaHeadroomScorer(),
    "queue": lambda ctx: QueueScorer(),
    "predicted_ttft": lambda ctx: PredictedTtftScorer(
        ctx.prefix_index, ctx.default_prefill_tokens_per_s, ctx.ttft_indifference_s
    ),
    "predicted_decode": lambda ctx: PredictedDecodeScorer(ctx.typical_output_tokens, ctx.latency_slack_s),
}


def scorer_names() -> tuple[str, ...]:
    return tuple(SCORERS)


def build_scorers(weights: ScorerWeights, context: ScorerContext) -> list[tuple[Scorer, float]]:
    """(scorer, weight) for every scorer with a positive weight, in registry order."""
    by_name = weights.as_dict()
    return [(SCORERS[name](context), by_name[name]) for name in SCORERS if by_name[name] > 0.0]
