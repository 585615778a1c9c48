"""`ray-dspine bench equivalence`: ask two sides the same prompts and compare their answers.

A side is an endpoint plus an optional forced pool (request header `x-dspine-pool`), e.g. the
speculative pool against the autoregressive pool of the same model. Each side's server is asked for
its model list first, so a server that is down or refuses the API key stops the run before any prompt
is sent. Requests are non-streaming, run with at most `concurrency` in flight and a per-request
timeout; a failed request becomes a reported error on its prompt, never an exception. The comparison
rules (greedy byte equality, chi-square homogeneity when sampling) are stated and implemented in
`equivalence.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections import Counter
from pathlib import Path

import httpx
from pydantic import ValidationError

from ray_dspine.bench.equivalence import (
    EquivalencePrompt,
    GreedyReport,
    RequestSettings,
    SampledReport,
    SampledResult,
    Side,
    SideAnswer,
    category_of,
    chi_square_homogeneity,
    combine_tests,
    compare_answers,
    decide,
    load_prompts,
)
from ray_dspine.bench.endpoint import API_KEY_ENV, api_key_from_env, auth_headers, error_message
from ray_dspine.cli_errors import CliError, cli_errors, flag_error

DEFAULT_ENDPOINT = "http://127.0.0.1:8000"


def _client_scope(client: httpx.AsyncClient | None):
    """A fresh client closed on exit, or the caller's client left open."""
    return httpx.AsyncClient() if client is None else contextlib.nullcontext(client)


def _answer_text(prompt: EquivalencePrompt, body: dict) -> tuple[str, str | None]:
    choice = body["choices"][0]
    if prompt.messages is None:
        return choice.get("text") or "", choice.get("finish_reason")
    message = choice.get("message") or {}
    tool_calls = message.get("tool_calls")
    text = (message.get("reasoning_content") or "") + (message.get("content") or "")
    if tool_calls:
        text += json.dumps(tool_calls, sort_keys=True)
    return text, choice.get("finish_reason")


async def ask(
    client: httpx.AsyncClient, side: Side, prompt: EquivalencePrompt, settings: RequestSettings, seed: int | None
) -> SideAnswer:
    """One non-streaming request; any failure comes back as `SideAnswer(error=...)`."""
    base = side.base_url.rstrip("/").removesuffix("/v1")
    payload: dict[str, object] = {
        "max_tokens": settings.max_tokens, "temperature": settings.temperature, "stream": False,
    }
    if seed is not None:
        payload["seed"] = seed
    if settings.model:
        payload["model"] = settings.model
    if prompt.messages is not None:
        url = f"{base}/v1/chat/completions"
        payload["messages"] = prompt.messages
    else:
        url = f"{base}/v1/completions"
        payload["prompt"] = prompt.prompt
    headers = {"x-dspine-pool": side.pool} if side.pool else {}
    headers.update(auth_headers(api_key_from_env()))
    try:
        response = await client.post(url, json=payload, headers=headers, timeout=settings.timeout_s)
        if response.status_code != 200:
            return SideAnswer(error=f"HTTP {response.status_code}: {response.text[:200]}")
        body = response.json()
        text, finish_reason = _answer_text(prompt, body)
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        return SideAnswer(error=f"{type(exc).__name__}: {exc}"[:300])
    usage = body.get("usage") or {}
    return SideAnswer(
        text=text,
        finish_reason=finish_reason,
        pool=response.headers.get("x-dspine-pool"),
        path=response.headers.get("x-dspine-path") or usage.get("path"),
        completion_tokens=usage.get("completion_tokens"),
    )


async def _gather(calls, concurrency: int):
    gate = asyncio.Semaphore(concurrency)

    async def bounded(call):
        async with gate:
            return await call

    return await asyncio.gather(*(bounded(call) for call in calls))


