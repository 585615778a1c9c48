"""Per-arm A/B report of a replay run folder (records.jsonl + the Serve config YAML for prices).

Rules (completed = no error; failures count only in num_failed):
- Group: by `arm`, else by `pool`, else "unknown".
- Arm span = max(end) - min(start) over the arm's records; run span the same over all records.
- Output throughput = sum(output tokens of completed) / arm span. Per-request output rate =
  output_tokens / e2e_s per completed request.
- TTFT, e2e per request and ITL gaps pooled over requests: p50/p95/p99 by linear interpolation between
  order statistics (p-th percentile of sorted x_0..x_{n-1} sits at rank p/100 * (n-1)).
- TTFT split, over completed requests whose answer carried Server-Timing's `replica` (server_replica_s):
  in the replica = server_replica_s, outside it = ttft_s - server_replica_s; none when no answer did.
- Acceptance length per completed request that reports it: mean, p10, p50, p90.
- Cost per completed request = sum over the arm's pools of (gpu_hour_usd * g * num_replicas * run
  span hours) / completed, with g = deployment.num_gpus, or 1 when the pool has no GPUs (its
  gpu_hour_usd then prices a replica-hour). Unknown when a pool is missing from the config or unpriced.
- Bootstrap (B resamples, seeded numpy Generator; 95% CI = 2.5th and 97.5th percentiles of the
  resampled statistic), by whole conversations (stats.py's cluster bootstrap; a conversation =
  session_id and repetition, a record without session_id its own): an arm's own intervals (the means
  of TTFT, e2e, per-request output rate and acceptance; output throughput* = (tokens of the drawn
  conversations) / span) resample its conversations with replacement, and the comparisons' ratio
  intervals (speed, output throughput, e2e mean) resample both arms' conversations independently. A
  sticky split assigns whole conversations, whose turns share a growing prompt, so drawing turns one by
  one would narrow an interval to what the arm's draw of conversations decided. Fewer than 2
  conversations: no interval.
- Baseline: `baseline` if given, else the arm whose completed requests are mostly on the
  autoregressive path, else one named autoregressive/ar/baseline/control, else the first by name.
  Every other arm with a completed request is compared with it; an arm with none (e.g. requests
  refused before routing) is listed, never compared.
- Verdict speed metric: output throughput when the arms ran one after the other (their spans overlap
  by < 50% of the shorter), else the per-request output rate (interleaved arms share the wall time).
  CI low > 1: candidate beats baseline; CI high < 1: baseline beats candidate; else no significant
  difference. Cost, TTFT p50 and e2e p50 differences follow as plain figures, then TTFT p99's
  difference with its bootstrap interval.
- Latency percentile differences (candidate - baseline at p50 and p99 of TTFT, its split and e2e, each
  with a bootstrap interval, the arms resampled independently, by whole conversations when the records
  carry session_id): rules in `ab_deltas.py`.
- Paired: when arms answered the same trace turns (`bench replay --each-pool`; records carrying
  trace_request_id, session_id and repetition), each arm against the baseline over the completed turns
  both answered: p50 and mean ratios of TTFT, TPOT and e2e with the paired cluster bootstrap (95%), by
  summary.py's `paired_ratios` rule. Arms that share no turn (a sticky split) give none, and the report
  then says its comparisons are between different conversations (the table's mean prompt per arm shows
  how different): resampling conversations widens an interval but cannot undo which ones an arm drew.
Parameters: B in [100, 100000] (default 2000); seed. Complexity: O(B * n log n) for n records (the
percentile differences; the rest is O(n log n + B * n)).
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from ray_dspine.bench.ab_deltas import PercentileDelta, percentile_deltas
from ray_dspine.bench.records import tpot
from ray_dspine.bench.stats import cluster_resamples
from ray_dspine.bench.summary import PairedRatio, conversation_key, conversation_values, paired_ratios


class RunRecord(BaseModel):
    """One request of records.jsonl, read tolerantly (unknown fields ignored, missing ones defaulted)."""

    model_config = ConfigDict(extra="ignore")

    arm: str | None = None
    pool: str | None = None
    path: str | None = None
    output_tokens: int | None = None
    prompt_tokens: int | None = None
    ttft_s: float | None = None
    server_replica_s: float | None = None
    itl_s: list[float] | None = None
    e2e_s: float | None = None
    accept_length: float | None = None
    error: str | None = None
    error_kind: str | None = None
    start_s: float | None = Field(default=None, validation_alias=AliasChoices("start_s", "start_unix_s"))
    end_s: float | None = Field(default=None, validation_alias=AliasChoices("end_s", "end_unix_s"))

    trace_request_id: str | None = None
    session_id: str | None = None
    repetition: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None and self.error_kind is None

    @property
    def tpot_s(self) -> float | None:
        return tpot(self.ok, self.ttft_s, self.e2e_s, self.output_tokens)

    @property
    def group(self) -> str:
        return self.arm or self.pool or "unknown"


class PoolPrice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    gpu_hour_usd: float | None = Field(default=None, ge=0, description="Price of one GPU-hour (CPU: replica-hour).")
    num_gpus: float = Field(default=0.0, ge=0, description="GPUs per replica.")
    num_replicas: int | None = Field(default=None, ge=0)

    @property
    def usd_per_hour(self) -> float | None:
        if not self.gpu_hour_usd or self.num_replicas is None:
            return None
        return self.gpu_hour_usd * (self.num_gpus if self.num_gpus > 0 else 1.0) * self.num_replicas


def percentile(values: list[float] | np.ndarray, p: float) -> float | None:
    """Linear interpolation at rank p/100 * (n-1) of the sorted values; None for no values."""
    array = np.asarray(values, dtype=float)
    return float(np.percentile(array, p)) if array.size else None


def conversation_means(clusters: list[list[float]], rng: np.random.Generator, num_resamples: int) -> np.ndarray:
    """Means of `num_resamples` resamples (with replacement) of the conversations `clusters`, each mean
    pooling the values of the conversations drawn (module rules)."""
    sums, counts = cluster_resamples(clusters, rng, num_resamples)
    return sums / counts


def interval(samples: np.ndarray) -> tuple[float, float]:
    """The central 95% of bootstrap samples."""
    return float(np.percentile(samples, 2.5)), float(np.percentile(samples, 97.5))


class Spread(BaseModel):
    model_config = ConfigDict(extra="forbid")

    num_values: int
    mean: float
    p50: float
    p95: float
    p99: float
    mean_ci: tuple[float, float] | None = Field(default=None, description="Bootstrap 95% CI of the mean.")


class Acceptance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    num_requests: int
    mean: float
    p10: float
    p50: float
    p90: float
    mean_ci: tuple[float, float] | None = None


class ArmStats(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    pools: list[str]
    paths: dict[str, int] = Field(description="Decode path -> completed requests.")
    num_requests: int
    num_completed: int
    num_failed: int
    span_s: float | None = Field(description="Arm span: last end - first start.")
    output_tokens: int
    prompt_tokens_mean: float | None = Field(default=None, description="Mean prompt tokens of completed requests.")
    output_tok_per_s: float | None
    output_tok_per_s_ci: tuple[float, float] | None = None
    request_output_tok_per_s: Spread | None = Field(description="Per-request output_tokens / e2e_s.")
    ttft_ms: Spread | None
    ttft_replica_ms: Spread | None = Field(default=None, description="Of TTFT, in the replica (Server-Timing).")
    ttft_outside_ms: Spread | None = Field(default=None, description="Of TTFT, outside the replica.")
    itl_ms: Spread | None
    e2e_ms: Spread | None
    acceptance: Acceptance | None
    cost_usd: float | None
    cost_per_completed_usd: float | None
    cost_note: str


def spread(values: list[float], scale: float, rng: np.random.Generator | None, num_resamples: int,
           keys: list | None = None) -> Spread | None:
    """Mean and percentiles of `values` * scale; with `rng`, the mean's interval resampling the
    conversations `keys` names (one per value; None: every value its own)."""
    if not values:
        return None
    array = np.asarray(values, dtype=float) * scale
    clusters: dict = defaultdict(list)
    for i, value in enumerate(array):
        clusters[keys[i] if keys is not None else i].append(float(value))
    ci = None
    if rng is not None and len(clusters) > 1:
        ci = interval(conversation_means(list(clusters.values()), rng, num_resamples))
    return Spread(num_values=array.size, mean=float(array.mean()), p50=percentile(array, 50),
                  p95=percentile(array, 95), p99=percentile(array, 99), mean_ci=ci)


def span_of(records: list[RunRecord]) -> tuple[float, float] | None:
    starts = [r.start_s for r in records if r.start_s is not None]
    ends = [r.end_s for r in records if r.end_s is not None]
    return (min(starts), max(ends)) if starts and ends and max(ends) > min(starts) else None


def arm_cost(pools: list[str], prices: dict[str, PoolPrice] | None, run_span_s: float | None,
             num_completed: int) -> tuple[float | None, float | None, str]:
    """(cost of the arm's pools over the run, cost per completed request, note)."""
    if prices is None:
        return None, None, "cost unknown: no --config given"
    if run_span_s is None:
        return None, None, "cost unknown: records carry no start/end times"
    hourly = []
    for pool in pools:
        price = prices.get(pool)
        if price is None or price.usd_per_hour is None:
            why = "not in the config" if price is None else "no gpu_hour_usd or num_replicas"
            return None, None, f"cost unknown: pool {pool!r} {why}"
        hourly.append(price.usd_per_hour)
    cost = sum(hourly) * run_span_s / 3600.0
    per_request = cost / num_completed if num_completed else None
    return cost, per_request, f"pools {', '.join(pools)}: {sum(hourly):.4g} USD/h over {run_span_s:.1f} s"


def labelled_latencies(done: list[RunRecord]) -> dict[str, tuple[list[float], list[tuple]]]:
    """Per-request latencies in ms of completed records (TTFT, its split by Server-Timing, e2e), each
    with the record's conversation (summary.py `conversation_key`)."""
    columns: dict[str, tuple[list[float], list[tuple]]] = {
        metric: ([], []) for metric in ("ttft_ms", "ttft_replica_ms", "ttft_outside_ms", "e2e_ms")
    }
    for i, r in enumerate(done):
        key = conversation_key(r, i)
        found = []
        if r.ttft_s is not None:
            found.append(("ttft_ms", r.ttft_s * 1e3))
            if r.server_replica_s is not None:
                found += [("ttft_replica_ms", r.server_replica_s * 1e3),
                          ("ttft_outside_ms", (r.ttft_s - r.server_replica_s) * 1e3)]
        if r.e2e_s is not None:
            found.append(("e2e_ms", r.e2e_s * 1e3))
        for metric, value in found:
            columns[metric][0].append(value)
            columns[metric][1].append(key)
    return columns


def arm_stats(name: str, records: list[RunRecord], *, prices: dict[str, PoolPrice] | None,
              run_span_s: float | None, rng: np.random.Generator | None, num_resamples: int) -> ArmStats:
    done = [r for r in records if r.ok]
    span = span_of(records)
    span_s = span[1] - span[0] if span else None
    tokens = np.asarray([r.output_tokens or 0 for r in done], dtype=float)
    throughput = float(tokens.sum()) / span_s if span_s else None
    throughput_ci = None
    token_clusters = conversation_values(done, lambda r: r.output_tokens or 0)
    if throughput is not None and rng is not None and len(token_clusters) > 1:
        throughput_ci = interval(cluster_resamples(token_clusters, rng, num_resamples)[0] / span_s)
    prompts = [r.prompt_tokens for r in done if r.prompt_tokens is not None]
    accept = [r.accept_length for r in done if r.accept_length is not None]
    acceptance = None
    if accept:
        a = np.asarray(accept, dtype=float)
        clusters = conversation_values(done, lambda r: r.accept_length)
        ci = interval(conversation_means(clusters, rng, num_resamples)) if rng is not None and len(clusters) > 1 else None
        acceptance = Acceptance(num_requests=a.size, mean=float(a.mean()), p10=percentile(a, 10),
                                p50=percentile(a, 50), p90=percentile(a, 90), mean_ci=ci)
    latency = labelled_latencies(done)
    rates = [((r.output_tokens or 0) / r.e2e_s, conversation_key(r, i)) for i, r in enumerate(done) if r.e2e_s]
    pools = sorted({r.pool for r in records if r.pool}) or [name]
    cost, per_request, note = arm_cost(pools, prices, run_span_s, len(done))
    return ArmStats(
        name=name, pools=pools, paths=dict(Counter(r.path or "unknown" for r in done)),
        num_requests=len(records), num_completed=len(done), num_failed=len(records) - len(done),
        span_s=span_s, output_tokens=int(tokens.sum()), output_tok_per_s=throughput,
        output_tok_per_s_ci=throughput_ci,
        prompt_tokens_mean=float(np.mean(prompts)) if prompts else None,
        request_output_tok_per_s=spread([v for v, _ in rates], 1.0, rng, num_resamples, [k for _, k in rates]),
        ttft_ms=spread(latency["ttft_ms"][0], 1.0, rng, num_resamples, latency["ttft_ms"][1]),
        ttft_replica_ms=spread(latency["ttft_replica_ms"][0], 1.0, None, num_resamples),
        ttft_outside_ms=spread(latency["ttft_outside_ms"][0], 1.0, None, num_resamples),
        itl_ms=spread([gap for r in done for gap in (r.itl_s or [])], 1e3, None, num_resamples),
        e2e_ms=spread(latency["e2e_ms"][0], 1.0, rng, num_resamples, latency["e2e_ms"][1]),
        acceptance=acceptance, cost_usd=cost, cost_per_completed_usd=per_request, cost_note=note,
    )


def group_records(records: list[RunRecord]) -> dict[str, list[RunRecord]]:
    groups: dict[str, list[RunRecord]] = defaultdict(list)
    for record in records:
        groups[record.group].append(record)
    return dict(sorted(groups.items()))


def choose_baseline(arms: list[ArmStats], baseline: str | None = None) -> str:
    names = [arm.name for arm in arms]
    if baseline is not None:
        if baseline not in names:
            raise ValueError(f"baseline arm {baseline!r} is not among the arms {names}")
        return baseline
    mostly_ar = [a.name for a in arms if a.num_completed and
                 a.paths.get("autoregressive", 0) > a.num_completed / 2]
    if len(mostly_ar) == 1:
        return mostly_ar[0]
    for candidate in ("autoregressive", "ar", "baseline", "control"):
        if candidate in names:
            return candidate
    return names[0]


class ArmComparison(BaseModel):
    model_config = ConfigDict(extra="forbid")

    candidate: str
    baseline: str
    spans_overlap: float | None = Field(description="Overlap of the two arm spans / the shorter span.")
    speed_metric: str = Field(description="'output throughput' or 'per-request output rate'.")
    speed_ratio: float | None = Field(description="Candidate / baseline on the speed metric.")
    speed_ratio_ci: tuple[float, float] | None
    throughput_ratio: float | None
    throughput_ratio_ci: tuple[float, float] | None
    e2e_mean_ratio: float | None
    e2e_mean_ratio_ci: tuple[float, float] | None
    cost_per_completed_ratio: float | None
    ttft_p50_delta_ms: float | None = Field(description="Candidate minus baseline.")
    e2e_p50_delta_ms: float | None
    percentile_deltas: list[PercentileDelta] = Field(
        default_factory=list, description="Candidate - baseline at p50/p99 of TTFT, its split and e2e (ab_deltas.py).")
    verdict: str


class AbReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str
    num_records: int
    num_bad_lines: int
    run_span_s: float | None
    num_resamples: int
    seed: int
    baseline: str
    arms: list[ArmStats]
    comparisons: list[ArmComparison]
    paired: list[PairedRatio] = Field(
        default_factory=list, description="Each arm against the baseline over the turns both answered (rule Paired)."
    )
    verdict: str


def _ratio_ci(num: list[list[float]], den: list[list[float]], rng: np.random.Generator, num_resamples: int,
              spans: tuple[float, float] | None = None) -> tuple[float, float] | None:
    """Cluster-bootstrap interval (module rules) on mean(num) / mean(den), or with `spans` on
    (sum(num) / spans[0]) / (sum(den) / spans[1])."""
    if len(num) < 2 or len(den) < 2:
        return None
    num_sums, num_counts = cluster_resamples(num, rng, num_resamples)
    den_sums, den_counts = cluster_resamples(den, rng, num_resamples)
    if spans is not None:
        return interval((num_sums / spans[0]) / (den_sums / spans[1]))
    return interval((num_sums / num_counts) / (den_sums / den_counts))


def _overlap(a: tuple[float, float] | None, b: tuple[float, float] | None) -> float | None:
    if a is None or b is None:
        return None
    shorter = min(a[1] - a[0], b[1] - b[0])
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0])) / shorter if shorter > 0 else None


