"""Router and traffic-policy configuration (the single typed source for `ray_dspine.routing`).

`RouterConfig` is what a pool deployment's `request_router_config.request_router_kwargs` validates
into; `TrafficConfig` is what the ingress uses to map a reasoning level and a session to a pool and
an arm. Both are plain pydantic models: no I/O, JSON-serialisable, `extra="forbid"`.

The headroom policy is a list of stages, each named by its `type` with its own parameters:

    router:
      policy: headroom
      reports:   {stale_after_s: 5.0, ...}              how far load reports are trusted
      estimator: {default_prefill_tokens_per_s: 10000, ...}   the per-decision estimate (estimate.py)
      filters:   [{type: fits_memory}, {type: ttft_guard, tolerance_s: 6.0}]     in order
      scorers:   [{type: queue, weight: 0.5}, ...]      weighted sum; a scorer not listed is off
      picker:    {type: max_score}
      holds:     [{type: memory_wait, tolerance_s: 2.0}]   may make a placed request wait instead
      pacing:    {max_long_share: 0.01, ...}            pacing permits (pacing_permit.py)

Every stage spec is a discriminated union on `type` with `extra="forbid"`: an unknown type is refused
with the list of known ones, an unknown field with its name. The defaults are the measured settings;
each spec's docstring gives its rule's source and where its default figures came from (SIMULATED:
`ray-dspine bench routing --virtual` replays of the Mooncake and tau-bench traces).
"""

from __future__ import annotations

from typing import Annotated, Literal, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ray_dspine.engines.protocol import ReasoningLevel

PolicyName = Literal["headroom", "cache_aware", "least_load", "pow2"]

# Floating-point slack when checking that arm shares sum to at most 1.
_SHARE_SUM_SLACK = 1e-9


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReportsConfig(_Spec):
    """How far the router trusts the replicas' load reports (every policy)."""

    stale_after_s: float = Field(
        default=5.0, gt=0.0, description="Load reports older than this count only part of their headroom."
    )
    stale_headroom_fraction: float = Field(
        default=0.5, ge=0.0, le=1.0, description="Share of reported free KV/state a stale report is trusted for."
    )
    drop_after_s: float = Field(
        default=60.0, gt=0.0, description="Replicas whose last report is older than this are not used."
    )
    receipt_timeout_s: float = Field(
        default=5.0,
        gt=0.0,
        description="A placement the replica has not confirmed receiving counts against every load report "
        "for at most this many seconds (Ray confirms when a replica accepts the request; reservations.py).",
    )
    assumed_stats_age_s: float = Field(
        default=1.0,
        ge=0.0,
        description="Age assumed for a report that carries no `reported_at_s`; set it to the "
        "deployment's request_routing_stats_period_s.",
    )

    @model_validator(mode="after")
    def _check_staleness_order(self) -> ReportsConfig:
        if self.drop_after_s < self.stale_after_s:
            raise ValueError(
                f"drop_after_s ({self.drop_after_s}) must be >= stale_after_s ({self.stale_after_s}): "
                "raise drop_after_s or lower stale_after_s"
            )
        return self


class EstimatorConfig(_Spec):
    """The router-side state every headroom stage reads through the per-decision estimate (estimate.py)."""

    default_prefill_tokens_per_s: float = Field(
        default=10_000.0,
        gt=0.0,
        description="Prefill rate (tokens/s) assumed for replicas that do not report one.",
    )
    prefix_block_tokens: int = Field(
        default=512,
        ge=1,
        description="Tokens per prefix-hash block (the ingress hashes 2,048-character blocks, ~512 tokens).",
    )
    prefix_index_capacity_blocks: int = Field(
        default=8192,
        ge=1,
        description="Most prefix blocks remembered per replica (LRU beyond this); a replica that reports "
        "its KV size is held to the blocks that size can cache, if fewer.",
    )
    session_table_capacity: int = Field(
        default=100_000, ge=1, description="Sessions remembered (LRU beyond this)."
    )


# ----------------------------------------------------------------------------------------------- filters


class FitsMemoryFilter(_Spec):
    """Keep replicas that are healthy, report recently enough, and hold the request's KV tokens and
    state slots now (filters.py). The pipeline's fallbacks (unreported replicas, a request no replica
    could ever hold, waiting) apply when a filter leaves no replica."""

    type: Literal["fits_memory"] = "fits_memory"


