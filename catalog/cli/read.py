"""``statecat read PATH --state NAME``: the rows of one state as JSON lines, CSV or a table."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, TextIO

from statecat.catalog.cli.options import add_descriptors_argument, add_unpickle_argument, descriptors_of
from statecat.catalog.cli.output import cell, write_table
from statecat.catalog.render import json_value
from statecat.readers import SavepointReader
from statecat.statemeta.errors import LookupFailedError
from statecat.statemeta.types import TypeDescriptor, key_column_type

if TYPE_CHECKING:
    import pyarrow as pa

    from statecat.statemeta.model import StateInfo


HELP = "print the rows of one state"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="savepoint directory (holding _metadata), or its URI")
    parser.add_argument("--operator", help="operator id, uid or name (needed when the state name is not unique)")
    parser.add_argument("--state", required=True, help="state name as Flink wrote it")
    parser.add_argument("--key", action="append", help="only this key (repeatable); reads only its key-group")
    parser.add_argument("--limit", type=int, help="at most N rows")
    parser.add_argument("--format", choices=("jsonl", "csv", "table"), default="jsonl")
    add_unpickle_argument(parser)
    add_descriptors_argument(parser)


def warn_pickled(state: StateInfo, err: TextIO | None = None) -> None:
    """Says on stderr why a state's PyFlink pickles print as bytes (read without --unpickle)."""
    from statecat.statemeta.descriptors import pickled_notes

    for note in pickled_notes(state):
        (err or sys.stderr).write(f"statecat: {state.name}: {note}\n")


def parse_key(text: str, key: TypeDescriptor) -> Any:
    """A --key argument in the type of the state's key column."""
    column = key_column_type(key)
    kind = column.kind
    try:
        if kind in ("int", "long", "short", "byte", "INTEGER", "BIGINT", "SMALLINT", "TINYINT"):
            return int(text)
        if kind in ("float", "double", "FLOAT", "DOUBLE"):
            return float(text)
        if kind in ("boolean", "BOOLEAN"):
            return text.lower() in ("true", "1", "yes")
        if column.fields:
            return json.loads(text)
    except ValueError as exc:
        raise LookupFailedError(
            f"--key {text!r} is not a valid {column.describe()}",
            hint="Give the key as it appears in the key column (JSON for composite keys)",
        ) from exc
    return text


def run(args: argparse.Namespace) -> int:
    reader = SavepointReader(args.path, unpickle=args.unpickle, descriptors=descriptors_of(args))
    operator, state = reader.find(args.state, args.operator)
    if not args.unpickle:
        warn_pickled(state)
    if args.key and not state.is_keyed:
        raise LookupFailedError(f"--key applies to keyed states; {state.name!r} is a {state.kind} state")
    # Keys were refused above for a state that is not keyed: a keyed state has its key type.
    keys = [parse_key(k, state.key_type) for k in args.key] if args.key else None
    columns = reader.schema(state.name, operator.id).names
    rows = _limited(reader.batches(state.name, operator.id, keys=keys), args.limit)
    out = sys.stdout
    if args.format == "jsonl":
        for row in rows:
            out.write(json.dumps({c: json_value(row[c]) for c in columns}, ensure_ascii=False) + "\n")
    elif args.format == "csv":
        writer = csv.writer(out)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([cell(row[c]) for c in columns])
    else:
        write_table(out, columns, [[cell(row[c]) for c in columns] for row in rows])
    return 0


def _limited(batches: Iterable[pa.RecordBatch], limit: int | None) -> Iterator[dict[str, Any]]:
    count = 0
    for batch in batches:
        for row in batch.to_pylist():
            if limit is not None and count >= limit:
                return
            count += 1
            yield row
