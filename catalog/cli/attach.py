"""``statecat attach ROOT...``: every savepoint under the roots becomes a database in Spark's catalog."""

from __future__ import annotations

import os
import sys

from statecat.statemeta.errors import StatecatError

HOME_ENV = "STATECAT_HOME"


def add_home_argument(parser) -> None:
    parser.add_argument("--home", default=os.environ.get(HOME_ENV) or None,
                        help="the catalog's directory: metastore database, warehouse, Spark conf for `spark-sql` "
                             "(default: $STATECAT_HOME, else ~/.statecat); every process on a home shares it")


def add_parser(subparsers):
    parser = subparsers.add_parser("attach", help="register savepoints as Spark databases")
    parser.add_argument("roots", nargs="+", metavar="ROOT",
                        help="a savepoint directory, or a directory holding savepoints")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--eager", action="store_true", default=None,
                      help="create every database and table now (default when few savepoints are new)")
    mode.add_argument("--lazy", dest="eager", action="store_false",
                      help="only register; `statecat sql` creates a database when a query names it")
    add_attach_descriptors_argument(parser)
    add_home_argument(parser)
    return parser


def add_attach_descriptors_argument(parser) -> None:
    parser.add_argument("--descriptors", metavar="FILE",
                        help="descriptor file declaring PyFlink state types (STATEINFO.md): the databases are "
                             "created now with the declared tables, which keep the file's path and apply it "
                             "whenever they are read (nothing is written next to the savepoints)")


def attach_with_descriptors(spark, roots, descriptors: str):
    """``attach`` with a descriptor file: each savepoint's database and tables come from its StateMeta
    with the file applied, and every table's TableRef carries the file's absolute path, so the Spark
    workers that read the table apply it too. Tables that already exist are kept as they are
    (`statecat detach` first to re-create a database with other declarations)."""
    from statecat.catalog.spark.databases import attach, materialise
    from statecat.catalog.spark.registry import registry_records
    from statecat.statemeta.descriptors import load_descriptors

    path = os.path.abspath(descriptors)
    load_descriptors(path)  # a bad file fails before anything is registered
    result = attach(spark, roots, eager=False)
    wanted = {r.database for r in result.registered} | set(result.known)
    for record in registry_records(spark):
        if record.database not in wanted:
            continue
        try:
            materialise(spark, record.database, record.path, path)
            result.materialised.append(record.database)
        except StatecatError as exc:
            result.failed.append((record.path, str(exc)))
    return result


def cli_session(home: str | None):
    """A quiet local Spark session for the CLI (results on stdout, no log or progress noise)."""
    from statecat.catalog.servers.sessions import session

    return session(home, quiet=True)


def run(args) -> int:
    from statecat.catalog.spark.databases import attach

    spark = cli_session(args.home)
    if args.descriptors:
        result = attach_with_descriptors(spark, args.roots, args.descriptors)
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
    out.write(f"{len(result.registered)} new, {len(result.known)} known savepoint(s) in {result.seconds:.1f} s; "
              f"SELECT * FROM statecat.savepoints lists them\n")
    return 1 if result.failed else 0
