"""The request-only scenarios: corpus, concurrency, burst and disconnect (kill and soak live apart).

Rules:
  corpus       every case of corpus.corpus(model, max_request_bytes), `parallel_corpus_cases` at a time. A case
               breaks the contract when it is hung, lost, unconnected, answered 5xx, answered >= 400 with a
               body that is not an OpenAI error object ("non_json"), or answered with another status than the
               case expects ("wrong_status"); failed counts the first of these per case. Then one normal
               request. Pass: no case broke the contract and the normal request answered correctly.
  concurrency  N streaming normal requests at once. capacity = completed (kind ok) / (last end - first send),
               in completions per second. Pass: all N ok.
  burst        B non-streamed normal requests at once, each with `x-dspine-deadline-ms: T*1000` and client
               timeout T. 200, 429 and 503 are expected; "other" is any other status or kind but hung. Time to
               answer: p50/p99 of the e2e of every answered request (200s and refusals alike). Pass:
               0 hung, 0 other, and every 429/503 carries Retry-After.
  disconnect   baseline = median e2e of 3 sequential normal requests. D streams (long max_tokens) are closed by
               the client after their first content chunk; from the moment the last one closed, a normal
               request is sent again and again (0.2 s apart) until one is ok with e2e <= max(factor x baseline,
               baseline + slack): that request's end is the recovery time. Pass: every client saw a first chunk
               (kind closed) and recovery came within `recover_within_s`.
"""

from __future__ import annotations

import asyncio
import statistics
from collections import Counter

from ..bench.stats import describe
from .corpus import corpus
from .context import DrillContext, normal_ok
from .exchange import Exchange, send
from .result import ScenarioResult, tally, verdict
from .settings import DEADLINE_HEADER

PROBE_GAP_S = 0.2


def _breach(expected: int, ex: Exchange) -> str | None:
    if ex.kind in ("hung", "lost", "connect"):
        return ex.kind
    if ex.status is not None and ex.status >= 500:
        return "5xx"
    if ex.status is not None and ex.status >= 400 and not ex.openai_error:
        return "non_json"
    if ex.status != expected:
        return "wrong_status"
    return None


async def run_corpus(ctx: DrillContext) -> ScenarioResult:
    cases = corpus(ctx.model, ctx.settings.max_request_bytes)
    ctx.progress.start("corpus", len(cases))
    gate = asyncio.Semaphore(ctx.settings.parallel_corpus_cases)

    async def one(case):
        async with gate:
            ex = await send(ctx.http, case.method, ctx.url(case.path), body=case.body,
                            headers=ctx.headers(case.headers), timeout_s=ctx.settings.client_timeout_s, clock=ctx.clock)
        ctx.progress.add()
        return ex

    exchanges = await asyncio.gather(*(one(case) for case in cases))
    ctx.progress.finish()
    rows, breaches = [], Counter()
    for case, ex in zip(cases, exchanges):
        breach = _breach(case.status, ex)
        if breach is not None:
            breaches[breach] += 1
        rows.append({"name": case.name, "method": case.method, "path": case.path, "expected": case.status,
                     "status": ex.status, "openai_error": ex.openai_error, "seconds": round(ex.e2e_s, 4),
                     "hung": ex.kind == "hung", "breach": breach})
    normal = await ctx.chat(stream=False)
    everything = [*exchanges, normal]
    # Every answer is "expected" to tally; failed holds the breaches instead.
    result = tally("corpus", everything, expected={e.kind for e in everything} - {"hung", "lost"})
    failed = Counter({k: v for k, v in breaches.items() if k not in ("hung", "lost")})
    if not normal_ok(normal) and normal.kind not in ("hung", "lost"):
        failed["normal_request"] += 1
    result.failed = dict(sorted(failed.items()))
    statuses = [ex.status for ex in exchanges if ex.status is not None]
    result.figures = {
        "num_cases": len(cases),
        "num_2xx": sum(200 <= s < 300 for s in statuses),
        "num_4xx": sum(400 <= s < 500 for s in statuses),
        "num_5xx": sum(s >= 500 for s in statuses),
        "num_non_json": sum(ex.status is not None and ex.status >= 400 and not ex.openai_error for ex in exchanges),
        "num_hung": sum(ex.kind == "hung" for ex in exchanges),
        "num_wrong_status": breaches["wrong_status"],
        "normal_request": {"status": normal.status, "kind": normal.kind, "content_chars": normal.content_chars},
        "cases": rows,
    }
    problems = [f"{n} case(s) {kind}" for kind, n in sorted(breaches.items())]
    if not normal_ok(normal):
        problems.append(f"normal request after the corpus: {normal.kind} (status {normal.status})")
    return verdict(result, problems)