async def run_greedy(
    prompts: list[EquivalencePrompt], side_a: Side, side_b: Side, settings: RequestSettings,
    *, client: httpx.AsyncClient | None = None,
) -> GreedyReport:
    """Temperature-0 answers from both sides, compared byte for byte."""
    settings = settings.model_copy(update={"temperature": 0.0})
    async with _client_scope(client) as http:
        calls = [ask(http, side, prompt, settings, 0) for prompt in prompts for side in (side_a, side_b)]
        answers = await _gather(calls, settings.concurrency)
    results = [compare_answers(p, answers[2 * i], answers[2 * i + 1]) for i, p in enumerate(prompts)]
    status = Counter(result.status for result in results)
    compared = status["identical"] + status["diverged"]
    return GreedyReport(
        side_a=side_a, side_b=side_b, settings=settings, num_prompts=len(prompts), num_compared=compared,
        num_identical=status["identical"], num_diverged=status["diverged"], num_errors=status["error"],
        mismatch_rate=(status["diverged"] / compared) if compared else None,
        paths_a=dict(Counter(r.a.path or "unknown" for r in results if r.a.error is None)),
        paths_b=dict(Counter(r.b.path or "unknown" for r in results if r.b.error is None)),
        results=results,
    )


async def run_sampled(
    prompts: list[EquivalencePrompt], side_a: Side, side_b: Side, settings: RequestSettings,
    *, num_samples: int, seed: int = 0, prefix_words: int = 2, alpha: float = 0.01,
    client: httpx.AsyncClient | None = None,
) -> SampledReport:
    """K samples per prompt per side (side A seeds seed+2i, side B seed+2i+1), then chi-square per prompt."""
    if num_samples < 1 or not 1 <= prefix_words <= 64 or not 0 < alpha < 1:
        raise ValueError(f"need samples >= 1, prefix_words in [1, 64], alpha in (0, 1); got "
                         f"{num_samples}, {prefix_words}, {alpha}")
    async with _client_scope(client) as http:
        calls = [
            ask(http, side, prompt, settings, seed + 2 * i + offset)
            for prompt in prompts for i in range(num_samples) for offset, side in ((0, side_a), (1, side_b))
        ]
        answers = await _gather(calls, settings.concurrency)
    results = []
    per_prompt = 2 * num_samples
    for index, prompt in enumerate(prompts):
        chunk = answers[index * per_prompt:(index + 1) * per_prompt]
        side_answers = (chunk[0::2], chunk[1::2])
        counts = [Counter(category_of(ans.text, prefix_words) for ans in side if ans.text is not None)
                  for side in side_answers]
        errors = [ans.error for ans in chunk if ans.error is not None]
        test = chi_square_homogeneity(dict(counts[0]), dict(counts[1]))
        results.append(SampledResult(
            prompt_id=prompt.id, kind=prompt.kind, counts_a=dict(counts[0]), counts_b=dict(counts[1]),
            num_errors_a=sum(a.error is not None for a in side_answers[0]),
            num_errors_b=sum(b.error is not None for b in side_answers[1]),
            first_error=errors[0] if errors else None, test=test, verdict=decide(test.p_value, alpha),
        ))
    statistic, dof, p_value = combine_tests([result.test for result in results])
    return SampledReport(
        side_a=side_a, side_b=side_b, settings=settings, num_samples=num_samples, prefix_words=prefix_words,
        alpha=alpha,
        test=(f"chi-square homogeneity on the first {prefix_words} words of each answer, rare categories pooled "
              f"(expected < 5), summed over prompts; p >= {alpha} -> no evidence of difference"),
        statistic=statistic, dof=dof, p_value=p_value, verdict=decide(p_value, alpha), results=results,
    )


def render_greedy(report: GreedyReport) -> str:
    a, b = report.side_a.label, report.side_b.label
    lines = [f"greedy equivalence, {a} vs {b} (temperature 0, max_tokens {report.settings.max_tokens})"]
    for result in report.results:
        if result.status == "identical":
            lines.append(f"  {result.prompt_id:<28} identical ({len(result.a.text or '')} chars)")
        elif result.status == "diverged":
            lines.append(f"  {result.prompt_id:<28} DIVERGED at char {result.divergence_index}")
            lines.append(f"      {a}: {result.context_a!r}")
            lines.append(f"      {b}: {result.context_b!r}")
        else:
            lines.append(f"  {result.prompt_id:<28} error: {result.a.error or result.b.error}")
    rate = "n/a" if report.mismatch_rate is None else f"{report.mismatch_rate:.1%}"
    lines.append(
        f"mismatch rate {rate}: {report.num_diverged} diverged / {report.num_compared} compared"
        f" ({report.num_identical} identical, {report.num_errors} failed requests)"
    )
    lines.append(f"decode paths: {a} {report.paths_a}; {b} {report.paths_b}")
    return "\n".join(lines)


