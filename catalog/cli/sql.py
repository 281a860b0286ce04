"""``statecat sql "QUERY" [--format table|csv|json]``: Spark SQL over attached savepoints.

The query runs on the home's server as a Spark Connect client, so it answers in about a second:
the ``statecat serve`` running on the home, else one started in the background that stops when
idle (``servers.home_server``). ``--local`` runs it in a Spark session of this process instead
(about 15 s), as do an embedded metastore and a ``hive-site.xml`` one. Either way the session has
the Hive catalog, the ``flinkstate`` source and filter pushdown set up; savepoint databases the
query names that were registered lazily are created first (see ``statecat attach``). A server
started with ``--connect-port 0`` gets the query over JDBC (``sql_client``).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from statecat.catalog.cli.options import add_attach_descriptors_argument, add_home_argument, cli_session
from statecat.catalog.cli.output import write_rows
from statecat.catalog.render import json_value
from statecat.statemeta.errors import LookupFailedError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HELP = "run Spark SQL over the attached savepoints"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("query", help="Spark SQL; several statements separated by ';' print the last result")
    parser.add_argument(
        "--format",
        choices=("table", "csv", "json"),
        default="table",
        help="table (default), csv, or json (one object per line)",
    )
    parser.add_argument(
        "--attach",
        action="append",
        metavar="ROOT",
        default=[],
        help="attach the savepoints under ROOT first (repeatable; quick when already attached)",
    )
    parser.add_argument("--limit", type=row_limit, default=None, metavar="N", help="print at most N rows")
    parser.add_argument(
        "--local",
        action="store_true",
        help="run in a Spark session of this process instead of the home's server (slower to start)",
    )
    add_attach_descriptors_argument(parser)
    add_home_argument(parser)


def row_limit(text: str) -> int:
    """``--limit N``: a whole number of rows, 0 or more."""
    try:
        limit = int(text)
    except ValueError:
        limit = -1
    if limit < 0:
        raise argparse.ArgumentTypeError(f"expected a number of rows (0 or more), got {text!r}")
    return limit


def run(args: argparse.Namespace) -> int:
    from statecat.catalog.cli.attach import check_attach_arguments

    if (args.descriptors or args.classpath) and not args.attach:
        option = "--descriptors" if args.descriptors else "--classpath"
        raise LookupFailedError(
            f"{option} applies to the savepoints --attach ROOT names",
            hint=f'statecat sql --attach ROOT {option} ... "QUERY" (or `statecat attach ROOT {option} ...` once)',
        )
    if not args.query.strip():
        raise LookupFailedError("the query is empty", hint='statecat sql "SELECT * FROM statecat.savepoints"')
    check_attach_arguments(args.attach, args.descriptors, args.classpath)
    if not args.local:
        from statecat.catalog.servers.home_server import connect, ensure_server, server_home

        home = server_home(args.home)
        if home is not None:
            server = ensure_server(home)
            if server.connect_url is not None:
                from statecat.catalog.servers.sessions import silence_error_echoes

                spark = connect(server)
                silence_error_echoes()
                # Results come whole over loopback; a reattachable execution's asynchronous release
                # would reach the server after stop() closed the session, and be logged there as an error.
                spark.client.disable_reattachable_execute()
                try:
                    return _answer(spark, args)
                finally:
                    spark.stop()  # releases this client's session on the server (its idle clock)
            from statecat.catalog.servers.sql_client import OPEN_AUTH_MODES, query_server

            answer = None
            if server.auth in OPEN_AUTH_MODES and not args.attach:
                answer = query_server(server, args.query, args.limit)
            if answer is not None:
                write_rows(sys.stdout, args.format, *answer)
                return 0
    return _answer(cli_session(args.home), args)


def _answer(spark: SparkSession, args: argparse.Namespace) -> int:
    from statecat.catalog.spark.databases import attach, attach_with_descriptors
    from statecat.catalog.spark.queries import kryo_notes, sql

    if args.attach and (args.descriptors or args.classpath):
        attach_with_descriptors(spark, args.attach, args.descriptors, args.classpath or ())
    elif args.attach:
        attach(spark, args.attach)
    # Errors Spark raises (a query it rejects, a damaged savepoint) print as one line: see cli/__init__.py.
    frame = sql(spark, args.query)
    columns = frame.columns
    rows = frame.limit(args.limit).collect() if args.limit is not None else frame.collect()
    values = [[json_value(row[i]) for i in range(len(columns))] for row in rows]
    write_rows(sys.stdout, args.format, columns, values)
    for note in kryo_notes(spark, args.query):
        sys.stderr.write(f"statecat: {note}\n")
    return 0
