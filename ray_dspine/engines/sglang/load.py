"""Turn SGLang's `/v1/loads` answer and Prometheus gauges into the replica's LoadSnapshot (headroom).

Gauges are summed over DP ranks (shares and means in RATIO_GAUGES are averaged over them instead) and,
within one DP rank, the largest value over its TP ranks is taken (TP ranks report the same pools). Metric names (GAUGES) are gauges SGLang 0.5.23's SchedulerMetricsCollector
(sglang/srt/observability/metrics_collector.py) declares: sglang:num_running_reqs, sglang:num_queue_reqs,
sglang:max_total_num_tokens (emitted once at start-up), sglang:kv_available_tokens, sglang:kv_evictable_tokens
("radix-cached" token slots), sglang:mamba_available_tokens ("free state slots in the mamba SSM pool"),
sglang:mamba_evictable_tokens, sglang:mamba_used_tokens, sglang:mamba_usage, sglang:full_token_usage (KV
usage alone: on a hybrid model sglang:token_usage is the larger of KV and Mamba usage) and
sglang:spec_accept_length. `/v1/loads` entries are SGLang's
LoadSnapshot.to_dict (sglang/srt/managers/load_snapshot.py), one per DP rank; LOAD_KEYS are the ones read.
Both are checked against SGLang's own code by tests/sglang_contract/test_loads_and_metrics.py.

Rules (sums over DP ranks; M = the gauges, L = /v1/loads, P = the capacity plan):
  L1 running  = L.num_running_reqs, else M.num_running_reqs;  queued = L.num_waiting_reqs, else M.num_queue_reqs.
  L2 total_kv = L.max_total_num_tokens, else M.max_total_num_tokens, else P.free_kv_tokens.
  L3 free_kv  = M.kv_available_tokens + M.kv_evictable_tokens when exported, else total_kv - L.num_used_tokens;
                clipped to [0, total_kv] (evictable prefix-cache tokens are reclaimable headroom).
  L3b evictable_kv = M.kv_evictable_tokens clipped to [0, free_kv] when exported, else not reported (None).
  L4 k = P.state_slots_per_request (Mamba slots + per-draft snapshots one request takes, planner units);
     N = L.max_running_requests, else P.max_running_requests;
     left = N - running, and when Mamba gauges exist min(left, mamba_available + mamba_evictable)
     (a new request needs one free pool slot);
     free_state_slots = max(0, left) * k,  total_state_slots = N * k.
  L5 EMA      e <- (1 - a) * e + a * x per finished speculative request with acceptance length x, start 1.0;
              reported as 1.0 while the replica decodes autoregressively.
  L6 draft_vram_gb = P.draft_vram_gb while the drafter runs, else 0.
  L7 host_kv_tokens = the HiCache host tier the launch arguments give (hicache.py) over total_kv device
     tokens at P.target_kv_bytes_per_token, beside a Mamba pool of P.max_mamba_cache_size x
     P.mamba_state_bytes_per_request; 0 without --enable-hierarchical-cache.
  L8 passed through for the operator's gauges: kv_token_usage = M.full_token_usage, mamba_usage =
     M.mamba_usage, spec_accept_length = M.spec_accept_length while the drafter runs (else not reported).
Complexity: O(metric samples) per poll.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from ...capacity import CapacityPlan
from ..protocol import LoadSnapshot
from .hicache import plan_host_tier

GAUGES = (
    "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:max_total_num_tokens",
    "sglang:kv_available_tokens", "sglang:kv_evictable_tokens", "sglang:mamba_available_tokens",
    "sglang:mamba_evictable_tokens", "sglang:mamba_used_tokens", "sglang:mamba_usage",
    "sglang:full_token_usage", "sglang:spec_accept_length",
)  # fmt: skip
RATIO_GAUGES = frozenset({"sglang:full_token_usage", "sglang:mamba_usage", "sglang:spec_accept_length"})
LOAD_KEYS = ("num_running_reqs", "num_waiting_reqs", "max_total_num_tokens", "num_used_tokens", "max_running_requests")


def parse_gauges(text: str) -> dict[str, float]:
    """Prometheus text -> {metric name: sum (RATIO_GAUGES: mean) over DP ranks of the max over that rank's series}."""
    by_rank: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name not in GAUGES:
                continue
            ranks = by_rank.setdefault(sample.name, {})
            rank = sample.labels.get("dp_rank", "0")
            ranks[rank] = max(ranks.get(rank, sample.value), sample.value)
    return {name: sum(ranks.values()) / (len(ranks) if name in RATIO_GAUGES else 1) for name, ranks in by_rank.items()}


def _sum(loads: list[dict[str, Any]], key: str) -> float | None:
    values = [entry[key] for entry in loads if isinstance(entry.get(key), (int, float))]
    return float(sum(values)) if values else None


@dataclass
class LoadInputs:
    """What one poll saw; None where a source did not answer."""

    loads: dict[str, Any] | None = None
    gauges: dict[str, float] = field(default_factory=dict)


def build_snapshot(
    inputs: LoadInputs,
    plan: CapacityPlan,
    *,
    healthy: bool,
    drafter_active: bool,
    accept_ema: float,
    extra_args: Sequence[str] = (),
) -> LoadSnapshot:
    ranks = list((inputs.loads or {}).get("loads") or [])
    gauges = inputs.gauges

    def pick(load_key: str, gauge: str) -> float | None:
        value = _sum(ranks, load_key)
        return value if value is not None else gauges.get(gauge)

    running = int(pick("num_running_reqs", "sglang:num_running_reqs") or 0)
    queued = int(pick("num_waiting_reqs", "sglang:num_queue_reqs") or 0)
    total_kv = int(pick("max_total_num_tokens", "sglang:max_total_num_tokens") or plan.free_kv_tokens)
    if "sglang:kv_available_tokens" in gauges:
        free_kv = gauges["sglang:kv_available_tokens"] + gauges.get("sglang:kv_evictable_tokens", 0.0)
    else:
        free_kv = total_kv - (_sum(ranks, "num_used_tokens") or 0.0)
    free_kv = int(min(max(free_kv, 0), total_kv))
    evictable_kv = gauges.get("sglang:kv_evictable_tokens")
    evictable = None if evictable_kv is None else int(min(max(evictable_kv, 0), free_kv))

    per_request = plan.state_slots_per_request
    max_running = int(_sum(ranks, "max_running_requests") or plan.max_running_requests)
    left = max_running - running
    if "sglang:mamba_available_tokens" in gauges:
        pool_free = gauges["sglang:mamba_available_tokens"] + gauges.get("sglang:mamba_evictable_tokens", 0.0)
        left = min(left, int(pool_free))
    host = plan_host_tier(extra_args, plan, total_kv)
    return LoadSnapshot(
        healthy=healthy,
        total_kv_tokens=total_kv,
        host_kv_tokens=0 if host is None else host.kv_tokens,
        free_kv_tokens=free_kv,
        evictable_kv_tokens=evictable,
        total_state_slots=max_running * per_request,
        free_state_slots=max(0, left) * per_request,
        state_slots_per_request=per_request,
        num_running=running,
        num_queued=queued,
        accept_length_ema=round(accept_ema if drafter_active else 1.0, 4),
        drafter_active=drafter_active,
        draft_vram_gb=round(plan.draft_vram_gb, 4) if drafter_active else 0.0,
        spec_accept_length=gauges.get("sglang:spec_accept_length") if drafter_active else None,
        kv_token_usage=gauges.get("sglang:full_token_usage"),
        mamba_usage=gauges.get("sglang:mamba_usage"),
        engine="sglang",
    )


def update_ema(ema: float, accept_length: float, alpha: float) -> float:
    """Rule L5."""
    return (1.0 - alpha) * ema + alpha * accept_length
