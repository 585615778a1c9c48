"""The command reference (`docs/commands.md`), generated from the CLI's argparse tree.

Rule: walk `ray_dspine.cli.build_parser()` depth first, in the order the commands were added; every
command that takes arguments gets a section with its one-line description and a table with one row per
argument (positionals first, then options, each in the order the parser declares them; `-h/--help`
left out). A row holds the flags (or the positional's name), the metavar, the default and the help
text with argparse's `%(default)s`-style placeholders filled in.

Determinism: the output depends only on the parser, never on the machine it runs on. A default that
argparse would print as a Python object (a function, a class) shows its name; a default that names a
path under the working directory is written relative to it; `|` and newlines in help text are
escaped so each argument stays one table row. Cost: one pass over the tree, O(arguments).

`python -m ray_dspine.cli_reference > docs/commands.md` regenerates the page;
`tests/test_cli_reference.py` fails when the page and the parser disagree.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator

HEADER = (
    "# Command reference\n\n"
    "Generated from the CLI's parser by `python -m ray_dspine.cli_reference > docs/commands.md`; "
    "do not edit by hand (`tests/test_cli_reference.py` fails when this page is out of date).\n"
    "Each section is one command; each row one argument. `ray-dspine COMMAND --help` prints the same.\n"
)


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    """(name, parser, help) of each subcommand, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, sub, helps.get(name, "")


def _walk(
    parser: argparse.ArgumentParser, path: list[str], help_text: str
) -> Iterator[tuple[list[str], argparse.ArgumentParser, str]]:
    yield path, parser, help_text
    for name, sub, sub_help in _subcommands(parser):
        yield from _walk(sub, [*path, name], sub_help)


def _show_default(value: object) -> str:
    """The default as a reader would type it; the same text on every machine."""
    if value is None or value is argparse.SUPPRESS or value is False:
        return ""
    if value is True:
        return "on"
    if callable(value):
        return getattr(value, "__name__", type(value).__name__)
    if isinstance(value, (list, tuple)):
        return ",".join(_show_default(item) for item in value)
    text = str(value)
    cwd = os.getcwd()
    if text.startswith(cwd + os.sep):
        text = os.path.relpath(text, cwd)
    return text


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _help(action: argparse.Action) -> str:
    if not action.help or action.help is argparse.SUPPRESS:
        return ""
    params = dict(vars(action), prog="ray-dspine")
    params["default"] = _show_default(action.default)
    if action.choices is not None:
        params["choices"] = ", ".join(str(choice) for choice in action.choices)
    try:
        return action.help % params
    except (KeyError, TypeError, ValueError):
        return action.help


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest.upper()}`"
    return ", ".join(f"`{flag}`" for flag in action.option_strings)


def _value(action: argparse.Action) -> str:
    if action.nargs == 0 or not action.option_strings:
        return ""  # a switch, or a positional whose name is its value
    if action.choices is not None:
        return "{" + ",".join(str(choice) for choice in action.choices) + "}"
    if action.metavar is not None:
        return str(action.metavar) if isinstance(action.metavar, str) else " ".join(action.metavar)
    return action.dest.upper() if action.option_strings else ""


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    actions = [
        action
        for action in parser._actions
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
        and action.help is not argparse.SUPPRESS
    ]
    return [a for a in actions if not a.option_strings] + [a for a in actions if a.option_strings]


def render(parser: argparse.ArgumentParser) -> str:
    """The whole page for this parser."""
    lines = [HEADER]
    index = []
    sections = []
    for path, sub, help_text in _walk(parser, ["ray-dspine"], parser.description or ""):
        arguments = _arguments(sub)
        if not arguments:
            continue
        title = " ".join(path)
        anchor = "-".join(path).lower()
        description = _cell(help_text or sub.description or "")
        index.append(f"- [`{title}`](#{anchor}){': ' + description if description else ''}")
        section = [f'<a id="{anchor}"></a>', f"## `{title}`", ""]
        if description:
            section += [description, ""]
        section += ["| argument | value | default | what |", "|---|---|---|---|"]
        for action in arguments:
            default = "" if action.nargs == 0 else _cell(_show_default(action.default))  # a switch: no value
            row = [_flags(action), _cell(_value(action)), default, _cell(_help(action))]
            section.append("| " + " | ".join(row) + " |")
        sections.append("\n".join(section))
    lines.append("\n".join(index) + "\n")
    lines += [section + "\n" for section in sections]
    return "\n".join(lines)


def main() -> int:
    from ray_dspine.cli import build_parser

    sys.stdout.write(render(build_parser()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
