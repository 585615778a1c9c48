"""Request metrics through `ray.serve.metrics` (exported on Ray's metrics port with deployment tags).

TTFT, inter-token latency and end-to-end latency are measured at the ingress, so they include the
hop to the replica, as a client would see them. Inter-token latency is observed per chunk and
divided by the chunk's token count (a verify step delivers several tokens at once). The time to the
first chunk is also split in two, as the Server-Timing header tells it (server_timing.py): the part
in the replica (`replica`: the engine's queueing and prefill) and the rest of the ingress's wait
(`ingress - parse - replica`: the router's choice and waits, and Ray's transport both ways).

Every request the ingress admitted ends in dspine_requests with its finish reason: a replica that stopped,
a stream cut early and a deadline passed are all "error" (before or after the first chunk), a client that
left is "abort".

Per replica, the engine's own gauges are re-exported: an SGLang server binds 127.0.0.1 inside its pod,
where no Prometheus reaches it, and its replica already reads its /metrics every load_poll_s into the
LoadSnapshot; Ray exports these gauges on its metrics port with deployment and replica tags
(`engine_gauges`, rules, for a snapshot s):
  G1 dspine_spec_accept_length = s.spec_accept_length when reported and >= 1 (SGLang writes 0 until its
     first verify step, and without speculation); else s.accept_length_ema while the drafter is active;
     else 1 (an autoregressive step yields one token).
  G2 dspine_kv_token_usage = s.kv_token_usage clipped to [0, 1] when reported; else
     1 - free_kv_tokens / total_kv_tokens (0 with no pool). Both count cached, evictable prefixes as free.
  G3 dspine_mamba_usage = s.mamba_usage clipped to [0, 1] when reported; else
     1 - free_state_slots / total_state_slots (0 with no pool).
"""

from __future__ import annotations

import time

from ..engines.protocol import Chunk, GenerateRequest, LoadSnapshot, Usage

# Tags carry only names the configuration gives (pool, arm), a decode path, a finish reason or an HTTP
# status: never request content (prompt text, keys, session ids), which the tests check with canaries.
TAGS = ("pool", "arm", "path")
LATENCY_BOUNDARIES_S = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]
ACCEPT_BOUNDARIES = [1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10, 12, 16]


class RequestMetrics:
    """Holds the metric objects; built lazily so importing this module needs no Ray."""

    def __init__(self):
        from ray.serve import metrics

        self.ttft = metrics.Histogram("dspine_ttft_s", "Time to first token (s).", LATENCY_BOUNDARIES_S, TAGS)
        self.itl = metrics.Histogram("dspine_itl_s", "Inter-token latency (s per token).", LATENCY_BOUNDARIES_S, TAGS)
        self.e2e = metrics.Histogram("dspine_e2e_s", "End-to-end latency (s).", LATENCY_BOUNDARIES_S, TAGS)
        self.accept = metrics.Histogram(
            "dspine_accept_length", "Tokens per verify step, per request.", ACCEPT_BOUNDARIES, TAGS
        )
        self.first_chunk_replica = metrics.Histogram(
            "dspine_first_chunk_replica_s",
            "Before the first chunk, time in the replica: the engine's queueing and prefill (s).",
            LATENCY_BOUNDARIES_S, TAGS,
        )  # fmt: skip
        self.first_chunk_routing = metrics.Histogram(
            "dspine_first_chunk_routing_s",
            "Before the first chunk, the ingress's wait outside the replica: routing and Ray's transport (s).",
            LATENCY_BOUNDARIES_S, TAGS,
        )  # fmt: skip
        self.output_tokens = metrics.Counter("dspine_output_tokens", "Output tokens.", TAGS)
        self.requests = metrics.Counter("dspine_requests", "Finished requests.", TAGS + ("finish_reason",))
        self.refused = metrics.Counter(
            "dspine_refused_requests",
            "Requests refused before any work: by a replica (its 4xx), by admission (429) or by Ray's full queue (503).",
            ("pool", "arm", "status"),
        )

    def start(self, request: GenerateRequest, path: str, started: float) -> "RequestTimer":
        return RequestTimer(self, {"pool": request.pool, "arm": request.arm, "path": path}, started)

    def record_first_chunk(self, request: GenerateRequest, path: str, replica_s: float, routing_s: float) -> None:
        tags = {"pool": request.pool, "arm": request.arm, "path": path}
        self.first_chunk_replica.observe(replica_s, tags=tags)
        self.first_chunk_routing.observe(routing_s, tags=tags)

    def record_refusal(self, request: GenerateRequest, chunk: Chunk) -> None:
        self.refused.inc(tags={"pool": request.pool, "arm": request.arm, "status": str(chunk.error_status)})


