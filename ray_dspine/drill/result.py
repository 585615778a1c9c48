"""A scenario's figures, how they are counted from its exchanges, the progress lines and the summary table.

Rules (`tally`, over the exchanges a scenario sent):
  sent       every exchange.
  hung       kind "hung"; lost: kind "lost" (a stream or body that broke off after the status line).
  answered   every exchange but hung, lost, connect and closed ones (exchange.Exchange.answered).
  failed     a count per kind for each exchange whose kind is neither expected by the scenario nor hung
             nor lost (e.g. {"http_500": 2, "connect": 1}); closed streams are expected where a scenario
             closes them.
  ttft_s     percentiles of the TTFT of exchanges that have one; e2e_s: of the expected ones.
  passed     None when the scenario was skipped; the reason names the first broken promise, or "ok".
Progress: one stderr line `drill <scenario> <done>/<total> <elapsed>s`, at most one per `interval_s`, plus
one when the scenario ends.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TextIO

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from ..bench.stats import Distribution, describe
from .exchange import Exchange


class ScenarioResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    sent: int = Field(default=0, ge=0)
    answered: int = Field(default=0, ge=0)
    failed: dict[str, int] = Field(default_factory=dict, description="Failures by kind.")
    hung: int = Field(default=0, ge=0, description="No answer within the client timeout.")
    lost: int = Field(default=0, ge=0, description="Answers that broke off after the status line.")
    ttft_s: Distribution | None = None
    e2e_s: Distribution | None = None
    passed: bool | None = Field(default=None, description="None: skipped.")
    reason: str = ""
    figures: dict[str, JsonValue] = Field(default_factory=dict, description="Scenario-specific figures.")

    @property
    def num_failed(self) -> int:
        return sum(self.failed.values())


def tally(name: str, exchanges: Iterable[Exchange], expected: Iterable[str] = ("ok",)) -> ScenarioResult:
    exchanges = list(exchanges)
    expected = set(expected)
    failed = Counter(e.kind for e in exchanges if e.kind not in expected and e.kind not in ("hung", "lost"))
    ttft = [e.ttft_s for e in exchanges if e.ttft_s is not None]
    e2e = [e.e2e_s for e in exchanges if e.kind in expected]
    return ScenarioResult(
        name=name,
        sent=len(exchanges),
        answered=sum(e.answered for e in exchanges),
        failed=dict(sorted(failed.items())),
        hung=sum(e.kind == "hung" for e in exchanges),
        lost=sum(e.kind == "lost" for e in exchanges),
        ttft_s=describe(ttft) if ttft else None,
        e2e_s=describe(e2e) if e2e else None,
    )


def verdict(result: ScenarioResult, problems: list[str]) -> ScenarioResult:
    """Set passed/reason from the list of broken promises (empty: passed)."""
    result.passed = not problems
    result.reason = "; ".join(problems) if problems else "ok"
    return result


class Progress:
    def __init__(self, out: TextIO | None = None, clock: Callable[[], float] = time.monotonic, interval_s: float = 1.0):
        self.out = out
        self.clock = clock
        self.interval_s = interval_s
        self.scenario = ""
        self.total = 0
        self.done = 0
        self.started = 0.0
        self.last = float("-inf")

    def start(self, scenario: str, total: int) -> None:
        self.scenario, self.total, self.done = scenario, total, 0
        self.started = self.clock()
        self.last = float("-inf")
        self._emit()

    def add(self, count: int = 1) -> None:
        self.done += count
        if self.clock() - self.last >= self.interval_s:
            self._emit()

    def finish(self) -> None:
        self._emit()

    def _emit(self) -> None:
        now = self.clock()
        self.last = now
        out = self.out if self.out is not None else sys.stderr
        print(f"drill {self.scenario} {self.done}/{self.total} {now - self.started:.1f}s", file=out, flush=True)


def _ms(dist: Distribution | None) -> str:
    if dist is None or dist.p50 is None or dist.p99 is None:
        return "-"
    return f"{dist.p50 * 1000:.0f}/{dist.p99 * 1000:.0f}"


def render_table(results: list[ScenarioResult]) -> str:
    header = ["scenario", "sent", "answered", "failed", "hung", "lost", "ttft p50/p99 ms", "e2e p50/p99 ms", "result"]
    rows = [header]
    for r in results:
        failed = ", ".join(f"{k}={v}" for k, v in r.failed.items()) or "0"
        verdict_text = "skipped" if r.passed is None else ("PASS" if r.passed else "FAIL")
        rows.append([r.name, str(r.sent), str(r.answered), failed, str(r.hung), str(r.lost), _ms(r.ttft_s),
                     _ms(r.e2e_s), f"{verdict_text}: {r.reason}"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] for row in rows)
