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
    from pyspark.errors import PySparkException
    from statecat.catalog.databases import attach, sql
    from statecat.statemeta.errors import StatecatError

    spark = cli_session(args.home)
    if args.attach:
        attach(spark, args.attach)
    try:
        frame = sql(spark, args.query)
        columns = frame.columns
        rows = frame.limit(args.limit).collect() if args.limit is not None else frame.collect()
    except PySparkException as exc:
        raise StatecatError(spark_error_message(exc)) from None
    values = [[json_value(row[i]) for i in range(len(columns))] for row in rows]
    write(sys.stdout, args.format, columns, values)
    return 0


def spark_error_message(exc: BaseException) -> str:
    """The line of a Spark error a user acts on: statecat's own message when a read failed, else Spark's."""
    text = str(exc)
    marker = "StatecatQueryError: "
    if marker in text:
        return text[text.rindex(marker) + len(marker):].splitlines()[0].strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0].strip() if lines else type(exc).__name__


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
