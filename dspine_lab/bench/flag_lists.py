"""Comma-list flags of `bench routing` (--sweep-tolerance, --sweep-load): one parsing rule, named errors.

    values = [parse_one(part) for each non-empty, stripped part of text.split(",")], in the order given
    a part parse_one refuses (ValueError) -> "argument FLAG: 'part' is not a NOUN: HINT, e.g. EXAMPLE"
    a value given twice                   -> "argument FLAG: 'part' is given twice"
    no value at all                       -> "argument FLAG: give at least one NOUN, e.g. EXAMPLE"
Complexity: O(n^2) in the number of values (a handful).
"""

from __future__ import annotations

import math
from typing import Callable, TypeVar

from ray_dspine.cli_errors import CliError

T = TypeVar("T")


def parse_flag_list(text: str, flag: str, noun: str, hint: str, example: str, parse_one: Callable[[str], T]) -> list[T]:
    out: list[T] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            value = parse_one(part)
        except ValueError:
            raise CliError(f"argument {flag}: {part!r} is not a {noun}: {hint}, e.g. {example}") from None
        if value in out:
            raise CliError(f"argument {flag}: {part!r} is given twice")
        out.append(value)
    if not out:
        raise CliError(f"argument {flag}: give at least one {noun}, e.g. {example}")
    return out


def bounded_float(part: str, low: float, low_inclusive: bool) -> float:
    """float(part) when finite and above `low` (or equal to it, when `low_inclusive`); else ValueError."""
    value = float(part)  # "x" raises ValueError; "nan" and "inf" are refused below
    if not math.isfinite(value) or value < low or (value == low and not low_inclusive):
        raise ValueError(part)
    return value
