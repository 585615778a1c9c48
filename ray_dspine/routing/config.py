"""Router and traffic-policy configuration (the single typed source for `ray_dspine.routing`).

`RouterConfig` is what a pool deployment's `request_router_config.request_router_kwargs` validates
into; `TrafficConfig` is what the ingress uses to map a reasoning level and a session to a pool and
an arm. Both are plain pydantic models: no I/O, JSON-serialisable, `extra="forbid"`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ray_dspine.engines.protocol import ReasoningLevel

PolicyName = Literal["headroom", "cache_aware", "least_load", "pow2"]

# Floating-point slack when checking that arm shares sum to at most 1.
_SHARE_SUM_SLACK = 1e-9


class ScorerWeights(BaseModel):
    """Weight of each scorer in the headroom pipeline's weighted sum (0 turns a scorer off).

    The defaults were chosen by replaying the `bench routing` Mooncake slice in virtual time
    (`ray-dspine bench routing --virtual`, which runs these routers on the replicas' own cores) over a grid
    (predicted_ttft 1-16, prefix_match 1-8, session_affinity 0.5-4): the lowest p99 TTFT whose prefix-hit
    rate stayed at least the cache_aware baseline's. The changes below give up a little of that hit
    rate (0.4-0.9 points) for the TTFT tail and for agent traffic. predicted_decode is off: at weight 1-2 it raised
    that replay's p99 TTFT by 9-14% at the two heavier loads (and lowered it 9% at the lightest); on
    the tau-bench replay a weight of 8 spreads sessions that share one system prompt and halves
    end-to-end p99, at twice the Mooncake p99 TTFT.
    The prefix score saturates with the tokens a hit saves (`RouterConfig.prefix_half_tokens`, 32,768
    score 0.5) rather than with the share of the prompt: on the tau-bench replay, where every session
    shares one policy prompt, the share score drew every new session onto one replica (end-to-end p99
    12.2 s against pow2's 3.8 s); the saved-token score spreads them (5.6 s, and TTFT p99 0.36 s against
    cache_aware's 0.60 s), at 0.3 points of Mooncake prefix-hit rate (half_tokens 16,384-65,536: 0.3-0.5),
    which session_affinity 4 (was 2) wins back in part (0.26 points: a conversation's own later turns
    stay home even when their context is short).
    The TTFT guard (`RouterConfig.ttft_tolerance_s`, 6 s) came from the same virtual replay over six
    Mooncake slices (session-sampling seeds 0-5, engine seeds 0-1), each replica's prefix index sized to
    its KV cache: against cache_aware, p99 TTFT fell by 4.2% on average without the guard and by 11.4 /
    11.4 / 10.7 / 10.2% with 5 / 6 / 7 / 8 s, at prefix-hit rates 0.23 / 0.54 / 0.38 / 0.31 / 0.24
    points under cache_aware's. With engine seeds 0-2, 5 s and 6 s cut p99 alike (10.5%) and 6 s kept
    0.17 points more hit rate.
    The queue weight (0.5, was 0.25) is for agent traffic: on the tau-bench replay, sessions that share
    the policy prompt still gathered on the two replicas that cached it first (a new session saves its
    ~1,500 prompt tokens there, worth more than 0.25 of queue score), and long decode batches there set
    end-to-end p99 (5.6 s against pow2's 3.8 s). At 0.375-4 they spread: end-to-end p99 3.4 s, TTFT p99
    0.24 s (0.36 before), prefix hit 0.867 (0.869); at 0.3 the gain is half. On the six Mooncake slices
    0.5 cut p99 by 11.8% (11.4% at 0.25) at 0.35 points of hit rate under cache_aware's (0.38); 1 and 2
    gave 11.9 / 12.0% at 0.60 / 0.53 points.
    The guard's cached-prefix extension (`RouterConfig.ttft_tolerance_per_cached_s` 4, up to
    `ttft_tolerance_cached_max_s` 12 s) is for the hit rate the guard gave up: on the bench slice
    (engine seeds 0-5) the 6 s tolerance alone left ours 0.37 points under cache_aware's at a 14.5% p99
    cut, and 8 s alone +0.08 points at 8.4%; with the extension, 6 s gives -0.06 points at 13.7%.
    Ratios 4-6 and caps 8-12 s gave the same; an additive allowance (6 s + k x saved, k = 1-3) cut p99 by
    7-11% (hit rate -0.07 to +0.15 points). On the six slices: 11.4% at -0.28 points (11.8% at -0.35 without).
    The tau-bench replay does not change (its turns' cached prefixes are short).
    The predicted-TTFT floor (`RouterConfig.ttft_indifference_s`, 1 s) replaced the score
    (min + 0.5 s) / (est + 0.5 s): through Ray, the tau-bench replay left one of four replicas without
    a single request in each of three replays, since every new session's shared system prompt (~1,500
    tokens, 0.15 s of prefill) was cached elsewhere and that cost the idle replica a quarter of the
    TTFT score, more than the queue score can make up. In virtual time with sessions starting at half
    the bench's rate (`--session-rate 1`, engine seeds 0-2), two replicas stayed idle: TTFT p99 0.264 s,
    end-to-end p99 3.52 s; with the floor all four serve: 0.210 s and 2.60 s (at the bench's rate
    0.240 / 3.40 s before, 0.269 / 3.28 s after). On Mooncake slices 0-11 x engine seeds 0-2 the p99
    cut against cache_aware stayed 11.3% and the hit rate went from 0.17 points under cache_aware's to
    0.01 over (slices 12-17: 13.0 to 13.5%, -0.02 to +0.56 points). Floors of 0.5 / 0.75 / 1.5 s gave
    10.9 / 11.7 / 10.7% at -0.10 / -0.04 / -0.09 points and the same tau-bench figures; a queue weight
    of 2 instead spread the sessions too but cut Mooncake p99 by only 10.0%, and a 2 s slack left a
    replica idle.
    """

    model_config = ConfigDict(extra="forbid")

    session_affinity: float = Field(
        default=4.0, ge=0.0, le=100.0, description="Stay on the replica that last served the session."
    )
    prefix_match: float = Field(
        default=4.0, ge=0.0, le=100.0, description="Prefer the replica whose cached prefix saves the most prefill."
    )
    kv_headroom: float = Field(
        default=0.25, ge=0.0, le=100.0, description="Prefer free KV-cache tokens left after placement."
    )
    mamba_headroom: float = Field(
        default=0.1, ge=0.0, le=100.0, description="Prefer free Mamba-state slots left after placement."
    )
    queue: float = Field(default=0.5, ge=0.0, le=100.0, description="Prefer replicas with fewer requests.")
    predicted_ttft: float = Field(
        default=4.0, ge=0.0, le=100.0, description="Prefer the replica whose prefill backlog ends soonest."
    )
    predicted_decode: float = Field(
        default=0.0, ge=0.0, le=100.0, description="Prefer the replica whose decode steps are quickest."
    )

    def as_dict(self) -> dict[str, float]:
        return {name: float(getattr(self, name)) for name in type(self).model_fields}


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
        description="headroom: filter/score/pick pipeline; cache_aware: SGLang gateway rule; "
        "least_load: fewest running+queued; pow2: keep Ray's PowerOfTwoChoices router.",
    )
    weights: ScorerWeights = Field(default_factory=ScorerWeights, description="Headroom scorer weights.")
    cache_aware: CacheAwareConfig = Field(
        default_factory=CacheAwareConfig, description="Parameters of the cache_aware baseline."
    )
    prefix_index_capacity_blocks: int = Field(
        default=8192,
        ge=1,
        description="Most prefix blocks remembered per replica (LRU beyond this); a replica that reports "
        "its KV size is held to the blocks that size can cache, if fewer.",
    )
    prefix_half_tokens: float = Field(
        default=32_768.0,
        gt=0.0,
        description="prefix_match: cached tokens that score 0.5 (the score is saved / (saved + this)).",
    )
    prefix_block_tokens: int = Field(
        default=512,
        ge=1,
        description="Tokens per prefix-hash block (the ingress hashes 2,048-character blocks, ~512 tokens).",
    )
    session_table_capacity: int = Field(
        default=100_000, ge=1, description="Sessions remembered (LRU beyond this)."
    )
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
    default_prefill_tokens_per_s: float = Field(
        default=10_000.0,
        gt=0.0,
        description="Prefill rate (tokens/s) assumed for replicas that do not report one (predicted_ttft).",
    )
    latency_slack_s: float = Field(
        default=0.5, gt=0.0, description="predicted_decode: differences well under this many seconds barely count."
    )
    ttft_indifference_s: float = Field(
        default=1.0,
        gt=0.0,
        description="predicted_ttft: estimates under this many seconds score alike, so a prefill of a fraction "
        "of a second saved does not outweigh the load of a busier replica.",
    )
    typical_output_tokens: int = Field(
        default=256,
        ge=1,
        description="predicted_decode: output tokens a request is expected to decode when its max_tokens is larger.",
    )
    ttft_tolerance_s: float | None = Field(
        default=6.0,
        ge=0.0,
        description="headroom: only replicas whose predicted TTFT is within this many seconds of the "
        "best are scored (ttft_guard.py); None turns the guard off.",
    )
    ttft_tolerance_per_cached_s: float = Field(
        default=4.0,
        ge=0.0,
        description="headroom: the guard also keeps a replica whose predicted TTFT is within this many "
        "seconds per second of prefill its cached prefix saves, when that allows more than "
        "ttft_tolerance_s (s per s; 0 turns the extension off).",
    )
    ttft_tolerance_cached_max_s: float = Field(
        default=12.0,
        ge=0.0,
        description="headroom: the most seconds over the best that the cached-prefix extension allows.",
    )
    memory_wait_tolerance_s: float | None = Field(
        default=2.0,
        ge=0.0,
        description="headroom: when the replica chosen among those that can hold the request now would start "
        "it more than this many seconds later than a replica that is only short of memory, and has more "
        "prefill queued, the request waits for memory there instead (memory_wait.py); None places it at once.",
    )
    pacing_max_long_share: float = Field(
        default=0.01,
        ge=0.0,
        le=1.0,
        description="headroom: a replica that paces long prompts may pace one only while long prompts are at "
        "most this share of the pool's recent requests (pacing_permit.py; 0.01: the requests above a p99).",
    )
    pacing_window_requests: int = Field(
        default=2_000, ge=1, description="headroom: recent requests over which the long prompts' share is taken."
    )
    pacing_prior_requests: int = Field(
        default=200,
        ge=0,
        description="headroom: requests of share pacing_prior_share the share starts from (a fresh pool).",
    )
    pacing_prior_share: float = Field(
        default=0.005, ge=0.0, le=1.0, description="headroom: the long prompts' share a fresh pool expects."
    )
    assumed_stats_age_s: float = Field(
        default=1.0,
        ge=0.0,
        description="Age assumed for a report that carries no `reported_at_s`; set it to the "
        "deployment's request_routing_stats_period_s.",
    )

    @model_validator(mode="after")
    def _check_staleness_order(self) -> RouterConfig:
        if self.drop_after_s < self.stale_after_s:
            raise ValueError(
                f"drop_after_s ({self.drop_after_s}) must be >= stale_after_s ({self.stale_after_s})"
            )
        return self


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
