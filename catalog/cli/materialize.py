"""``statecat materialize ROOT|PATH... --to LAKE``: savepoint history as Delta tables for dashboards.

Writes each savepoint or checkpoint found at or under the paths into Delta tables under LAKE
(a local directory or an ``s3://``/``gs://`` URI), exactly once: see ``statecat.catalog.lake.materialize``
for the guarantees and ``statecat.catalog.lake.tables`` for the layout. Prints one line per snapshot.
``--engine spark`` writes the same lake through delta-spark, decoding in Spark tasks
(``statecat.catalog.lake.spark_writer``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from statecat.catalog.cli.options import add_home_argument, add_rest_history_argument, cli_session, flink_history_of
from statecat.catalog.lake.materialize import DEFAULT_VACUUM_HOURS, Materializer, Retention, Selection, SnapshotResult
from statecat.statemeta.errors import StatecatError

if TYPE_CHECKING:
    from statecat.statemeta.descriptors import DescriptorSource

HELP = "write savepoints' state into Delta tables (history for dashboards)"
DESCRIPTION = (
    "Writes the state of every savepoint and checkpoint at or under the paths into Delta tables "
    "under LAKE: one table per logical state (partitioned by snapshot), plus snapshots, "
    "state_meta and state_stats, in checkpoint-id order. Snapshots already in the lake are skipped."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="ROOT|PATH", help="savepoint directories, or roots to search")
    parser.add_argument("--to", required=True, metavar="LAKE", help="lake directory or URI (s3://bucket/lake)")
    parser.add_argument(
        "--operator",
        action="append",
        default=[],
        metavar="ID|UID|NAME",
        help="only states of this operator (repeatable)",
    )
    parser.add_argument(
        "--state",
        action="append",
        default=[],
        metavar="NAME",
        help="only this state, by Flink name or lake table name (repeatable)",
    )
    parser.add_argument("--keep", type=int, metavar="N", help="keep only the newest N snapshots in the lake")
    parser.add_argument("--keep-days", type=float, metavar="D", help="remove snapshots taken more than D days ago")
    parser.add_argument(
        "--vacuum-hours",
        type=float,
        default=DEFAULT_VACUUM_HOURS,
        metavar="H",
        help="with --keep/--keep-days: delete files unreferenced for H hours "
        f"(default {DEFAULT_VACUUM_HOURS}, Delta's; 0 frees space at once but breaks "
        "readers of older table versions)",
    )
    parser.add_argument("--descriptors", metavar="FILE", help="descriptor file with the jobs' declared state types")
    add_rest_history_argument(parser)
    parser.add_argument(
        "--engine",
        choices=("deltalake", "spark"),
        default="deltalake",
        help="deltalake: write in this process, no JVM (default); spark: decode and write with Spark tasks "
        "per key-group range through delta-spark (local Spark, or the cluster spark.master names), for "
        "histories larger than one machine; the same lake either way",
    )
    add_home_argument(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object per snapshot")


def run(args: argparse.Namespace) -> int:
    if args.keep is not None and args.keep < 1:
        raise StatecatError("--keep must be at least 1")
    if args.keep_days is not None and args.keep_days <= 0:
        raise StatecatError("--keep-days must be positive")
    descriptors: DescriptorSource | None = None
    if args.descriptors:
        from statecat.statemeta.descriptors import load_descriptors

        descriptors = load_descriptors(args.descriptors)  # a bad file fails here, before Spark starts
        if args.engine == "spark":
            descriptors = os.path.abspath(args.descriptors)  # Spark's workers read the file
    flink_history = flink_history_of(args)  # a wrong REST address fails before anything is written
    # Without Delta in the session (its jars not to be had), the Materializer says why and writes nothing.
    spark = cli_session(args.home) if args.engine == "spark" else None

    def show(item: SnapshotResult) -> None:
        if args.json:
            print(json.dumps(item.__dict__), flush=True)
            return
        line = f"{item.outcome:<11} {item.path}"
        if item.snapshot_id:
            line += f" (snapshot {item.snapshot_id})"
        if item.outcome in ("written", "partial"):
            line += f": {item.states} states, {item.rows} rows"
        if item.detail:
            line += f": {item.detail}"
        print(line, file=sys.stderr if item.outcome == "failed" else sys.stdout, flush=True)

    materializer = Materializer(
        args.to,
        selection=Selection(tuple(args.operator), tuple(args.state)),
        retention=Retention(args.keep, args.keep_days, args.vacuum_hours),
        descriptors=descriptors,
        on_result=show,
        flink_history=flink_history,
        spark=spark,
    )
    result = materializer.run(args.paths)
    if result.removed and not args.json:
        print(f"removed {len(result.removed)} old snapshot(s): {', '.join(result.removed)}")
    return 1 if result.failed else 0