class TtftGuardFilter(_Spec):
    """Keep replicas whose predicted TTFT is within an allowance of the best (ttft_guard.py).

    tolerance_s 6: six Mooncake slices (session seeds 0-5, engine seeds 0-1) cut p99 TTFT against
    cache_aware by 4.2% without the guard and 11.4 / 11.4 / 10.7 / 10.2% at 5 / 6 / 7 / 8 s; with engine
    seeds 0-2, 5 s and 6 s cut it alike (10.5%) and 6 s kept 0.17 points more prefix-hit rate.
    per_cached_s 4 up to cached_max_s 12: on the bench slice (engine seeds 0-5) 6 s alone left ours 0.37
    points of hit rate under cache_aware's at a 14.5% p99 cut; with the extension -0.06 points at 13.7%
    (ratios 4-6 and caps 8-12 s alike; an additive allowance cut p99 by only 7-11%).
    """

    type: Literal["ttft_guard"] = "ttft_guard"
    tolerance_s: float = Field(
        default=6.0, ge=0.0, description="Seconds of predicted TTFT over the best that any replica may cost."
    )
    per_cached_s: float = Field(
        default=4.0,
        ge=0.0,
        description="Also allow this many seconds per second of prefill the replica's cached prefix saves "
        "(s per s; 0 turns the extension off).",
    )
    cached_max_s: float = Field(
        default=12.0, ge=0.0, description="The most seconds over the best that the cached-prefix extension allows."
    )


FilterSpec = Annotated[Union[FitsMemoryFilter, TtftGuardFilter], Field(discriminator="type")]


# ----------------------------------------------------------------------------------------------- scorers
# Weights were chosen on the bench Mooncake slice in virtual time over a grid (predicted_ttft 1-16,
# prefix_match 1-8, session_affinity 0.5-4): the lowest p99 TTFT whose prefix-hit rate stayed at least
# cache_aware's; later changes trade 0.4-0.9 points of that hit rate for the TTFT tail and agent traffic.


class SessionAffinityScorer(_Spec):
    """Stay on the replica that last served the session (scorers/session_affinity.py).

    weight 4 (was 2): wins back 0.26 of the 0.3 points of Mooncake hit rate the saved-token prefix
    score gave up (a conversation's later turns stay home even when their context is short).
    """

    type: Literal["session_affinity"] = "session_affinity"
    weight: float = Field(default=4.0, gt=0.0, le=100.0, description="Weight in the sum (leave out to turn off).")


class PrefixMatchScorer(_Spec):
    """Prefer the replica whose cached prefix saves the most prefill (scorers/prefix_match.py).

    The score saturates with the tokens saved (half_tokens 32,768 scores 0.5), not with the prompt
    share: on the tau-bench replay, where every session shares one policy prompt, the share score drew
    every new session onto one replica (end-to-end p99 12.2 s against pow2's 3.8 s); the saved-token
    score spreads them (5.6 s; TTFT p99 0.36 s against cache_aware's 0.60 s) at 0.3 points of Mooncake
    hit rate (half_tokens 16,384-65,536: 0.3-0.5). weight 4: the grid above.
    """

    type: Literal["prefix_match"] = "prefix_match"
    weight: float = Field(default=4.0, gt=0.0, le=100.0, description="Weight in the sum (leave out to turn off).")
    half_tokens: float = Field(
        default=32_768.0, gt=0.0, description="Cached tokens that score 0.5 (score = saved / (saved + this))."
    )


class KvHeadroomScorer(_Spec):
    """Prefer free KV-cache tokens left after placement (scorers/kv_headroom.py); weight 0.25: the grid above."""

    type: Literal["kv_headroom"] = "kv_headroom"
    weight: float = Field(default=0.25, gt=0.0, le=100.0, description="Weight in the sum (leave out to turn off).")


class MambaHeadroomScorer(_Spec):
    """Prefer free Mamba-state slots left after placement (scorers/mamba_headroom.py); weight 0.1: the grid above."""

    type: Literal["mamba_headroom"] = "mamba_headroom"
    weight: float = Field(default=0.1, gt=0.0, le=100.0, description="Weight in the sum (leave out to turn off).")


class QueueScorer(_Spec):
    """Prefer replicas with fewer requests (scorers/queue.py).

    weight 0.5 (was 0.25), for agent traffic: on the tau-bench replay sessions sharing the policy prompt
    gathered on the two replicas that cached it first (end-to-end p99 5.6 s against pow2's 3.8 s); at
    0.375-4 they spread (3.4 s, TTFT p99 0.24 s). On six Mooncake slices 0.5 cut p99 by 11.8% (11.4% at
    0.25) at 0.35 points of hit rate under cache_aware's; 1 and 2 gave 11.9 / 12.0% at 0.60 / 0.53 points.
    """

    type: Literal["queue"] = "queue"
    weight: float = Field(default=0.5, gt=0.0, le=100.0, description="Weight in the sum (leave out to turn off).")