def _mean_ratio(num: np.ndarray, den: np.ndarray) -> float | None:
    return float(num.mean() / den.mean()) if num.size and den.size and den.mean() else None


def _delta(c: Spread | None, b: Spread | None) -> float | None:
    return c.p50 - b.p50 if c is not None and b is not None else None


def speed_phrase(candidate: str, baseline: str, metric: str, ratio: float | None,
                 ci: tuple[float, float] | None) -> str:
    if ratio is None or ci is None:
        return f"{candidate} vs {baseline}: {metric} unknown (too few timed requests)"
    low, high = ci
    if low > 1:
        return f"{candidate} beats {baseline}: {ratio:.2f}x {metric} [{low:.2f}, {high:.2f}]"
    if high < 1:
        return f"{baseline} beats {candidate}: {1 / ratio:.2f}x {metric} [{1 / high:.2f}, {1 / low:.2f}]"
    return f"no significant difference in {metric} between {candidate} and {baseline}: " \
           f"{ratio:.2f}x [{low:.2f}, {high:.2f}]"


def compare_arms(c: ArmStats, b: ArmStats, c_records: list[RunRecord], b_records: list[RunRecord],
                 rng: np.random.Generator, num_resamples: int) -> ArmComparison:
    c_done = [r for r in c_records if r.ok]
    b_done = [r for r in b_records if r.ok]

    def column(done: list[RunRecord], value) -> np.ndarray:
        return np.asarray([v for v in (value(r) for r in done) if v is not None], dtype=float)

    def sides(value) -> tuple[list[list[float]], list[list[float]]]:
        return conversation_values(c_done, value), conversation_values(b_done, value)

    throughput_ratio = throughput_ci = None
    if c.output_tok_per_s and b.output_tok_per_s:
        throughput_ratio = c.output_tok_per_s / b.output_tok_per_s
        throughput_ci = _ratio_ci(*sides(lambda r: r.output_tokens or 0), rng, num_resamples, (c.span_s, b.span_s))
    e2e = (column(c_done, lambda r: r.e2e_s), column(b_done, lambda r: r.e2e_s))
    e2e_ratio = _mean_ratio(e2e[0], e2e[1])
    e2e_ci = _ratio_ci(*sides(lambda r: r.e2e_s), rng, num_resamples) if e2e_ratio is not None else None
    overlap = _overlap(span_of(c_records), span_of(b_records))
    if overlap is not None and overlap < 0.5:
        metric, ratio, ci = "output throughput", throughput_ratio, throughput_ci
    else:
        rate = lambda r: (r.output_tokens or 0) / r.e2e_s if r.e2e_s else None  # noqa: E731
        rates = (column(c_done, rate), column(b_done, rate))
        ratio = _mean_ratio(rates[0], rates[1])
        ci = _ratio_ci(*sides(rate), rng, num_resamples) if ratio is not None else None
        metric = "per-request output rate"
    cost_ratio = None
    if c.cost_per_completed_usd is not None and b.cost_per_completed_usd:
        cost_ratio = c.cost_per_completed_usd / b.cost_per_completed_usd
    clauses = [speed_phrase(c.name, b.name, metric, ratio, ci)]
    if cost_ratio is not None:
        change = round((1 - cost_ratio) * 100)
        clauses.append(f"{abs(change)}% {'lower' if change >= 0 else 'higher'} cost per completed request")
    else:
        clauses.append("cost per completed request unknown")
    verdict = ", ".join(clauses)
    # by conversation when the records name their sessions (ab_deltas.py rule `Interval`)
    by_conversation = any(r.session_id for r in c_done + b_done)
    c_columns, b_columns = labelled_latencies(c_done), labelled_latencies(b_done)
    tails = [d for metric, (values, conversations) in c_columns.items()
             for d in percentile_deltas(metric, values, b_columns[metric][0], rng, num_resamples,
                                        candidate_conversations=conversations if by_conversation else None,
                                        baseline_conversations=b_columns[metric][1] if by_conversation else None)]
    ttft_p99 = next((d for d in tails if d.metric == "ttft_ms" and d.percentile == 99), None)
    deltas = []
    if c.ttft_ms is not None and b.ttft_ms is not None:
        deltas.append(f"TTFT p50 {_delta(c.ttft_ms, b.ttft_ms):+.0f} ms")
    if ttft_p99 is not None:
        bounds = "" if ttft_p99.delta_ci is None else " [{:+.0f}, {:+.0f}]".format(*ttft_p99.delta_ci)
        deltas.append(f"TTFT p99 {ttft_p99.delta:+.0f} ms{bounds}")
    if c.e2e_ms is not None and b.e2e_ms is not None:
        deltas.append(f"e2e p50 {_delta(c.e2e_ms, b.e2e_ms):+.0f} ms")
    if deltas:
        verdict += "; " + ", ".join(deltas)
    return ArmComparison(
        candidate=c.name, baseline=b.name, spans_overlap=overlap, speed_metric=metric, speed_ratio=ratio,
        speed_ratio_ci=ci, throughput_ratio=throughput_ratio, throughput_ratio_ci=throughput_ci,
        e2e_mean_ratio=e2e_ratio, e2e_mean_ratio_ci=e2e_ci, cost_per_completed_ratio=cost_ratio,
        ttft_p50_delta_ms=_delta(c.ttft_ms, b.ttft_ms), e2e_p50_delta_ms=_delta(c.e2e_ms, b.e2e_ms),
        percentile_deltas=tails, verdict=verdict,
    )


