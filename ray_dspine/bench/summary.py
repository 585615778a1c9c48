"""Summary figures of a replay, overall, per arm and per workload class.

Rules (ok = finished without error; failed requests count only in the error figures):
- Output throughput = sum of output tokens of ok requests / wall time (the vendor card's "total output
  tokens / replay wall time"); request throughput = num ok / wall time. Arms and classes replayed
  together share the same wall time, so their throughputs add up to the total.
- TTFT, E2E per request; ITL = every gap between consecutive content chunks, pooled over requests;
  TPOT = (e2e - ttft) / (output_tokens - 1) for requests with >= 2 output tokens. Each: mean, p50,
  p95, p99 by the percentile rule of stats.py.
- TTFT split by the answer's Server-Timing header, over ok requests that carry it: in the replica =
  server_replica_s (the engine's queueing and prefill), outside it = ttft - server_replica_s (HTTP, the
  proxy, the ingress, the router, Ray's transport); empty distributions when no answer carried it.
- Acceptance length per request = usage.accept_length (requests without it are left out): p10, p50,
  p90, mean; `token_weighted` = sum(output tokens) / sum(verify steps) over requests that report both;
  `histogram` = element-wise sum of accept_histogram (index k: verify steps that produced k+1 tokens).
- Bootstrap 95% CIs on the means of TTFT, TPOT, E2E, acceptance length and per-request output rate
  (output_tokens / e2e), overall, per arm and per class (`mean_ci`); with two or more arms, CIs on
  `mean(arm) / mean(baseline)` for the same metrics (`arm_ratios`). Both by the cluster bootstrap of
  stats.py with a cluster per conversation of a repetition (session_id, repetition; a record without
  session_id is its own): a sticky split assigns whole conversations to arms, and a conversation's
  turns share its growing prompt, so the interval must carry which conversations each arm drew. The
  baseline is `baseline_arm` if given, else an arm named "autoregressive", "baseline" or "control" if
  present, else the first arm in sorted order. Only arms with an ok request take part; requests that
  came back without an arm header (e.g. refused before routing) are grouped under "(none)" and never
  compared.
- Paired ratios (`paired_ratios`), when the same trace request was answered on two arms (a replay with
  `each_pool` sends every conversation to every pool): for each arm against the baseline, over the
  (trace request, repetition) keys answered ok on both, `p50(arm) / p50(baseline)` and
  `mean(arm) / mean(baseline)` of TTFT, TPOT and E2E, each with the paired cluster bootstrap of
  stats.py (a cluster = one conversation of one repetition). Unlike `arm_ratios`, both sides hold the
  same turns, so which conversations an arm drew cannot move the ratio.
- Errors by kind: "http_<status>" for HTTP errors, else the record's error kind.
- Tool-call agreement (tool_agreement.py), overall and per arm, when requests carried tools.
Parameters: num_resamples B >= 1 (default 1,000); seed for the bootstrap generator.
Complexity: O(n log n + B * n) for n records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .records import RequestRecord
from .stats import (
    ConfidenceInterval,
    Distribution,
    cluster_mean_ci,
    cluster_ratio_ci,
    describe,
    paired_cluster_ratio_ci,
    percentile,
)
from .tool_agreement import ToolCallAgreement, tool_agreement

BASELINE_ARM_NAMES = ("autoregressive", "baseline", "control")
NO_ARM = "(none)"
Metric = Callable[[RequestRecord], float | None]
METRICS: dict[str, Metric] = {
    "ttft_s": lambda r: r.ttft_s,
    "tpot_s": lambda r: r.tpot_s,
    "e2e_s": lambda r: r.e2e_s,
    "accept_length": lambda r: r.accept_length,
    "output_tok_per_s_per_request": lambda r: r.output_tokens / r.e2e_s if r.e2e_s else None,
}
PAIRED_METRICS = ("ttft_s", "tpot_s", "e2e_s")


class AcceptanceSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    num_requests: int = Field(ge=0, description="Ok requests that reported an acceptance length.")
    mean: float | None = None
    p10: float | None = None
    p50: float | None = None
    p90: float | None = None
    token_weighted: float | None = Field(default=None, description="sum(output tokens) / sum(verify steps).")
    histogram: list[int] = Field(default_factory=list, description="Index k: verify steps that gave k+1 tokens.")


class GroupSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    num_requests: int = Field(ge=0)
    num_ok: int = Field(ge=0)
    num_errors: int = Field(ge=0)
    errors_by_kind: dict[str, int] = Field(default_factory=dict)
    prompt_tokens: int = Field(ge=0, description="Sum over ok requests.")
    output_tokens: int = Field(ge=0, description="Sum over ok requests.")
    output_throughput_tok_s: float | None = Field(description="output_tokens / wall_s.")
    request_throughput_req_s: float | None = Field(description="num_ok / wall_s.")
    ttft_s: Distribution
    ttft_in_replica_s: Distribution = Field(
        default_factory=lambda: describe([]), description="Server-Timing `replica` of the ok requests that carry it."
    )
    ttft_outside_replica_s: Distribution = Field(
        default_factory=lambda: describe([]), description="TTFT less the replica's share, for the same requests."
    )
    itl_s: Distribution
    tpot_s: Distribution
    e2e_s: Distribution
    acceptance: AcceptanceSummary
    mean_ci: dict[str, ConfidenceInterval] = Field(default_factory=dict, description="Bootstrap CIs on means.")


class ArmRatio(BaseModel):
    model_config = ConfigDict(extra="forbid")

    baseline_arm: str
    arm: str
    metric: str = Field(description="Metric whose means are compared.")
    ratio: ConfidenceInterval = Field(
        description="mean(arm) / mean(baseline) with its cluster-bootstrap CI (a cluster per conversation)."
    )


class PairedRatio(BaseModel):
    model_config = ConfigDict(extra="forbid")

    baseline_arm: str
    arm: str
    metric: str
    stat: str = Field(description="p50 or mean: the statistic of each side whose ratio is taken.")
    num_pairs: int = Field(ge=1, description="Turns answered ok on both arms.")
    num_clusters: int = Field(ge=1, description="Conversations (per repetition) the pairs come from.")
    ratio: ConfidenceInterval = Field(description="stat(arm) / stat(baseline) over the same turns, paired CI.")


class ReplaySummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    wall_s: float = Field(ge=0.0, description="Measured replay wall time (warm-up excluded).")
    repetition_wall_s: list[float] = Field(default_factory=list)
    repetition_output_throughput_tok_s: list[float] = Field(default_factory=list)
    overall: GroupSummary
    by_arm: dict[str, GroupSummary] = Field(default_factory=dict)
    by_workload_class: dict[str, GroupSummary] = Field(default_factory=dict)
    acceptance_by_arm_and_class: dict[str, dict[str, AcceptanceSummary]] = Field(default_factory=dict)
    arm_ratios: list[ArmRatio] = Field(default_factory=list)
    paired_ratios: list[PairedRatio] = Field(default_factory=list)
    baseline_arm: str | None = None
    tool_calls: ToolCallAgreement | None = Field(default=None, description="Tool-call agreement, with tools sent.")
    tool_calls_by_arm: dict[str, ToolCallAgreement] = Field(default_factory=dict)
    interrupted: bool = False
    num_resamples: int = Field(ge=1)
    confidence: float = Field(gt=0.0, lt=1.0)


def paired_ratios(
    by_arm_records: dict[str, list[RequestRecord]],
    baseline: str,
    rng: np.random.Generator,
    num_resamples: int,
    confidence: float,
) -> list[PairedRatio]:
    """The `paired_ratios` rule for every arm but the baseline. Records need `ok`, `trace_request_id`,
    `repetition`, `session_id` and the metrics' attributes (bench ab-report's tolerant records have them)."""
    def answered(arm: str) -> dict[tuple[str, int], RequestRecord]:
        return {(r.trace_request_id, r.repetition): r for r in by_arm_records[arm] if r.ok}

    base = answered(baseline)
    found: list[PairedRatio] = []
    for arm in sorted(by_arm_records):
        if arm in (baseline, NO_ARM):
            continue
        other = answered(arm)
        common = sorted(set(base) & set(other))
        for name in PAIRED_METRICS:
            metric = METRICS[name]
            rows = [
                (f"{other[key].session_id}-r{key[1]}", metric(base[key]), metric(other[key]))
                for key in common
                if metric(base[key]) is not None and metric(other[key]) is not None
            ]
            for stat in ("p50", "mean"):
                if not rows:
                    continue
                try:
                    ci = paired_cluster_ratio_ci(
                        rows, rng, stat=stat, num_resamples=num_resamples, confidence=confidence
                    )
                except ValueError:  # the baseline's statistic is 0: no ratio
                    continue
                found.append(PairedRatio(
                    baseline_arm=baseline, arm=arm, metric=name, stat=stat, num_pairs=len(rows),
                    num_clusters=len({c for c, _b, _a in rows}), ratio=ci,
                ))  # fmt: skip
    return found


def describe_paired(paired: PairedRatio) -> str:
    """One line for a paired ratio: statistic, metric, arms, estimate, interval and what it rests on."""
    r = paired.ratio
    return (f"paired {paired.stat} {paired.metric} {paired.arm}/{paired.baseline_arm} = {r.estimate:.3f} "
            f"[{r.low:.3f}, {r.high:.3f}] ({r.confidence:.0%} CI, {paired.num_pairs} turns of "
            f"{paired.num_clusters} conversations)")


def _values(records: Sequence[RequestRecord], metric: Metric) -> list[float]:
    return [v for v in (metric(r) for r in records if r.ok) if v is not None]


def conversation_key(record, index: int) -> tuple:
    """The conversation of a repetition a record belongs to: (session_id, repetition); a record without
    session_id (the `index`-th of its list) is a conversation of its own."""
    return (record.session_id, record.repetition) if record.session_id else (None, index)


def conversation_values(records: Sequence, value: Callable) -> list[list[float]]:
    """`value` of each ok record (None left out), one list per conversation (`conversation_key`). Records
    need `ok`, `session_id` and `repetition` (bench ab-report's tolerant records have them)."""
    groups: dict[tuple, list[float]] = {}
    for i, r in enumerate(records):
        v = value(r) if r.ok else None
        if v is not None:
            groups.setdefault(conversation_key(r, i), []).append(v)
    return list(groups.values())


def error_kind_key(record: RequestRecord) -> str:
    if record.error_kind == "http_error" and record.http_status is not None:
        return f"http_{record.http_status}"
    return str(record.error_kind)


def summarize_acceptance(records: Sequence[RequestRecord]) -> AcceptanceSummary:
    ok = [r for r in records if r.ok]
    lengths = [r.accept_length for r in ok if r.accept_length is not None]
    steps = [(r.output_tokens, r.verify_steps) for r in ok if r.verify_steps]
    size = max((len(r.accept_histogram) for r in ok), default=0)
    histogram = [0] * size
    for r in ok:
        for k, n in enumerate(r.accept_histogram):
            histogram[k] += n
    if not lengths:
        return AcceptanceSummary(num_requests=0, histogram=histogram)
    return AcceptanceSummary(
        num_requests=len(lengths),
        mean=float(np.mean(lengths)),
        p10=percentile(lengths, 10),
        p50=percentile(lengths, 50),
        p90=percentile(lengths, 90),
        token_weighted=sum(t for t, _ in steps) / sum(s for _, s in steps) if steps else None,
        histogram=histogram,
    )


def summarize_group(
    records: Sequence[RequestRecord], wall_s: float, rng: np.random.Generator, num_resamples: int, confidence: float
) -> GroupSummary:
    ok = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    output_tokens = sum(r.output_tokens for r in ok)
    split = [r for r in ok if r.ttft_outside_replica_s is not None]  # answers with a Server-Timing `replica`
    mean_ci = {}
    for name, metric in METRICS.items():
        clusters = conversation_values(ok, metric)
        if clusters:
            mean_ci[name] = cluster_mean_ci(clusters, rng, num_resamples=num_resamples, confidence=confidence)
    return GroupSummary(
        num_requests=len(records),
        num_ok=len(ok),
        num_errors=len(failed),
        errors_by_kind=dict(sorted(Counter(error_kind_key(r) for r in failed).items())),
        prompt_tokens=sum(r.prompt_tokens for r in ok),
        output_tokens=output_tokens,
        output_throughput_tok_s=output_tokens / wall_s if wall_s > 0 else None,
        request_throughput_req_s=len(ok) / wall_s if wall_s > 0 else None,
        ttft_s=describe(_values(ok, METRICS["ttft_s"])),
        ttft_in_replica_s=describe([r.server_replica_s for r in split]),
        ttft_outside_replica_s=describe([r.ttft_outside_replica_s for r in split]),
        itl_s=describe([gap for r in ok for gap in r.itl_s]),
        tpot_s=describe(_values(ok, METRICS["tpot_s"])),
        e2e_s=describe(_values(ok, METRICS["e2e_s"])),
        acceptance=summarize_acceptance(ok),
        mean_ci=mean_ci,
    )


def choose_baseline(arms: Sequence[str], baseline_arm: str | None = None) -> str | None:
    if baseline_arm is not None:
        return baseline_arm if baseline_arm in arms else None
    for name in BASELINE_ARM_NAMES:
        if name in arms:
            return name
    return sorted(arms)[0] if arms else None


def arm_of(record: RequestRecord) -> str:
    return record.arm or NO_ARM


def summarize(
    records: Sequence[RequestRecord],
    *,
    wall_s: float,
    repetition_wall_s: Sequence[float] = (),
    baseline_arm: str | None = None,
    interrupted: bool = False,
    num_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> ReplaySummary:
    """Every figure of the module docstring, as one JSON-ready model."""
    rng = np.random.default_rng(seed)
    by_arm_records: dict[str, list[RequestRecord]] = {}
    by_class_records: dict[str, list[RequestRecord]] = {}
    for r in records:
        by_arm_records.setdefault(arm_of(r), []).append(r)
        by_class_records.setdefault(r.workload_class, []).append(r)

    def group(rs: Sequence[RequestRecord]) -> GroupSummary:
        return summarize_group(rs, wall_s, rng, num_resamples, confidence)

    arms = sorted(by_arm_records)
    compared = [a for a in arms if a != NO_ARM and any(r.ok for r in by_arm_records[a])]
    baseline = choose_baseline(compared, baseline_arm) if len(compared) >= 2 else None
    ratios: list[ArmRatio] = []
    if baseline is not None:
        for arm in compared:
            if arm == baseline:
                continue
            for name, metric in METRICS.items():
                a = conversation_values(by_arm_records[baseline], metric)
                b = conversation_values(by_arm_records[arm], metric)
                if a and b and sum(map(sum, a)) != 0.0:
                    ci = cluster_ratio_ci(a, b, rng, num_resamples=num_resamples, confidence=confidence)
                    ratios.append(ArmRatio(baseline_arm=baseline, arm=arm, metric=name, ratio=ci))
    per_repetition = []
    for rep, rep_wall in enumerate(repetition_wall_s):
        tokens = sum(r.output_tokens for r in records if r.ok and r.repetition == rep)
        per_repetition.append(tokens / rep_wall if rep_wall > 0 else 0.0)
    return ReplaySummary(
        wall_s=wall_s,
        repetition_wall_s=list(repetition_wall_s),
        repetition_output_throughput_tok_s=per_repetition,
        overall=group(records),
        by_arm={arm: group(by_arm_records[arm]) for arm in arms},
        by_workload_class={c: group(rs) for c, rs in sorted(by_class_records.items())},
        acceptance_by_arm_and_class={
            arm: {
                c: summarize_acceptance([r for r in by_arm_records[arm] if r.workload_class == c])
                for c in sorted({r.workload_class for r in by_arm_records[arm]})
            }
            for arm in arms
        },
        arm_ratios=ratios,
        paired_ratios=paired_ratios(by_arm_records, baseline, rng, num_resamples, confidence) if baseline else [],
        baseline_arm=baseline,
        tool_calls=tool_agreement(records),
        tool_calls_by_arm={arm: found for arm in arms if (found := tool_agreement(by_arm_records[arm])) is not None},
        interrupted=interrupted,
        num_resamples=num_resamples,
        confidence=confidence,
    )
