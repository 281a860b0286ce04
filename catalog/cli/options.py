"""Arguments several commands share, and the Spark session the CLI's commands run on."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from statecat.statemeta.descriptors import DescriptorSet
    from statecat.statemeta.snapshotter.taken_at import FlinkCheckpointHistory

HOME_ENV = "STATECAT_HOME"


def add_home_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--home",
        default=os.environ.get(HOME_ENV) or None,
        help="the catalog's directory: metastore database, warehouse, Spark conf for `spark-sql` "
        "(default: $STATECAT_HOME, else ~/.statecat); every process on a home shares it",
    )


def add_descriptors_argument(parser: argparse.ArgumentParser) -> None:
    """``--descriptors FILE`` of the reading commands (read, key, history, diff)."""
    parser.add_argument(
        "--descriptors",
        metavar="FILE",
        help="descriptor file declaring PyFlink state types (STATEINFO.md), applied in memory: "
        "nothing is written next to the savepoint",
    )
    add_classpath_argument(parser)


def add_classpath_argument(parser: argparse.ArgumentParser, attached: bool = False) -> None:
    """``--classpath JAR|DIR`` (repeatable): the job's classes, read as data to type its Kryo state."""
    parser.add_argument(
        "--classpath",
        action="append",
        metavar="JAR|DIR",
        help="the job's JAR or class directory (repeatable): its class files (read, never loaded) type the "
        "Kryo-serialized state"
        + ("; the tables keep the paths and read them whenever they are queried" if attached else ""),
    )


def add_attach_descriptors_argument(parser: argparse.ArgumentParser) -> None:
    """``--descriptors FILE`` of the commands that attach savepoints (attach, sql --attach)."""
    parser.add_argument(
        "--descriptors",
        metavar="FILE",
        help="descriptor file declaring PyFlink state types (STATEINFO.md): the databases are "
        "created now with the declared tables, which keep the file's path and apply it "
        "whenever they are read (nothing is written next to the savepoints)",
    )
    add_classpath_argument(parser, attached=True)


def add_unpickle_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--unpickle",
        action="store_true",
        help="unpickle PyFlink pickled values (runs code from the savepoint: trusted savepoints only)",
    )


def add_key_arguments(parser: argparse.ArgumentParser) -> None:
    """What ``key`` and ``history`` take after their path: K and how to narrow and print its view."""
    parser.add_argument(
        "key",
        metavar="K",
        type=key_argument,
        help="the key as its key column shows it: text, a number, or a JSON list of the fields of a "
        "composite key, e.g. '[\"us\", 42]'",
    )
    parser.add_argument(
        "--operator", action="append", metavar="ID|UID|NAME", help="only this operator's states (repeatable)"
    )
    parser.add_argument("--state", action="append", metavar="NAME", help="only states of this name (repeatable)")
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table")
    add_unpickle_argument(parser)
    add_descriptors_argument(parser)


def key_argument(text: str) -> object:
    """A key as typed (``K``, ``--key K``): a JSON list or object is a composite key's fields, else text."""
    from statecat.readers.scans.keyview import parse_key_text  # pyarrow: imported by the key commands only

    return parse_key_text(text)


def descriptors_of(args: argparse.Namespace) -> DescriptorSet | None:
    """The parsed ``--descriptors`` file with the ``--classpath`` entries (a bad file or a missing
    entry fails here, before any savepoint is read), or None when neither is given."""
    from statecat.statemeta.descriptors import DescriptorSet, load_descriptors

    classpath = classpath_of(args)
    if not getattr(args, "descriptors", None):
        return DescriptorSet({}).with_classpath(classpath) if classpath else None
    return load_descriptors(args.descriptors).with_classpath(classpath)


def classpath_of(args: argparse.Namespace) -> list[str]:
    """``--classpath`` entries as absolute paths, each checked to be a JAR or a class directory."""
    return checked_classpath(getattr(args, "classpath", None) or ())


def checked_classpath(entries: Iterable[str]) -> list[str]:
    """Classpath entries as absolute paths; a missing or unreadable one fails now, naming it."""
    absolute = [os.path.abspath(entry) for entry in entries]
    if absolute:
        from statecat.statemeta.java.classpath import ClassPath

        ClassPath(absolute).close()
    return absolute


def cli_session(home: str | None) -> SparkSession:
    """A quiet local Spark session for the CLI (results on stdout, no log or progress noise)."""
    from statecat.catalog.servers.sessions import session

    return session(home, quiet=True)


def add_rest_history_argument(parser: argparse.ArgumentParser) -> None:
    """``--rest URL`` of the commands that time snapshots (history, materialize)."""
    parser.add_argument(
        "--rest",
        metavar="URL",
        help="JobManager REST address (e.g. http://localhost:8081): time the snapshots its checkpoint history "
        "lists by Flink's acknowledgement time where their stateInfo records none",
    )


def flink_history_of(args: argparse.Namespace) -> FlinkCheckpointHistory | None:
    if not args.rest:
        return None
    from statecat.catalog.cli.savepoint import fetch_checkpoint_history

    return fetch_checkpoint_history(args.rest)