def build_report(records: list[RunRecord], *, prices: dict[str, PoolPrice] | None, rng: np.random.Generator,
                 num_resamples: int = 2000, seed: int = 0, baseline: str | None = None, source: str = "",
                 num_bad_lines: int = 0) -> AbReport:
    """Per-arm statistics, each other arm compared with the baseline, and one verdict line."""
    if not records:
        raise ValueError(f"no records in {source or 'the input'}")
    if not 100 <= num_resamples <= 100_000:
        raise ValueError(f"num_resamples must be in [100, 100000], got {num_resamples}")
    run_span = span_of(records)
    run_span_s = run_span[1] - run_span[0] if run_span else None
    groups = group_records(records)
    arms = [arm_stats(name, recs, prices=prices, run_span_s=run_span_s, rng=rng, num_resamples=num_resamples)
            for name, recs in groups.items()]
    base = choose_baseline(arms, baseline)
    by_name = {arm.name: arm for arm in arms}
    comparisons = [compare_arms(arm, by_name[base], groups[arm.name], groups[base], rng, num_resamples)
                   for arm in arms if arm.name != base and arm.num_completed]
    keyed = {name: [r for r in recs if r.trace_request_id and r.session_id] for name, recs in groups.items()}
    paired = paired_ratios(keyed, base, rng, num_resamples, 0.95) if len(groups) > 1 else []
    verdict = " | ".join(c.verdict for c in comparisons) or f"only one arm ({base}): nothing to compare"
    return AbReport(source=source, num_records=len(records), num_bad_lines=num_bad_lines, run_span_s=run_span_s,
                    num_resamples=num_resamples, seed=seed, baseline=base, arms=arms, comparisons=comparisons,
                    paired=paired, verdict=verdict)