async def run_concurrency(ctx: DrillContext) -> ScenarioResult:
    n = ctx.settings.concurrency
    ctx.progress.start("concurrency", n)

    async def one():
        ex = await ctx.chat(stream=True)
        ctx.progress.add()
        return ex

    t0 = ctx.clock()
    exchanges = await asyncio.gather(*(one() for _ in range(n)))
    ctx.progress.finish()
    ends = [ex.end_clock_s for ex in exchanges if ex.end_clock_s is not None]
    wall_s = max(ends) - t0 if ends else 0.0
    ok = [ex for ex in exchanges if normal_ok(ex)]
    ctx.capacity_rps = len(ok) / wall_s if wall_s > 0 else 0.0
    result = tally("concurrency", exchanges)
    result.figures = {"concurrency": n, "wall_s": round(wall_s, 4), "capacity_completions_per_s": ctx.capacity_rps}
    problems = [] if len(ok) == n else [f"{n - len(ok)} of {n} streams not answered correctly"]
    return verdict(result, problems)


async def run_burst(ctx: DrillContext) -> ScenarioResult:
    b, timeout_s = ctx.settings.burst, ctx.settings.client_timeout_s
    ctx.progress.start("burst", b)
    deadline = {DEADLINE_HEADER: str(int(round(timeout_s * 1000)))}

    async def one():
        ex = await ctx.chat(stream=False, headers=deadline)
        ctx.progress.add()
        return ex

    exchanges = await asyncio.gather(*(one() for _ in range(b)))
    ctx.progress.finish()
    expected = ("ok", "http_429", "http_503")
    result = tally("burst", exchanges, expected=expected)
    refused = [ex for ex in exchanges if ex.status in (429, 503)]
    with_retry = sum(ex.retry_after is not None for ex in refused)
    other = Counter(ex.kind for ex in exchanges if ex.kind not in expected and ex.kind != "hung")
    answer_times = describe([ex.e2e_s for ex in exchanges if ex.answered])  # 200s and refusals alike
    result.figures = {
        "num_200": sum(ex.kind == "ok" and ex.status == 200 for ex in exchanges),
        "num_429": sum(ex.status == 429 for ex in exchanges),
        "num_503": sum(ex.status == 503 for ex in exchanges),
        "other": dict(sorted(other.items())),
        "num_refused_with_retry_after": with_retry,
        "num_client_timeouts": result.hung,
        "answer_p50_s": answer_times.p50,
        "answer_p99_s": answer_times.p99,
    }
    problems = []
    if result.hung:
        problems.append(f"{result.hung} client timeout(s)")
    if other:
        problems.append("other answers: " + ", ".join(f"{k}={v}" for k, v in sorted(other.items())))
    if with_retry < len(refused):
        problems.append(f"{len(refused) - with_retry} of {len(refused)} 429/503 without Retry-After")
    return verdict(result, problems)


async def run_disconnect(ctx: DrillContext) -> ScenarioResult:
    s = ctx.settings
    ctx.progress.start("disconnect", s.disconnects)
    baseline_runs = [await ctx.chat(stream=False) for _ in range(3)]
    good = [ex.e2e_s for ex in baseline_runs if normal_ok(ex)]
    if not good:
        result = tally("disconnect", baseline_runs)
        return verdict(result, ["no baseline: the normal request did not answer correctly"])
    baseline_s = statistics.median(good)
    limit_s = max(s.baseline_factor * baseline_s, baseline_s + s.baseline_slack_s)

    async def hang_up():
        ex = await ctx.chat(stream=True, max_tokens=s.long_stream_max_tokens, close_after_first_chunk=True)
        ctx.progress.add()
        return ex

    clients = await asyncio.gather(*(hang_up() for _ in range(s.disconnects)))
    closed_at = ctx.clock()
    probes: list[Exchange] = []
    recovered_s = None
    while ctx.clock() - closed_at < s.recover_within_s:
        probe = await ctx.chat(stream=False)
        probes.append(probe)
        if normal_ok(probe) and probe.e2e_s <= limit_s:
            recovered_s = probe.end_clock_s - closed_at
            break
        await ctx.sleep(PROBE_GAP_S)
    ctx.progress.finish()
    result = tally("disconnect", [*baseline_runs, *clients, *probes], expected=("ok", "closed"))
    not_closed = sum(ex.kind != "closed" for ex in clients)
    result.figures = {
        "baseline_e2e_s": baseline_s, "baseline_limit_s": limit_s, "num_closed": s.disconnects - not_closed,
        "num_probes": len(probes), "time_to_recover_capacity_s": recovered_s,
    }
    problems = []
    if not_closed:
        problems.append(f"{not_closed} of {s.disconnects} clients saw no first chunk")
    if recovered_s is None:
        problems.append(f"not back to baseline latency within {s.recover_within_s:g} s")
    return verdict(result, problems)