class PredictedTtftScorer(_Spec):
    """Prefer the replica whose prefill backlog ends soonest (scorers/predicted_ttft.py).

    weight 4: the grid above. indifference_s 1 (estimates under it score alike) replaced the score
    (min + 0.5 s) / (est + 0.5 s), which left replicas idle on the tau-bench replay (each new session's
    shared ~1,500-token prompt was cached elsewhere). With `--session-rate 1`, engine seeds 0-2: TTFT p99
    0.264 -> 0.210 s, end-to-end p99 3.52 -> 2.60 s; on Mooncake slices 0-11 the p99 cut against
    cache_aware stayed 11.3% and the hit rate went from 0.17 points under cache_aware's to 0.01 over.
    Floors of 0.5 / 0.75 / 1.5 s gave 10.9 / 11.7 / 10.7%.
    """

    type: Literal["predicted_ttft"] = "predicted_ttft"
    weight: float = Field(default=4.0, gt=0.0, le=100.0, description="Weight in the sum (leave out to turn off).")
    indifference_s: float = Field(
        default=1.0,
        gt=0.0,
        description="Estimates under this many seconds score alike, so a prefill of a fraction of a second "
        "saved does not outweigh the load of a busier replica.",
    )


class PredictedDecodeScorer(_Spec):
    """Prefer the replica whose decode steps are quickest (scorers/predicted_decode.py).

    Not listed by default: at weight 1-2 it raised the Mooncake replay's p99 TTFT by 9-14% at the two
    heavier loads (and lowered it 9% at the lightest); on the tau-bench replay a weight of 8 spreads
    sessions that share one system prompt and halves end-to-end p99, at twice the Mooncake p99 TTFT.
    """

    type: Literal["predicted_decode"] = "predicted_decode"
    weight: float = Field(default=1.0, gt=0.0, le=100.0, description="Weight in the sum (leave out to turn off).")
    slack_s: float = Field(default=0.5, gt=0.0, description="Differences well under this many seconds barely count.")
    typical_output_tokens: int = Field(
        default=256, ge=1, description="Output tokens a request is expected to decode when its max_tokens is larger."
    )


ScorerSpec = Annotated[
    Union[
        SessionAffinityScorer,
        PrefixMatchScorer,
        KvHeadroomScorer,
        MambaHeadroomScorer,
        QueueScorer,
        PredictedTtftScorer,
        PredictedDecodeScorer,
    ],
    Field(discriminator="type"),
]


# ----------------------------------------------------------------------------------------------- picker


class MaxScorePicker(_Spec):
    """Rank by weighted total, then fewer requests in flight, then replica_id (picker.py)."""

    type: Literal["max_score"] = "max_score"


PickerSpec = Annotated[Union[MaxScorePicker], Field(discriminator="type")]


# ----------------------------------------------------------------------------------------------- holds


class MemoryWaitHold(_Spec):
    """Wait for a replica only short of memory when it would start the request far sooner (memory_wait.py).

    tolerance_s 2 and the allowance (per_cached_s, cached_max_s: the TTFT guard's defaults) were measured
    on Mooncake slices 0-17 at 1-1.5x the bench's load; the figures are in memory_wait.py.
    """

    type: Literal["memory_wait"] = "memory_wait"
    tolerance_s: float = Field(
        default=2.0,
        ge=0.0,
        description="Wait when the chosen replica would start the request more than this many seconds later "
        "than a replica only short of memory (beyond the cached-prefix allowance).",
    )
    per_cached_s: float = Field(
        default=4.0, ge=0.0, description="Allowance per second of prefill the chosen replica's cache saves (s per s)."
    )
    cached_max_s: float = Field(default=12.0, ge=0.0, description="The most seconds the cached-prefix allowance gives.")


HoldSpec = Annotated[Union[MemoryWaitHold], Field(discriminator="type")]


