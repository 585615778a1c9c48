"""Stage registry: every headroom-pipeline stage by its config `type`, and how to build the lists.

    filters  type -> builder(spec, context) -> Filter     keep(estimate, replicas) -> (kept, {removed: why})
    scorers  type -> builder(spec, context) -> Scorer     score(estimate, replicas) -> one value in [0, 1] each
    picker   type -> builder(spec, context) -> Picker     pick(replicas, scores, weights) -> (totals, ranked)
    holds    type -> builder(spec, context) -> Hold       hold(estimate, chosen, fitting, views) -> why wait, or None

The types are exactly those of the config's stage specs (config.py); the pipeline builds each list
once, in the order the config lists it, and scorers carry their spec's weight.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Sequence

from pydantic import BaseModel

from ray_dspine.routing.config import ReportsConfig
from ray_dspine.routing.estimate import Estimate
from ray_dspine.routing.filters import FitsMemory
from ray_dspine.routing.memory_wait import MemoryWait
from ray_dspine.routing.picker import MaxScorePicker
from ray_dspine.routing.scorers.base import Scorer
from ray_dspine.routing.scorers.kv_headroom import KvHeadroomScorer
from ray_dspine.routing.scorers.mamba_headroom import MambaHeadroomScorer
from ray_dspine.routing.scorers.predicted_decode import PredictedDecodeScorer
from ray_dspine.routing.scorers.predicted_ttft import PredictedTtftScorer
from ray_dspine.routing.scorers.prefix_match import PrefixMatchScorer
from ray_dspine.routing.scorers.queue import QueueScorer
from ray_dspine.routing.scorers.session_affinity import SessionAffinityScorer
from ray_dspine.routing.session_table import SessionTable
from ray_dspine.routing.ttft_guard import TtftGuard
from ray_dspine.routing.types import ReplicaView


class Filter(Protocol):
    name: str
    stage: str  # Decision.rejected_by value (outcomes.py)

    def keep(self, estimate: Estimate, replicas: Sequence[ReplicaView]) -> tuple[list[ReplicaView], dict[str, str]]: ...


class Hold(Protocol):
    name: str

    def hold(
        self, estimate: Estimate, chosen: ReplicaView, fitting: Sequence[ReplicaView], replicas: Sequence[ReplicaView]
    ) -> str | None: ...


class Picker(Protocol):
    name: str

    def pick(
        self, replicas: Sequence[ReplicaView], scores: Mapping[str, Sequence[float]], weights: Mapping[str, float]
    ) -> tuple[dict[str, float], list[str]]: ...


@dataclass(frozen=True, slots=True)
class StageContext:
    """Router-side state and settings stages are built with."""

    sessions: SessionTable
    reports: ReportsConfig
    clock: Callable[[], float]


FILTERS: dict[str, Callable[[BaseModel, StageContext], Filter]] = {
    "fits_memory": lambda spec, ctx: FitsMemory(
        ctx.reports.stale_after_s, ctx.reports.stale_headroom_fraction, ctx.reports.drop_after_s
    ),
    "ttft_guard": lambda spec, ctx: TtftGuard(spec.tolerance_s, spec.per_cached_s, spec.cached_max_s),
}

SCORERS: dict[str, Callable[[BaseModel, StageContext], Scorer]] = {
    "session_affinity": lambda spec, ctx: SessionAffinityScorer(ctx.sessions),
    "prefix_match": lambda spec, ctx: PrefixMatchScorer(spec.half_tokens),
    "kv_headroom": lambda spec, ctx: KvHeadroomScorer(),
    "mamba_headroom": lambda spec, ctx: MambaHeadroomScorer(),
    "queue": lambda spec, ctx: QueueScorer(),
    "predicted_ttft": lambda spec, ctx: PredictedTtftScorer(spec.indifference_s),
    "predicted_decode": lambda spec, ctx: PredictedDecodeScorer(spec.typical_output_tokens, spec.slack_s),
}

PICKERS: dict[str, Callable[[BaseModel, StageContext], Picker]] = {
    "max_score": lambda spec, ctx: MaxScorePicker(),
}

HOLDS: dict[str, Callable[[BaseModel, StageContext], Hold]] = {
    "memory_wait": lambda spec, ctx: MemoryWait(
        spec.tolerance_s,
        ctx.reports.drop_after_s,
        per_cached=spec.per_cached_s,
        cached_max_s=spec.cached_max_s,
        clock=ctx.clock,
    ),
}

def stage_types() -> dict[str, tuple[str, ...]]:
    """The known `type` names of each stage list."""
    return {"filters": tuple(FILTERS), "scorers": tuple(SCORERS), "picker": tuple(PICKERS), "holds": tuple(HOLDS)}


def build_filters(specs: Sequence[BaseModel], context: StageContext) -> list[Filter]:
    return [FILTERS[spec.type](spec, context) for spec in specs]


def build_scorers(specs: Sequence[BaseModel], context: StageContext) -> list[tuple[Scorer, float]]:
    """(scorer, weight) for every listed scorer, in the order listed."""
    return [(SCORERS[spec.type](spec, context), float(spec.weight)) for spec in specs]


def build_picker(spec: BaseModel, context: StageContext) -> Picker:
    return PICKERS[spec.type](spec, context)


def build_holds(specs: Sequence[BaseModel], context: StageContext) -> list[Hold]:
    return [HOLDS[spec.type](spec, context) for spec in specs]
