"""``statecat detach DB|PATH``: drop a savepoint's database and its registry row (Flink's files stay)."""

from __future__ import annotations

import argparse
import sys

from statecat.catalog.cli.options import add_home_argument, cli_session

HELP = "drop an attached savepoint's database and registry row"
DESCRIPTION = (
    "Drops the savepoint's database (its tables only refer to the savepoint) and removes its row "
    "from statecat.savepoints. The savepoint's files are not touched. Running it again is a no-op."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="DB|PATH", help="the savepoint's database, or the path it was attached from")
    add_home_argument(parser)


def run(args: argparse.Namespace) -> int:
    from statecat.catalog.spark.relocation import detach

    result = detach(cli_session(args.home), args.target)
    if result is None:
        sys.stdout.write(f"{args.target}: not attached; nothing to do\n")
        return 0
    done = ", ".join(
        part
        for part, did in (("database dropped", result.dropped), ("registry row removed", result.unregistered))
        if did
    )
    sys.stdout.write(f"{result.database}\t{result.path or ''}\tdetached ({done or 'nothing left to do'})\n")
    return 0
