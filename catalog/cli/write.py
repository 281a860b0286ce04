"""``statecat write SRC --out DST``: a new canonical savepoint from any snapshot, with SQL edits.

Statements are understood before anything is written; DST appears whole or not at all; SRC is
only read. With no edits the command pins a retained checkpoint as a self-contained savepoint."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from statecat.catalog.cli.options import add_descriptors_argument, descriptors_of
from statecat.statemeta.errors import StatecatError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HELP = "write a new savepoint: SQL edits of state, dropped operators, new uids"
DESCRIPTION = (
    "Writes SRC (a canonical or native savepoint, or a retained heap or RocksDB checkpoint) as a "
    "canonical savepoint at DST, which Flink restores into either state backend. Edits run in "
    "order, evaluated by Spark (the home's server when one runs, else a local session): UPDATE t SET … "
    "WHERE …, DELETE FROM t WHERE …, INSERT INTO t VALUES … | SELECT …, MERGE INTO t USING … ON … WHEN …, "
    "on the state tables of `statecat inspect`: keyed state and timers (columns key, namespace, value), "
    "operator state such as source splits and broadcast state (value, subtask) and the source "
    "coordinator. Other tables are read by their qualified names. Untouched operators, states and "
    "key-groups keep their bytes."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", metavar="SRC", help="the snapshot to start from (directory holding _metadata, or URI)")
    parser.add_argument(
        "--out",
        required=True,
        metavar="DST",
        help="the savepoint directory to create, or an object-store URI (s3://bucket/prefix: uploaded with "
        "_metadata last; --overwrite is refused there)",
    )
    parser.add_argument(
        "--sql",
        action="append",
        default=[],
        metavar="STATEMENT",
        help="an UPDATE, DELETE, INSERT or MERGE (repeatable, in order), in Spark SQL",
    )
    parser.add_argument(
        "--drop-operator", action="append", default=[], metavar="ID|UID|NAME", help="leave an operator's state out"
    )
    parser.add_argument(
        "--set-uid",
        action="append",
        default=[],
        metavar="OPERATOR=NEW_UID",
        help="give an operator (id, uid or name) a new uid, and so the operator id Flink derives from it",
    )
    parser.add_argument(
        "--max-parallelism",
        type=int,
        metavar="N",
        help="move every key to the key-group Flink assigns it under max parallelism N (restore the job with N)",
    )
    parser.add_argument(
        "--engine",
        choices=("local", "spark"),
        default="local",
        help="spark: rebuild the subtasks' keyed streams as parallel Spark tasks, on the session that evaluates "
        "the statements (the home's server when one runs, else a local Spark, or the cluster spark.master names); "
        "DST must be on storage every executor writes to",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace DST if it is a savepoint: a directory holding _metadata and nothing but stateInfo and "
        "Flink's state files; anything else (a file, other files or directories in it) is refused before "
        "anything is written. The old savepoint is removed once the new one is in place",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text", help="how to print the summary")
    add_descriptors_argument(parser)


def _uids(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        operator, sep, uid = pair.partition("=")
        if not sep or not operator or not uid:
            raise StatecatError(f"expected --set-uid OPERATOR=NEW_UID, got {pair!r}")
        out[operator] = uid
    return out


def run(args: argparse.Namespace) -> int:
    from statecat.statemeta.files.metadata import read_metadata

    set_uids = _uids(args.set_uid)
    descriptors = descriptors_of(args)
    read_metadata(args.src)  # a wrong SRC answers before the writer's imports (the readers compile with numba)
    from statecat.catalog.spark.edits import write_savepoint

    spark: Callable[[], SparkSession] | None = None
    if args.sql or args.engine == "spark":
        from statecat.catalog.servers.home_server import edit_session

        spark = edit_session
    # Spark starts only once the statements, operators and DST are checked.
    result = write_savepoint(
        args.src,
        args.out,
        sql=args.sql,
        drop_operators=args.drop_operator,
        set_uids=set_uids,
        max_parallelism=args.max_parallelism,
        overwrite=args.overwrite,
        spark=spark,
        engine=args.engine,
        descriptors=descriptors,
    )
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    s = result.summary
    if args.format == "json":
        doc = {
            "destination": s.destination,
            "metadata_version": s.metadata_version,
            "operators": s.operators,
            "dropped": s.dropped,
            "renamed": s.renamed,
            "statements": [{"sql": p.sql, "rows": p.matched} for p in result.statements],
            "streams_copied": s.streams_copied,
            "streams_rebuilt": s.streams_rebuilt,
            "key_groups_copied": s.key_groups_copied,
            "key_groups_rebuilt": s.key_groups_rebuilt,
            "bytes_written": s.bytes_written,
            "warnings": result.warnings,
        }
        print(json.dumps(doc, indent=1))
        return 0
    print(
        f"wrote {s.destination} (canonical savepoint, _metadata version {s.metadata_version}, {s.operators} operators)"
    )
    for planned in result.statements:
        print(f"  {planned.matched} row(s): {planned.sql}")
    for old in s.dropped:
        print(f"  dropped operator {old}")
    for old, new in s.renamed.items():
        print(f"  operator {old} is now {new}")
    print(
        f"  {s.streams_copied} stream(s) copied, {s.streams_rebuilt} rebuilt; key-groups: "
        f"{s.key_groups_copied} copied, {s.key_groups_rebuilt} rebuilt; {s.bytes_written} bytes"
    )
    return 0