def render_sampled(report: SampledReport) -> str:
    lines = [f"sampled equivalence, {report.side_a.label} vs {report.side_b.label} "
             f"(temperature {report.settings.temperature}, {report.num_samples} samples per prompt per side)",
             f"test: {report.test}"]
    for result in report.results:
        p = "n/a" if result.test.p_value is None else f"{result.test.p_value:.4f}"
        errors = f", errors {result.num_errors_a}/{result.num_errors_b}" if result.first_error else ""
        lines.append(f"  {result.prompt_id:<28} X2 {result.test.statistic:8.3f} dof {result.test.dof:<3} "
                     f"p {p:<8} {result.verdict}{errors}")
    p_all = "n/a" if report.p_value is None else f"{report.p_value:.4f}"
    lines.append(f"combined: X2 {report.statistic:.3f}, dof {report.dof}, p {p_all} -> {report.verdict}")
    return "\n".join(lines)


class EndpointDown(RuntimeError):
    """A side's endpoint cannot answer: nothing would be compared."""


def _served_model(endpoints: list[str]) -> str | None:
    """Ask each side's server for its model list before any prompt is sent: the first id of the first
    endpoint's list, None where it lists none (a server without /v1/models is still asked the prompts).
    Raises EndpointDown when a server does not answer a connection or refuses the API key."""
    headers = auth_headers(api_key_from_env())
    models: list[str | None] = []
    for endpoint in endpoints:
        url = endpoint.rstrip("/").removesuffix("/v1") + "/v1/models"
        try:
            response = httpx.get(url, headers=headers, timeout=10)
        except httpx.TransportError as exc:
            raise EndpointDown(
                f"cannot reach {endpoint} ({type(exc).__name__}: {exc}); start the stack (scripts/serve-local) "
                "or pass the server's root with --endpoint / --endpoint-b"
            ) from exc
        if response.status_code in (401, 403):
            raise EndpointDown(
                f"{endpoint} refused the API key ({error_message(response.status_code, response.content)}); "
                f"set {API_KEY_ENV} to the stack's key"
            )
        try:
            data = (response.json().get("data") or []) if response.status_code == 200 else []
        except (ValueError, AttributeError):
            data = []
        models.append(next((str(m["id"]) for m in data if isinstance(m, dict) and m.get("id")), None))
    return models[0]


SETTING_FLAGS = {"max_tokens": "--max-tokens", "temperature": "--temperature", "timeout_s": "--timeout-s",
                 "concurrency": "--concurrency"}


def _check_counts(args: argparse.Namespace) -> None:
    """Refuse counts and levels no comparison can run with, before any request is sent."""
    if args.num_prompts is not None and args.num_prompts < 1:
        raise CliError(f"argument --num-prompts: must be >= 1 (got {args.num_prompts})")
    for flag, value in (("--samples", args.samples), ("--prefix-words", args.prefix_words)):
        if value < 1:
            raise CliError(f"argument {flag}: must be >= 1 (got {value})")
    if not 0.0 < args.alpha < 1.0:
        raise CliError(f"argument --alpha: must be between 0 and 1 (got {args.alpha})")


def _prompts(args: argparse.Namespace) -> list[EquivalencePrompt]:
    try:
        return load_prompts(args.prompts, args.num_prompts)
    except OSError as exc:
        raise CliError(f"argument --prompts: cannot read {args.prompts} ({exc.strerror or exc})") from exc
    except (ValueError, KeyError, TypeError) as exc:  # not JSON, or not a list of prompts
        raise CliError(
            f"argument --prompts: {args.prompts} is not a prompt file (a JSON list of "
            f'{{"id", "messages" or "prompt"}}, or {{"prompts": [...]}}): {exc}'
        ) from exc