class PacingConfig(_Spec):
    """Pacing permits for long prompts (pacing_permit.py); 0.01: the requests above a p99."""

    max_long_share: float = Field(
        default=0.01,
        ge=0.0,
        le=1.0,
        description="A replica that paces long prompts may pace one only while long prompts are at most this "
        "share of the pool's recent requests.",
    )
    window_requests: int = Field(default=2_000, ge=1, description="Recent requests over which the share is taken.")
    prior_requests: int = Field(
        default=200, ge=0, description="Requests of share prior_share the share starts from (a fresh pool)."
    )
    prior_share: float = Field(
        default=0.005, ge=0.0, le=1.0, description="The long prompts' share a fresh pool expects."
    )


def default_filters() -> list[FilterSpec]:
    return [FitsMemoryFilter(), TtftGuardFilter()]


def default_scorers() -> list[ScorerSpec]:
    return [
        SessionAffinityScorer(),
        PrefixMatchScorer(),
        KvHeadroomScorer(),
        MambaHeadroomScorer(),
        QueueScorer(),
        PredictedTtftScorer(),
    ]


def default_holds() -> list[HoldSpec]:
    return [MemoryWaitHold()]


def _check_distinct(kind: str, specs: list) -> None:
    types = [spec.type for spec in specs]
    for name in dict.fromkeys(types):
        if types.count(name) > 1:
            raise ValueError(f"{kind} lists type {name!r} {types.count(name)} times: keep one entry per type")


class CacheAwareConfig(BaseModel):
    """SGLang Model Gateway `cache_aware` parameters, defaults as its documentation lists them.

    Source: SGLang Model Gateway docs, "Cache-Aware Policy Tuning" (`--cache-threshold 0.3`,
    `--balance-abs-threshold 64`, `--balance-rel-threshold 1.5`, `--eviction-interval-secs 120`,
    `--max-tree-size 67108864`). Our approximate tree counts prefix blocks, not characters.
    """

    model_config = ConfigDict(extra="forbid")

    cache_threshold: float = Field(
        default=0.3, ge=0.0, le=1.0, description="Match rate above which the best-matching replica wins."
    )
    balance_abs_threshold: int = Field(
        default=64, ge=0, description="Imbalance needs max_load - min_load above this (requests)."
    )
    balance_rel_threshold: float = Field(
        default=1.5, ge=1.0, description="Imbalance also needs max_load > min_load * this."
    )
    eviction_interval_s: float = Field(
        default=120.0, gt=0.0, description="Seconds between trims of each replica's tree to max_tree_size."
    )
    max_tree_size: int = Field(
        default=67_108_864, ge=1, description="Most prefix blocks kept per replica after a trim."
    )


class RouterConfig(BaseModel):
    """How a pool deployment places requests on its replicas."""

    model_config = ConfigDict(extra="forbid")

    policy: PolicyName = Field(
        default="headroom",
        description="headroom: the stage pipeline below; cache_aware: SGLang gateway rule; "
        "least_load: fewest running+queued; pow2: keep Ray's PowerOfTwoChoices router.",
    )
    reports: ReportsConfig = Field(default_factory=ReportsConfig, description="Trust in load reports (every policy).")
    estimator: EstimatorConfig = Field(
        default_factory=EstimatorConfig, description="headroom: prefix index, session table and prefill rates."
    )
    filters: list[FilterSpec] = Field(
        default_factory=default_filters,
        description="headroom: filters applied in order (types: fits_memory, ttft_guard); fits_memory is required.",
    )
    scorers: list[ScorerSpec] = Field(
        default_factory=default_scorers,
        description="headroom: scorers summed with their weights (types: session_affinity, prefix_match, "
        "kv_headroom, mamba_headroom, queue, predicted_ttft, predicted_decode); a scorer not listed is off.",
    )
    picker: PickerSpec = Field(default_factory=MaxScorePicker, description="headroom: how scored replicas are ranked.")
    holds: list[HoldSpec] = Field(
        default_factory=default_holds,
        description="headroom: rules that may make the chosen placement wait (types: memory_wait); [] places at once.",
    )
    pacing: PacingConfig = Field(default_factory=PacingConfig, description="headroom: pacing permits for long prompts.")
    cache_aware: CacheAwareConfig = Field(
        default_factory=CacheAwareConfig, description="Parameters of the cache_aware baseline."
    )

    @model_validator(mode="after")
    def _check_stages(self) -> RouterConfig:
        _check_distinct("filters", self.filters)
        _check_distinct("scorers", self.scorers)
        _check_distinct("holds", self.holds)
        if not any(spec.type == "fits_memory" for spec in self.filters):
            raise ValueError(
                "filters must list {type: fits_memory}: without it unhealthy, silent or full replicas are scored"
            )
        return self

    def stage(self, type_name: str) -> BaseModel | None:
        """The filter, scorer or hold spec of this type, or None when it is not listed."""
        for spec in (*self.filters, *self.scorers, *self.holds):
            if spec.type == type_name:
                return spec
        return None

    def with_stage(self, spec: BaseModel) -> RouterConfig:
        """A copy with `spec` in place of the listed stage of its type (appended when none is listed)."""
        field = STAGE_FIELDS[spec.type]
        specs = list(getattr(self, field))
        at = next((i for i, old in enumerate(specs) if old.type == spec.type), None)
        if at is None:
            specs.append(spec)
        else:
            specs[at] = spec
        return self.model_validate(self.model_dump() | {field: [s.model_dump() for s in specs]})

    def without_stage(self, type_name: str) -> RouterConfig:
        """A copy with the filter, scorer or hold of this type left out (turned off)."""
        dumped = self.model_dump()
        for field in ("filters", "scorers", "holds"):
            dumped[field] = [s for s in dumped[field] if s["type"] != type_name]
        return self.model_validate(dumped)


