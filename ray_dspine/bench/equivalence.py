"""Answer equivalence between two sides (e.g. the speculative pool and the autoregressive pool).

Greedy rule (temperature 0): side A and side B must return the same answer byte for byte. The answer
text is `reasoning_content + content + json(tool_calls)` (chat) or `text` (completions). The first
divergence is `d = min{i : a[i] != b[i]}`, or `len(shorter)` when one answer is a strict prefix of the
other; the mismatch rate is `num_diverged / num_compared` (failed requests are counted apart).

Sampled rule (temperature > 0): K samples per prompt per side, every sample with its own seed. Each
sample maps to a category, its first `prefix_words` whitespace-separated words (a stand-in for the
first tokens; >= 2 words reaches past the first token, which the target alone decides). Per prompt, a
chi-square test of homogeneity on the 2 x C table of counts O[s][c]:
    E[s][c] = n_s * t_c / N,   X2 = sum_s sum_c (O[s][c] - E[s][c])^2 / E[s][c],   dof = C - 1,
    p = Q(dof / 2, X2 / 2)   (Q: regularized upper incomplete gamma, the chi-square survival function)
Categories whose smaller expected count `min_s E[s][c]` is below 5 are pooled into "<other>" first (if
that pool is still below 5, the smallest kept category joins it); a prompt left with C < 2 is "not
testable". Prompts are independent, so they combine as X2 = sum X2_p with dof = sum dof_p. Decision at
level alpha (default 0.01): p >= alpha -> "no evidence of difference", p < alpha -> "distributions differ".

Parameters: prefix_words in [1, 64]; alpha in (0, 1); min expected count 5 (Cochran's rule of thumb).
Also here: the prompt set model and loader, and the typed per-prompt results and reports.
Complexity: greedy O(len(answer)) per prompt; sampled O(K log K) per prompt; Q converges in
O(sqrt(x) + 10) iterations for the series/continued fraction.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..serve.openai_schema import ChatCompletionRequest

OTHER = "<other>"
EMPTY = "<empty>"
MIN_EXPECTED_COUNT = 5.0
_EPS = 1e-14
_TINY = 1e-300
BUILTIN_PROMPTS = Path(__file__).resolve().parent / "prompts" / "equivalence.json"


def first_divergence(a: str, b: str) -> int | None:
    """Index of the first differing character, len(shorter) if one is a prefix of the other, None if equal."""
    if a == b:
        return None
    for index, (char_a, char_b) in enumerate(zip(a, b)):
        if char_a != char_b:
            return index
    return min(len(a), len(b))


def context_window(text: str, index: int, radius: int = 24) -> str:
    """Up to `radius` characters either side of `index`, with '|' marking the divergence point."""
    return text[max(0, index - radius):index] + "|" + text[index:index + radius]


def category_of(text: str, prefix_words: int) -> str:
    """The sample's first `prefix_words` whitespace-separated words ('<empty>' for an empty answer)."""
    words = text.split()
    return " ".join(words[:prefix_words]) if words else EMPTY


def regularized_upper_gamma(a: float, x: float) -> float:
    """Q(a, x) = Gamma(a, x) / Gamma(a): series for x < a + 1, continued fraction (Lentz) otherwise."""
    if a <= 0 or x < 0:
        raise ValueError(f"Q(a, x) needs a > 0 and x >= 0, got a={a}, x={x}")
    if x == 0:
        return 1.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:
        # P(a, x) = e^-x x^a / Gamma(a+1) * sum_n x^n / ((a+1)...(a+n))
        term = total = 1.0 / a
        denominator = a
        for _ in range(10_000):
            denominator += 1
            term *= x / denominator
            total += term
            if abs(term) < abs(total) * _EPS:
                break
        return max(0.0, 1.0 - total * math.exp(log_front))
    # Q(a, x) = e^-x x^a / Gamma(a) * 1 / (x+1-a - 1(1-a) / (x+3-a - 2(2-a) / (x+5-a - ...)))
    b = x + 1 - a
    c = 1 / _TINY
    d = 1 / b
    fraction = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = d if abs(d) > _TINY else _TINY
        c = b + an / c
        c = c if abs(c) > _TINY else _TINY
        d = 1 / d
        step = d * c
        fraction *= step
        if abs(step - 1) < _EPS:
            break
    return min(1.0, fraction * math.exp(log_front))


