"""What `ray-dspine check` reports: findings (each with a field path and a fix) and per-pool results."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ray_dspine.capacity import CapacityPlan
from ray_dspine.config import PoolConfig
from ray_dspine.engines.sglang.validation import Verdict

Level = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    """One problem: `path` is the field (`applications[0].args.pools[1].engine.capacity`), `fix` what to do."""

    level: Level
    path: str
    message: str
    fix: str

    def format(self) -> str:
        return f"{self.level.upper()} {self.path}: {self.message}\n  fix: {self.fix}"


@dataclass
class PoolReport:
    """A pool that validated: its plan (None without a capacity section) and its SGLang command lines."""

    app_name: str
    name: str
    engine_kind: str
    plan: CapacityPlan | None = None
    path: str = ""
    pool_config: PoolConfig | None = None
    command: list[str] | None = None
    fallback_command: list[str] | None = None
    command_verdict: Verdict | None = None
    fallback_verdict: Verdict | None = None


@dataclass
class CheckReport:
    config_path: str
    findings: list[Finding] = field(default_factory=list)
    pools: list[PoolReport] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "warning"]

    def passed(self, strict: bool = False) -> bool:
        """No errors (and, when strict, no warnings either)."""
        return not self.errors and not (strict and self.warnings)

    def add(self, level: Level, path: str, message: str, fix: str) -> None:
        self.findings.append(Finding(level, path, message, fix))


# Fixes by pydantic error type; the message itself says which value was wrong.
_FIXES = {
    "missing": "add this field",
    "extra_forbidden": "remove this key or correct its spelling",
    "literal_error": "use one of the values the message lists",
    "enum": "use one of the values the message lists",
    "greater_than": "raise the value above the bound",
    "greater_than_equal": "raise the value to at least the bound",
    "less_than": "lower the value below the bound",
    "less_than_equal": "lower the value to at most the bound",
    "string_pattern_mismatch": "use a value matching the pattern in the message",
    "too_short": "add entries (the list may not be this short)",
    "union_tag_invalid": "set `kind` to one of the listed engine kinds",
}


def field_path(prefix: str, loc: tuple) -> str:
    """`prefix` + pydantic's location: ints become `[i]`, names `.name`."""
    text = prefix
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def validation_findings(exc, prefix: str) -> list[Finding]:
    """One error finding per entry of a pydantic ValidationError, at `prefix` + its location."""
    found = []
    for error in exc.errors():
        loc = tuple(part for part in error["loc"] if part not in ("sglang", "simulated", "embedded"))
        fix = _FIXES.get(error["type"], "correct the value as the message says")
        found.append(Finding("error", field_path(prefix, loc) or "(top level)", error["msg"], fix))
    return found
