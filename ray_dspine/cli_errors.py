"""Bad command-line input as argparse reports it: `error: argument --flag: ...` and exit status 2."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Mapping

from pydantic import ValidationError


class CliError(ValueError):
    """A flag or file a command cannot use; the message names it and the fix."""


def flag_error(exc: ValidationError, flag_of_field: Mapping[str, str], error_type: type[CliError] = CliError) -> CliError:
    """The first validation error, named by the flag that set the field."""
    error = exc.errors()[0]
    field = next((str(part) for part in reversed(error["loc"]) if isinstance(part, str)), "")
    flag = flag_of_field.get(field, field or "arguments")
    return error_type(f"argument {flag}: {error['msg']} (got {error.get('input')!r})")


def cli_errors(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Report CliError as `error: ...` on stderr with exit status 2, like argparse does."""

    @functools.wraps(run)
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except CliError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2

    return wrapper
