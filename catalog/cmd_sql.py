"""``statecat sql "QUERY" [--format table|csv|json]``: Spark SQL over attached savepoints, on a local Spark.

The session has the Hive catalog, the ``flinkstate`` source and filter pushdown set up; savepoint
databases the query names that were registered lazily are created first (see ``statecat attach``).
"""

from __future__ import annotations

import csv
import json
import sys

from statecat.catalog.cmd_attach import add_home_argument, cli_session
from statecat.catalog.render import json_value


def add_parser(subparsers):
    parser = subparsers.add_parser("sql", help="run Spark SQL over the attached savepoints")
    parser.add_argument("query", help="Spark SQL; several statements separated by ';' print the last result")
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table",
                        help="table (default), csv, or json (one object per line)")
    parser.add_argument("--attach", action="append", metavar="ROOT", default=[],
                        help="attach the savepoints under ROOT first (repeatable; quick when already attached)")
    parser.add_argument("--limit", type=int, default=None, help="print at most N rows")
    add_home_argument(parser)
    return parser


def run(args) -> int:
    from statecat.catalog.databases import attach
    from statecat.catalog.queries import sql

    spark = cli_session(args.home)
    if args.attach:
        attach(spark, args.attach)
    # Errors Spark raises (a query it rejects, a damaged savepoint) print as one line: see cli.py.
    frame = sql(spark, args.query)
    columns = frame.columns
    rows = frame.limit(args.limit).collect() if args.limit is not None else frame.collect()
    values = [[json_value(row[i]) for i in range(len(columns))] for row in rows]
    write(sys.stdout, args.format, columns, values)
    return 0


def _cell(value) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def write(out, fmt: str, columns: list[str], rows: list[list]) -> None:
    if fmt == "json":
        for row in rows:
            out.write(json.dumps(dict(zip(columns, row)), ensure_ascii=False) + "\n")
    elif fmt == "csv":
        writer = csv.writer(out)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_cell(v) for v in row])
    else:
        from statecat.catalog.cmd_read import _table

        _table(out, columns, [[_cell(v) for v in row] for row in rows])