def _types_of(spec_union: object) -> tuple[str, ...]:
    inner = get_args(spec_union)[0]
    members = get_args(inner) or (inner,)  # a one-member Union is the member itself
    return tuple(member.model_fields["type"].default for member in members)


FILTER_TYPES = _types_of(FilterSpec)
SCORER_TYPES = _types_of(ScorerSpec)
HOLD_TYPES = _types_of(HoldSpec)
# Stage type -> the RouterConfig list that holds it.
STAGE_FIELDS: dict[str, str] = (
    dict.fromkeys(FILTER_TYPES, "filters") | dict.fromkeys(SCORER_TYPES, "scorers") | dict.fromkeys(HOLD_TYPES, "holds")
)


class ArmSplit(BaseModel):
    """A sticky share of a rule's sessions diverted to another pool under an arm name."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="Arm name reported per request (e.g. 'dflash2').")
    pool: str = Field(min_length=1, description="Pool the arm's sessions go to.")
    share: float = Field(ge=0.0, le=1.0, description="Fraction of the rule's sessions in this arm.")


class TrafficRule(BaseModel):
    """Requests at these reasoning levels go to `pool`, except sessions diverted to an arm."""

    model_config = ConfigDict(extra="forbid")

    reasoning_levels: list[ReasoningLevel] = Field(min_length=1, description="Levels this rule serves.")
    pool: str = Field(min_length=1, description="Pool for sessions not diverted to an arm.")
    arms: list[ArmSplit] = Field(default_factory=list, description="Diversions, in interval order.")
    control_arm: str = Field(default="control", min_length=1, description="Arm name of the rule's own pool.")

    @model_validator(mode="after")
    def _check_arms(self) -> TrafficRule:
        total = sum(arm.share for arm in self.arms)
        if total > 1.0 + _SHARE_SUM_SLACK:
            raise ValueError(f"arm shares of pool {self.pool!r} sum to {total:.6g} > 1")
        names = [arm.name for arm in self.arms] + [self.control_arm]
        if len(set(names)) != len(names):
            raise ValueError(f"arm names of pool {self.pool!r} must be distinct (control included): {names}")
        if len(set(self.reasoning_levels)) != len(self.reasoning_levels):
            raise ValueError(f"rule for pool {self.pool!r} lists a reasoning level twice")
        return self


class TrafficConfig(BaseModel):
    """Reasoning level -> pool rules with sticky A/B arms."""

    model_config = ConfigDict(extra="forbid")

    rules: list[TrafficRule] = Field(min_length=1, description="One rule per group of reasoning levels.")
    default_reasoning_level: ReasoningLevel = Field(
        default="medium", description="Level for requests that do not state one."
    )
    salt: str = Field(
        default="ray-dspine-v1", description="Mixed into the session hash; change it to reshuffle arms."
    )

    @model_validator(mode="after")
    def _check_levels_unique(self) -> TrafficConfig:
        seen: dict[str, str] = {}
        for rule in self.rules:
            for level in rule.reasoning_levels:
                if level in seen:
                    raise ValueError(
                        f"reasoning level {level!r} is in the rules of both {seen[level]!r} and {rule.pool!r}"
                    )
                seen[level] = rule.pool
        if self.default_reasoning_level not in seen:
            raise ValueError(f"default_reasoning_level {self.default_reasoning_level!r} has no rule")
        return self
