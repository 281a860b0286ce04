"""MkDocs hook: the CLI reference page is rendered from the `statecat` argument parsers at build time.

A page holding MARKER gets, in its place, one section per command of `statecat.catalog.cli.COMMANDS`:
the command's help line and description, its usage and a table of its arguments with their help
texts. Rendering from the parsers keeps the page and `statecat COMMAND --help` the same text.
"""

from __future__ import annotations

import argparse
import html
import re

MARKER = "<!-- cli-reference -->"
# Usage lines wrap at a fixed width, whatever the terminal that runs the build.
USAGE_WIDTH = 80
# Help texts quote code in backticks; outside those spans, Markdown's own characters are shown as typed.
_CODE_SPAN = re.compile(r"(`[^`]*`)")
_MARKDOWN_CHARACTERS = re.compile(r"([\\*_\[\]|#])")


def on_page_markdown(markdown: str, page: object, config: object, files: object) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, cli_reference())


def cli_reference() -> str:
    from statecat.catalog.cli import COMMANDS

    sections = [_command_section(name) for name in COMMANDS]
    return "\n".join(sections)


def _command_parser(name: str) -> tuple[argparse.ArgumentParser, str]:
    from statecat.catalog.cli import build_parser

    parser = build_parser(name)
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    help_line = next(choice.help for choice in subparsers._choices_actions if choice.dest == name)
    return subparsers.choices[name], help_line


def _command_section(name: str) -> str:
    parser, help_line = _command_parser(name)
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=USAGE_WIDTH)
    lines = [f"## statecat {name}", "", _text(help_line), ""]
    if parser.description:
        lines += [_text(parser.description), ""]
    lines += ["```text", parser.format_usage().strip(), "```", ""]
    rows = [_argument_row(parser, action) for action in parser._actions if _documented(action)]
    if rows:
        lines += ["| argument | what it does |", "|---|---|", *rows, ""]
    return "\n".join(lines)


def _documented(action: argparse.Action) -> bool:
    return action.help is not argparse.SUPPRESS and not isinstance(action, argparse._HelpAction)


def _argument_row(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    formatter = parser._get_formatter()
    invocation = formatter._format_action_invocation(action)
    if not action.option_strings and action.nargs in ("*", "+", argparse.REMAINDER):
        invocation += " ..."
    help_text = formatter._expand_help(action) if action.help else ""
    return f"| `{invocation}` | {_text(help_text)} |"


def _text(text: str) -> str:
    """A help text as one Markdown line: argparse's wrapping undone, code spans kept, the rest escaped."""
    one_line = " ".join(text.split())
    parts = _CODE_SPAN.split(one_line)
    return "".join(part if part.startswith("`") else _escape(part) for part in parts)


def _escape(text: str) -> str:
    return _MARKDOWN_CHARACTERS.sub(r"\\\1", html.escape(text, quote=False))
