"""``statecat attach ROOT...``: every savepoint under the roots becomes a database in Spark's catalog."""

from __future__ import annotations

import os
import sys

HOME_ENV = "STATECAT_HOME"


def add_home_argument(parser) -> None:
    parser.add_argument("--home", default=os.environ.get(HOME_ENV),
                        help="directory of the embedded Derby metastore and warehouse (default: $STATECAT_HOME, "
                             "else Spark's default, the working directory, where a later `spark-sql` looks)")


def add_parser(subparsers):
    parser = subparsers.add_parser("attach", help="register savepoints as Spark databases")
    parser.add_argument("roots", nargs="+", metavar="ROOT",
                        help="a savepoint directory, or a directory holding savepoints")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--eager", action="store_true", default=None,
                      help="create every database and table now (default when few savepoints are new)")
    mode.add_argument("--lazy", dest="eager", action="store_false",
                      help="only register; `statecat sql` creates a database when a query names it")
    add_home_argument(parser)
    return parser


def cli_session(home: str | None):
    """A quiet local Spark session for the CLI (results on stdout, no log or progress noise)."""
    from statecat.catalog.sessions import session

    return session(home, quiet=True)


def run(args) -> int:
    from statecat.catalog.databases import attach

    spark = cli_session(args.home)
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
    out.write(f"{len(result.registered)} new, {len(result.known)} known savepoint(s) in {result.seconds:.1f} s; "
              f"SELECT * FROM statecat.savepoints lists them\n")
    return 1 if result.failed else 0
