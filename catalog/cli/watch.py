"""``statecat watch ROOT...``: write the stateInfo of every new savepoint and retained checkpoint.

The watching itself is ``statemeta.watcher.Watcher`` (how a savepoint is found, when it counts as
complete, what is skipped); this command runs it, and with ``--attach`` or ``--materialize`` hands
each ready savepoint on to the catalog or the lake.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from statecat.catalog.cli.options import add_home_argument, cli_session
from statecat.statemeta.snapshotter.watcher import DEFAULT_INTERVAL, DEFAULT_MAX_DEPTH, Watcher

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("statecat.watch")


def catalog_registrar(home: str | None) -> Callable[[str], None]:
    """Registers savepoints as databases, starting Spark on the first one (attach is idempotent)."""
    spark: SparkSession | None = None

    def register(uri: str) -> None:
        nonlocal spark
        from statecat.catalog.spark.databases import attach

        if spark is None:
            spark = cli_session(home)
        result = attach(spark, [uri], eager=True)
        for database in result.materialised:
            log.info("registered %s as database %s", uri, database)

    return register


def _ready_hooks(args: argparse.Namespace) -> Callable[[str], None] | None:
    hooks = [catalog_registrar(args.home)] if args.attach else []
    if args.materialize:
        from statecat.catalog.lake.materialize import lake_writer

        hooks.append(lake_writer(args.materialize))
    if not hooks:
        return None
    if len(hooks) == 1:
        return hooks[0]

    def each(uri: str) -> None:
        for hook in hooks:
            hook(uri)

    return each


HELP = "write the stateInfo of every new savepoint and retained checkpoint under directories"
DESCRIPTION = (
    "Polls the roots for savepoint-*/chk-N directories with a complete _metadata and writes each one's stateInfo once."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("roots", nargs="+", metavar="ROOT", help="directories (or URIs) to watch")
    parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL, help="seconds between polls (default 5)")
    parser.add_argument(
        "--output",
        metavar="DIR",
        help="write stateInfo under DIR (mirroring the paths below each root) instead of into the savepoints",
    )
    parser.add_argument("--descriptors", metavar="FILE", help="descriptor file with the jobs' declared state types")
    parser.add_argument(
        "--max-depth",
        type=int,
        default=DEFAULT_MAX_DEPTH,
        help=f"directory levels below a root to search (default {DEFAULT_MAX_DEPTH})",
    )
    parser.add_argument(
        "--attach",
        action="store_true",
        help="also register each savepoint as a database in Spark's catalog (like statecat attach)",
    )
    parser.add_argument(
        "--materialize",
        metavar="LAKE",
        help="also write each savepoint into the Delta lake LAKE (like statecat materialize)",
    )
    add_home_argument(parser)
    parser.add_argument(
        "--once",
        action="store_true",
        help="one pass: snapshot what is there now (no waiting for _metadata to settle) and exit; "
        "exit status 1 when a savepoint was damaged or incomplete",
    )
    parser.add_argument("--max-polls", type=int, help=argparse.SUPPRESS)  # for tests: stop after N polls


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s statecat watch: %(message)s")
    descriptors = None
    if args.descriptors:
        from statecat.statemeta.descriptors import load_descriptors

        descriptors = load_descriptors(args.descriptors)  # a bad file fails now, not per savepoint
    watcher = Watcher(
        args.roots,
        output=args.output,
        descriptors=descriptors,
        max_depth=args.max_depth,
        stable_polls=1 if args.once else 2,
        on_ready=_ready_hooks(args),
    )
    if args.once:
        events = watcher.poll()
        failed = [e for e in events if e.kind in ("skipped", "incomplete")]
        for e in events:
            if e.kind in ("snapshot", "unchanged", "done"):
                log.info("%s %s", e.kind, e.path)
        return 1 if failed else 0
    try:
        watcher.run(args.interval, max_polls=args.max_polls)
    except KeyboardInterrupt:
        pass
    return 0
