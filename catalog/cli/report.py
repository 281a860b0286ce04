"""``statecat report PATH --html OUT``: one self-contained HTML page about a savepoint: its operators
and states, state sizes, and for its largest keyed states key-group skew, top keys and a rescale
preview (pictures inlined as PNG)."""

from __future__ import annotations

import argparse
import sys

from statecat.catalog.report.page import DEFAULT_MAX_STATES, DEFAULT_TOP_KEYS, report_html, write_page
from statecat.statemeta.errors import StatecatError

HELP = "write an HTML page with a savepoint's state sizes, skew and top keys"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="savepoint directory (holding _metadata), or its URI")
    parser.add_argument("--html", required=True, metavar="OUT", help="the HTML file to write (replaced atomically)")
    parser.add_argument(
        "--top",
        type=int,
        default=DEFAULT_TOP_KEYS,
        metavar="N",
        help=f"largest keys shown per keyed state (default {DEFAULT_TOP_KEYS})",
    )
    parser.add_argument(
        "--parallelism",
        type=int,
        action="append",
        default=[],
        metavar="P",
        help="preview a rescale to parallelism P (repeatable; default: twice the current one)",
    )
    parser.add_argument(
        "--max-states",
        type=int,
        default=DEFAULT_MAX_STATES,
        metavar="N",
        help=f"keyed states shown in detail, largest first (default {DEFAULT_MAX_STATES})",
    )


def run(args: argparse.Namespace) -> int:
    for option, value in (("--top", args.top), ("--max-states", args.max_states)):
        if value < 1:
            raise StatecatError(f"{option} must be at least 1, got {value}")
    page = report_html(args.path, top=args.top, parallelisms=args.parallelism, max_states=args.max_states)
    try:
        out = write_page(page, args.html)
    except OSError as exc:  # the output's directory is missing or not writable
        raise StatecatError(
            f"cannot write the report to {args.html}: {exc.strerror}", hint="Give --html a file in a writable directory"
        ) from None
    print(f"wrote {out}", file=sys.stderr)
    return 0
