"""``statecat relocate OLD NEW``: point an attached savepoint's database at the path it moved to."""

from __future__ import annotations

import argparse
import sys

from statecat.catalog.cli.options import add_home_argument, cli_session

HELP = "point an attached savepoint's database at its new path"
DESCRIPTION = (
    "After a savepoint moved: updates its registry row, its database's statecat.savepoint property "
    "and its tables, keeping the database name. NEW must hold the same savepoint (same _metadata). "
    "`statecat attach NEW` does the same when the recorded path is gone."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old", metavar="OLD", help="the path the savepoint was attached from (or its database)")
    parser.add_argument("new", metavar="NEW", help="where the savepoint is now")
    add_home_argument(parser)


def run(args: argparse.Namespace) -> int:
    from statecat.catalog.spark.relocation import relocate
    from statecat.statemeta.files.metadata import read_metadata

    read_metadata(args.new)  # NEW must be a savepoint: said before Spark starts
    record = relocate(cli_session(args.home), args.old, args.new)
    sys.stdout.write(f"{record.database}\t{record.path}\trelocated\n")
    return 0