class RequestTimer:
    def __init__(self, metrics: RequestMetrics, tags: dict, started: float, clock=time.monotonic):
        self._metrics = metrics
        self._tags = tags
        self._clock = clock
        self._started = started
        self._last: float | None = None
        self._done = False

    def tokens(self, count: int) -> None:
        if count <= 0:
            return
        now = self._clock()
        if self._last is None:
            self._metrics.ttft.observe(now - self._started, tags=self._tags)
        else:
            self._metrics.itl.observe((now - self._last) / count, tags=self._tags)
        self._last = now
        self._metrics.output_tokens.inc(count, tags=self._tags)

    def finish(self, reason: str, usage: Usage | None) -> None:
        if self._done:
            return
        self._done = True
        self._metrics.e2e.observe(self._clock() - self._started, tags=self._tags)
        if usage is not None and usage.verify_steps:
            self._metrics.accept.observe(usage.accept_length, tags=self._tags)
        self._metrics.requests.inc(tags={**self._tags, "finish_reason": reason})


REPLICA_TAGS = ("pool",)


class ReplicaMetrics:
    """Per-replica gauges from the engine's load snapshot, and the replica's price (for cost panels).

    Ray adds the deployment, replica and application tags; `record` is called from
    `record_routing_stats`, so the gauges refresh every `routing_stats_period_s`.
    """

    def __init__(self, pool: str, usd_per_hour: float):
        from ray.serve import metrics

        self._tags = {"pool": pool}
        self._usd_per_hour = usd_per_hour
        self.kv_free = metrics.Gauge("dspine_kv_free_tokens", "Free KV-cache tokens.", REPLICA_TAGS)
        self.kv_total = metrics.Gauge("dspine_kv_total_tokens", "KV-cache tokens.", REPLICA_TAGS)
        self.kv_host = metrics.Gauge("dspine_kv_host_tokens", "KV tokens of the HiCache host tier.", REPLICA_TAGS)
        self.state_free = metrics.Gauge("dspine_state_free_slots", "Free Mamba-state slots.", REPLICA_TAGS)
        self.state_total = metrics.Gauge("dspine_state_total_slots", "Mamba-state slots.", REPLICA_TAGS)
        self.running = metrics.Gauge("dspine_running_requests", "Requests being decoded.", REPLICA_TAGS)
        self.queued = metrics.Gauge("dspine_queued_requests", "Requests waiting in the engine.", REPLICA_TAGS)
        self.accept_ema = metrics.Gauge("dspine_accept_length_ema", "Acceptance length EMA.", REPLICA_TAGS)
        self.drafter_active = metrics.Gauge("dspine_drafter_active", "1 with the drafter on, else 0.", REPLICA_TAGS)
        self.spec_accept_length = metrics.Gauge(
            "dspine_spec_accept_length",
            "The engine's mean acceptance length over its recent verify steps (tokens per step; SGLang's "
            "sglang:spec_accept_length).",
            REPLICA_TAGS,
        )
        self.kv_token_usage = metrics.Gauge(
            "dspine_kv_token_usage", "Share of KV-cache tokens in use (SGLang's sglang:full_token_usage).", REPLICA_TAGS
        )
        self.mamba_usage = metrics.Gauge(
            "dspine_mamba_usage", "Share of the Mamba-state pool in use (SGLang's sglang:mamba_usage).", REPLICA_TAGS
        )
        self.cost = metrics.Gauge(
            "dspine_replica_cost_usd_per_hour", "Price of this replica per hour (gpu_hour_usd x GPUs).", REPLICA_TAGS
        )

    def record(self, load: LoadSnapshot) -> None:
        tags = self._tags
        self.kv_free.set(load.free_kv_tokens, tags=tags)
        self.kv_total.set(load.total_kv_tokens, tags=tags)
        self.kv_host.set(load.host_kv_tokens, tags=tags)
        self.state_free.set(load.free_state_slots, tags=tags)
        self.state_total.set(load.total_state_slots, tags=tags)
        self.running.set(load.num_running, tags=tags)
        self.queued.set(load.num_queued, tags=tags)
        self.accept_ema.set(load.accept_length_ema, tags=tags)
        self.drafter_active.set(1.0 if load.drafter_active else 0.0, tags=tags)
        engine = engine_gauges(load)
        self.spec_accept_length.set(engine["spec_accept_length"], tags=tags)
        self.kv_token_usage.set(engine["kv_token_usage"], tags=tags)
        self.mamba_usage.set(engine["mamba_usage"], tags=tags)
        self.cost.set(self._usd_per_hour, tags=tags)


def _share(reported: float | None, free: int, total: int) -> float:
    if reported is not None:
        return min(max(float(reported), 0.0), 1.0)
    return 1.0 - free / total if total > 0 else 0.0


def engine_gauges(load: LoadSnapshot) -> dict[str, float]:
    """Rules G1-G3: the engine's acceptance length and pool usage, as the replica exports them."""
    if load.spec_accept_length is not None and load.spec_accept_length >= 1.0:
        accept = float(load.spec_accept_length)
    else:
        accept = load.accept_length_ema if load.drafter_active else 1.0
    return {
        "spec_accept_length": accept,
        "kv_token_usage": _share(load.kv_token_usage, load.free_kv_tokens, load.total_kv_tokens),
        "mamba_usage": _share(load.mamba_usage, load.free_state_slots, load.total_state_slots),
    }


def replica_usd_per_hour(gpu_hour_usd: float, num_gpus: float) -> float:
    """gpu_hour_usd x GPUs per replica; a CPU replica (0 GPUs) is priced per replica-hour."""
    return gpu_hour_usd * (num_gpus if num_gpus > 0 else 1.0)
