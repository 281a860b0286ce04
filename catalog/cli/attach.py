"""``statecat attach ROOT...``: every savepoint under the roots becomes a database in Spark's catalog.

``statecat attach --lake LAKE [--database NAME]``: a lake of ``statecat materialize`` becomes a
database of Delta tables (``catalog/spark/lakes.py``).
"""

from __future__ import annotations

import argparse
import os
import sys

from statecat.catalog.cli.options import (
    add_attach_descriptors_argument,
    add_home_argument,
    checked_classpath,
    cli_session,
)
from statecat.statemeta.errors import LookupFailedError

HELP = "register savepoints as Spark databases"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "roots", nargs="*", metavar="ROOT", help="a savepoint directory, or a directory holding savepoints"
    )
    parser.add_argument(
        "--lake",
        metavar="LAKE",
        help="register the Delta tables of a `statecat materialize` lake (directory or URI) instead",
    )
    parser.add_argument(
        "--database",
        metavar="NAME",
        help="the lake's database name (default: the lake directory's name)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--eager",
        action="store_true",
        default=None,
        help="create every database and table now (default when few savepoints are new)",
    )
    mode.add_argument(
        "--lazy",
        dest="eager",
        action="store_false",
        help="only register; `statecat sql` creates a database when a query names it",
    )
    add_attach_descriptors_argument(parser)
    add_home_argument(parser)


def check_attach_arguments(roots: list[str], descriptors: str | None, classpath: list[str] | None = None) -> None:
    """What attaching would refuse, refused before Spark starts: a bad descriptor file, a missing
    classpath entry, a local root that does not exist or holds no savepoint. (A URI root is listed
    once, by the attach itself.)"""
    from statecat.catalog.spark.databases import savepoints_under
    from statecat.statemeta.descriptors import load_descriptors

    if descriptors:
        load_descriptors(os.path.abspath(descriptors))
    checked_classpath(classpath or ())
    for root in roots:
        if "://" not in root:
            savepoints_under(root)


def run(args: argparse.Namespace) -> int:
    from statecat.catalog.spark.databases import attach, attach_with_descriptors

    if args.lake is not None:
        return _attach_lake(args)
    if args.database is not None:
        raise LookupFailedError(
            "--database names a lake's database", hint="statecat attach --lake LAKE --database NAME"
        )
    if not args.roots:
        raise LookupFailedError("nothing to attach", hint="statecat attach ROOT..., or statecat attach --lake LAKE")
    check_attach_arguments(args.roots, args.descriptors, args.classpath)
    spark = cli_session(args.home)
    if args.descriptors or args.classpath:
        result = attach_with_descriptors(spark, args.roots, args.descriptors, args.classpath or ())
    else:
        result = attach(spark, args.roots, eager=args.eager)
    out = sys.stdout
    created = set(result.materialised)
    for record in result.registered:
        state = "attached" if record.database in created else "registered (tables created on first query)"
        out.write(f"{record.database}\t{record.path}\t{state}\n")
    for database in result.known:
        state = "attached" if database in created else "already attached"
        out.write(f"{database}\t\t{state}\n")
    for path, error in result.failed:
        sys.stderr.write(f"statecat: error: could not attach {path}: {error}\n")
    out.write(
        f"{len(result.registered)} new, {len(result.known)} known savepoint(s) in {result.seconds:.1f} s; "
        f"SELECT * FROM statecat.savepoints lists them\n"
    )
    return 1 if result.failed else 0


def _attach_lake(args: argparse.Namespace) -> int:
    from statecat.catalog.spark.lakes import attach_lake, check_lake, lake_database_name, normalise_lake

    if args.roots or args.descriptors or args.classpath or args.eager is not None:
        raise LookupFailedError(
            "--lake attaches a lake alone", hint="Attach savepoints and lakes with separate `statecat attach` commands"
        )
    if args.database is not None and lake_database_name(args.database) != args.database:
        raise LookupFailedError(
            f"--database {args.database!r} is not a database name",
            hint=f"Use letters, digits and underscores, e.g. {lake_database_name(args.database)!r}",
        )
    check_lake(normalise_lake(args.lake))  # before Spark starts
    from statecat.catalog.spark.delta import delta_jars

    delta_jars()  # Delta's jars (resolved now if the cache has none), else the one line why, before Spark starts
    spark = cli_session(args.home)
    database, added = attach_lake(spark, args.lake, args.database)
    tables = [t.name for t in spark.catalog.listTables(database)]
    sys.stdout.write(
        f"{database}\t{normalise_lake(args.lake)}\t{len(added)} table(s) registered now, {len(tables)} in all: "
        f"{', '.join(sorted(tables))}\n"
    )
    return 0
