"""Tell a start-up argument or validation error of `sglang.launch_server` from a crash, by its exit and its log.

SGLang 0.5.23 judges its command line in two steps before it opens a port (sglang/launch_server.py):
  parse     `prepare_server_args(argv)` runs argparse (prog "sglang serve"); an unknown flag or a bad value
            prints the usage, then `sglang serve: error: <message>`, and exits 2 (ArgumentParser.error).
  resolve   `run_server` calls `ServerArgs.resolve_once()`, which runs sglang/srt/arg_groups/pipeline.py and
            its `*_hook.py` rules; a rejected combination raises AssertionError, ValueError or
            NotImplementedError (the types those hooks raise for settings), uncaught: Python prints the
            traceback and the process exits 1.
Neither is helped by a restart or by dropping the drafter: the same arguments fail the same way.

Rules, on the exit code and the text the server wrote since this launch's `=== launch:` line (within the
last `tail_bytes` of the log):
  C0  only an exit before /health ever answered 200 in this launch can be a config error; the supervisor
      asks only then. A later exit is a crash.
  C1  argument: exit code 2 and a line `<prog>: error: <message>` (argparse's format); the last such line
      is reported.
  C2  resolution: exit code != 0, the last traceback of the text has a frame in a file under
      `sglang/srt/arg_groups/`, and its exception line's class is
        (a) AssertionError, ValueError or NotImplementedError (what the hooks raise for a refused setting,
            also when a helper they call raised it), or
        (b) RuntimeError raised by the rule itself (the innermost frame is in arg_groups): the hooks' way to
            refuse a setting on this hardware, e.g. "--kv-cache-dtype=nvfp4 requires Blackwell SM100 ...".
      The exception line is reported with the innermost arg_groups frame (`file:line in function`).
  C3  anything else is a crash: a killed process, a CUDA or out-of-memory error (a RuntimeError raised in
      torch), an import failure (even one raised while arg_groups imports its modules), exit 2 without
      argparse's line, exit 0.
Complexity: O(tail_bytes).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

LAUNCH_MARKER = "=== launch: "
TRACEBACK_HEADER = "Traceback (most recent call last):"
ARG_GROUPS_DIR = "sglang/srt/arg_groups/"
RESOLUTION_ERRORS = frozenset({"AssertionError", "ValueError", "NotImplementedError"})
RULE_RAISED_ERRORS = frozenset({"RuntimeError"})
ARGPARSE_EXIT_CODE = 2

_ARGPARSE_LINE = re.compile(r"^[^\s:][^:]*: error: .+$")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)')


class ConfigError(BaseModel):
    """What SGLang printed when it refused its arguments."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["argument", "resolution"] = Field(
        description="argument: argparse refused the command line; resolution: an arg_groups rule refused it."
    )
    line: str = Field(description="The line SGLang printed: argparse's `error:` line or the exception line.")
    where: str | None = Field(
        default=None, description="For resolution: the innermost arg_groups frame, `path:line in function`."
    )
    exit_code: int = Field(description="The server process's exit code.")


def this_launch(log_tail: str) -> str:
    """The text after the last launch marker (all of `log_tail` when the marker is not in it)."""
    at = log_tail.rfind(LAUNCH_MARKER)
    if at < 0:
        return log_tail
    newline = log_tail.find("\n", at)
    return "" if newline < 0 else log_tail[newline + 1 :]


def classify_exit(exit_code: int | None, log_text: str) -> ConfigError | None:
    """Rules C1-C3 on one launch's exit code and log text; None is a crash."""
    if exit_code is None or exit_code == 0:
        return None
    lines = log_text.splitlines()
    if exit_code == ARGPARSE_EXIT_CODE:
        found = [line.strip() for line in lines if _ARGPARSE_LINE.match(line.strip())]
        if found:
            return ConfigError(kind="argument", line=found[-1], exit_code=exit_code)
    return _resolution_error(lines, exit_code)


def _resolution_error(lines: list[str], exit_code: int) -> ConfigError | None:
    starts = [i for i, line in enumerate(lines) if line.strip() == TRACEBACK_HEADER]
    if not starts:
        return None
    where, exception_line, innermost_in_rules = None, None, False
    for line in lines[starts[-1] + 1 :]:
        frame = _FRAME.match(line)
        if frame:
            path = frame["file"].replace("\\", "/")
            innermost_in_rules = ARG_GROUPS_DIR in path
            if innermost_in_rules:
                short = path[path.rindex(ARG_GROUPS_DIR) :]
                where = f"{short}:{frame['line']} in {frame['function']}"
            continue
        if line and not line[0].isspace():
            exception_line = line.strip()
            break
    if exception_line is None or where is None:
        return None
    name = exception_line.split(":", 1)[0].rsplit(".", 1)[-1]
    if name not in RESOLUTION_ERRORS and not (name in RULE_RAISED_ERRORS and innermost_in_rules):
        return None
    return ConfigError(kind="resolution", line=exception_line, where=where, exit_code=exit_code)


def read_log_tail(path: Path, tail_bytes: int) -> str:
    """The last `tail_bytes` of the log as text ("" when there is no log); blocking, run it in a thread."""
    try:
        with open(path, "rb") as log:
            log.seek(0, 2)
            size = log.tell()
            log.seek(max(0, size - tail_bytes))
            return log.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