def chi_square_sf(statistic: float, dof: int) -> float:
    """P(X >= statistic) for X ~ chi-square(dof)."""
    return regularized_upper_gamma(dof / 2, statistic / 2)


class ChiSquareResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    categories: list[str] = Field(description="Categories after pooling rare ones.")
    observed_a: list[int] = Field(description="Side A counts per category.")
    observed_b: list[int] = Field(description="Side B counts per category.")
    statistic: float = Field(ge=0.0, description="Pearson X2.")
    dof: int = Field(ge=0, description="Degrees of freedom, C - 1 (0: not testable).")
    p_value: float | None = Field(description="Chi-square survival at the statistic; None when dof = 0.")


def pool_rare_categories(
    counts_a: dict[str, int], counts_b: dict[str, int], min_expected: float = MIN_EXPECTED_COUNT
) -> tuple[list[str], list[int], list[int]]:
    """Merge categories whose smaller expected cell count is below `min_expected` into '<other>'."""
    n_a, n_b = sum(counts_a.values()), sum(counts_b.values())
    total = n_a + n_b
    if total == 0:
        return [], [], []
    totals = Counter(counts_a) + Counter(counts_b)
    ranked = sorted(totals, key=lambda cat: (-totals[cat], cat))

    def smaller_expected(count: int) -> float:
        return min(n_a, n_b) * count / total

    kept = [cat for cat in ranked if smaller_expected(totals[cat]) >= min_expected]
    pooled = [cat for cat in ranked if cat not in kept]
    while pooled and kept and smaller_expected(sum(totals[cat] for cat in pooled)) < min_expected:
        pooled.append(kept.pop())  # the smallest kept category joins the pool
    groups = [[cat] for cat in kept] + ([pooled] if pooled else [])
    names = list(kept) + ([OTHER if len(pooled) > 1 else pooled[0]] if pooled else [])
    observed_a = [sum(counts_a.get(cat, 0) for cat in group) for group in groups]
    observed_b = [sum(counts_b.get(cat, 0) for cat in group) for group in groups]
    return names, observed_a, observed_b


def chi_square_homogeneity(
    counts_a: dict[str, int], counts_b: dict[str, int], min_expected: float = MIN_EXPECTED_COUNT
) -> ChiSquareResult:
    """Pearson chi-square test that two samples come from the same categorical distribution."""
    names, observed_a, observed_b = pool_rare_categories(counts_a, counts_b, min_expected)
    n_a, n_b = sum(observed_a), sum(observed_b)
    if len(names) < 2 or n_a == 0 or n_b == 0:
        return ChiSquareResult(
            categories=names, observed_a=observed_a, observed_b=observed_b, statistic=0.0, dof=0, p_value=None
        )
    total = n_a + n_b
    statistic = 0.0
    for count_a, count_b in zip(observed_a, observed_b):
        column = count_a + count_b
        for observed, row in ((count_a, n_a), (count_b, n_b)):
            expected = row * column / total
            statistic += (observed - expected) ** 2 / expected
    dof = len(names) - 1
    return ChiSquareResult(
        categories=names,
        observed_a=observed_a,
        observed_b=observed_b,
        statistic=statistic,
        dof=dof,
        p_value=chi_square_sf(statistic, dof),
    )


SampledVerdict = Literal["no evidence of difference", "distributions differ", "not testable"]


def decide(p_value: float | None, alpha: float) -> SampledVerdict:
    """p >= alpha -> no evidence of difference; p < alpha -> distributions differ; no test -> not testable."""
    if p_value is None:
        return "not testable"
    return "no evidence of difference" if p_value >= alpha else "distributions differ"


def combine_tests(results: list[ChiSquareResult]) -> tuple[float, int, float | None]:
    """Independent prompts: X2 = sum of statistics, dof = sum of dofs, p from chi-square(dof)."""
    testable = [result for result in results if result.dof > 0]
    statistic = sum(result.statistic for result in testable)
    dof = sum(result.dof for result in testable)
    return statistic, dof, (chi_square_sf(statistic, dof) if dof > 0 else None)