@cli_errors
def _run_command(args: argparse.Namespace) -> int:
    _check_counts(args)
    prompts = _prompts(args)
    side_a = Side(label=args.pool_a or "A", base_url=args.endpoint, pool=args.pool_a)
    side_b = Side(label=args.pool_b or ("B" if args.endpoint_b else "B (same endpoint)"),
                  base_url=args.endpoint_b or args.endpoint, pool=args.pool_b)
    if side_a.label == side_b.label:
        side_a, side_b = side_a.model_copy(update={"label": "A"}), side_b.model_copy(update={"label": "B"})
    try:
        settings = RequestSettings(max_tokens=args.max_tokens, temperature=args.temperature,
                                   timeout_s=args.timeout_s, concurrency=args.concurrency)
    except ValidationError as exc:
        raise flag_error(exc, SETTING_FLAGS) from exc
    try:
        served = _served_model(list(dict.fromkeys([side_a.base_url, side_b.base_url])))
    except EndpointDown as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    model = args.model or served  # None: send no `model`, as some servers allow
    settings = settings.model_copy(update={"model": model})
    if args.temperature == 0:
        report = asyncio.run(run_greedy(prompts, side_a, side_b, settings))
        text, ok = render_greedy(report), report.num_diverged == 0
    else:
        report = asyncio.run(run_sampled(prompts, side_a, side_b, settings, num_samples=args.samples,
                                         seed=args.seed, prefix_words=args.prefix_words, alpha=args.alpha))
        text, ok = render_sampled(report), report.verdict != "distributions differ"
    payload = report.model_dump_json(indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(payload + "\n")
    print(payload if args.json else text)
    compared = report.num_compared if isinstance(report, GreedyReport) else report.dof
    if compared == 0:
        print("nothing could be compared (see errors above)", file=sys.stderr)
        return 3
    return 0 if ok else 1


def register_equivalence(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `equivalence` to a `bench` subcommand group; the parser's `func(args) -> exit code` runs it."""
    parser = subparsers.add_parser(
        "equivalence",
        help="compare answers of two sides (pools or endpoints): greedy byte equality or sampled chi-square",
        description="Greedy (temperature 0): every prompt's answer must match byte for byte; reports the first "
        "divergence and the mismatch rate. Sampled (temperature > 0): K samples per prompt per side with "
        "distinct seeds; chi-square homogeneity test on the first words; p >= alpha -> no evidence of "
        "difference. Exit code 0 equivalent, 1 difference found, 2 bad input, 3 nothing compared (also when a "
        "side's server does not answer or refuses the API key: checked before any prompt is sent).",
    )
    parser.add_argument("--endpoint", default=os.environ.get("DSPINE_ENDPOINT", DEFAULT_ENDPOINT),
                        help="side A server root (default $DSPINE_ENDPOINT or %(default)s)")
    parser.add_argument("--endpoint-b", default=None, help="side B server root (default: same as --endpoint)")
    parser.add_argument("--pool-a", default=None, help="force side A's pool (x-dspine-pool), e.g. spec")
    parser.add_argument("--pool-b", default=None, help="force side B's pool (x-dspine-pool), e.g. ar")
    parser.add_argument("--prompts", default="builtin", help="JSON prompt file, or 'builtin' (default)")
    parser.add_argument("--num-prompts", type=int, default=None, help="use only the first N prompts")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens per answer (default %(default)s)")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy comparison (default)")
    parser.add_argument("--samples", type=int, default=32, help="samples per prompt per side when T > 0")
    parser.add_argument("--seed", type=int, default=0, help="first seed; side A uses seed+2i, side B seed+2i+1")
    parser.add_argument("--prefix-words", type=int, default=2, help="words per sample category when T > 0")
    parser.add_argument("--alpha", type=float, default=0.01, help="test level: p >= alpha -> no evidence")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight (default %(default)s)")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="per-request timeout in seconds")
    parser.add_argument("--model", default=None, help="`model` field to send (default: the first of /v1/models)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--out", default=None, help="also write the JSON report to this file")
    parser.set_defaults(func=_run_command)
    return parser