class EquivalencePrompt(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    kind: str = Field(default="open_chat", description="open_chat | code_edit | agent_tool_call | completion | ...")
    messages: list[dict] | None = Field(
        default=None, description="Chat prompt (/v1/chat/completions): OpenAI chat messages, checked by the ingress's own schema."
    )
    prompt: str | None = Field(default=None, description="Plain prompt (/v1/completions).")


class Side(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: str
    base_url: str = Field(description="Server root, e.g. http://127.0.0.1:8000 (a trailing /v1 is dropped).")
    pool: str | None = Field(default=None, description="Forced pool, sent as x-dspine-pool.")


class SideAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str | None = None
    error: str | None = None
    finish_reason: str | None = None
    pool: str | None = Field(default=None, description="x-dspine-pool of the response.")
    path: str | None = Field(default=None, description="x-dspine-path (or usage.path) of the response.")
    completion_tokens: int | None = None


class RequestSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_tokens: int = Field(default=64, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    model: str | None = Field(default=None, description="`model` field; omitted when None.")
    timeout_s: float = Field(default=120.0, gt=0.0)
    concurrency: int = Field(default=4, ge=1, le=256)


def load_prompts(source: str = "builtin", num_prompts: int | None = None) -> list[EquivalencePrompt]:
    """Prompts from a JSON file (a list, or an object with "prompts"), or the built-in set."""
    path = BUILTIN_PROMPTS if source == "builtin" else Path(source)
    raw = json.loads(path.read_text())
    items = raw["prompts"] if isinstance(raw, dict) else raw
    prompts = [EquivalencePrompt.model_validate(item) for item in items]
    for prompt in prompts:
        if (prompt.messages is None) == (prompt.prompt is None):
            raise ValueError(f"prompt {prompt.id!r} in {path}: give exactly one of 'messages' or 'prompt'")
        if prompt.messages is not None:
            _check_messages(prompt, path)
    return prompts[:num_prompts] if num_prompts is not None else prompts


def _check_messages(prompt: EquivalencePrompt, path: Path) -> None:
    """A chat prompt must be a request the ingress accepts (serve/openai_schema.py): OpenAI's message types,
    e.g. a tool message answers an assistant tool call by its tool_call_id."""
    try:
        ChatCompletionRequest.model_validate({"model": "any", "messages": prompt.messages})
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise ValueError(f"prompt {prompt.id!r} in {path}: {where}: {error['msg']}") from None


class GreedyResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt_id: str
    kind: str
    status: Literal["identical", "diverged", "error"]
    divergence_index: int | None = Field(default=None, description="First differing character index.")
    context_a: str | None = None
    context_b: str | None = None
    a: SideAnswer
    b: SideAnswer


class GreedyReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["greedy"] = "greedy"
    side_a: Side
    side_b: Side
    settings: RequestSettings
    num_prompts: int
    num_compared: int
    num_identical: int
    num_diverged: int
    num_errors: int
    mismatch_rate: float | None = Field(description="num_diverged / num_compared; None if nothing compared.")
    paths_a: dict[str, int] = Field(description="Decode path counts reported by side A.")
    paths_b: dict[str, int] = Field(description="Decode path counts reported by side B.")
    results: list[GreedyResult]


def compare_answers(prompt: EquivalencePrompt, a: SideAnswer, b: SideAnswer) -> GreedyResult:
    if a.text is None or b.text is None:
        return GreedyResult(prompt_id=prompt.id, kind=prompt.kind, status="error", a=a, b=b)
    index = first_divergence(a.text, b.text)
    if index is None:
        return GreedyResult(prompt_id=prompt.id, kind=prompt.kind, status="identical", a=a, b=b)
    return GreedyResult(
        prompt_id=prompt.id, kind=prompt.kind, status="diverged", divergence_index=index,
        context_a=context_window(a.text, index), context_b=context_window(b.text, index), a=a, b=b,
    )


class SampledResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt_id: str
    kind: str
    counts_a: dict[str, int] = Field(description="Category -> number of side A samples.")
    counts_b: dict[str, int] = Field(description="Category -> number of side B samples.")
    num_errors_a: int
    num_errors_b: int
    first_error: str | None = None
    test: ChiSquareResult
    verdict: SampledVerdict


class SampledReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["sampled"] = "sampled"
    side_a: Side
    side_b: Side
    settings: RequestSettings
    num_samples: int = Field(description="Samples per prompt per side.")
    prefix_words: int
    alpha: float
    test: str = Field(description="The test and decision rule, in words.")
    statistic: float
    dof: int
    p_value: float | None
    verdict: SampledVerdict
    results: list[SampledResult]


