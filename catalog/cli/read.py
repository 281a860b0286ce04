"""``statecat read PATH --state NAME``: the rows of one state as JSON lines, CSV or a table."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, TextIO

from statecat.catalog.cli.key import write_absent_key
from statecat.catalog.cli.options import (
    add_descriptors_argument,
    add_unpickle_argument,
    descriptors_of,
    key_argument,
)
from statecat.catalog.cli.output import cell, write_table
from statecat.catalog.render import json_value
from statecat.readers import SavepointReader
from statecat.readers.scans.keyview import KeyNotCoercible, coerce_key, key_form, key_view, shown_key
from statecat.statemeta.errors import LookupFailedError
from statecat.statemeta.types import key_column_type

if TYPE_CHECKING:
    import pyarrow as pa

    from statecat.statemeta.model import StateInfo


HELP = "print the rows of one state"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="savepoint directory (holding _metadata), or its URI")
    parser.add_argument("--operator", help="operator id, uid or name (needed when the state name is not unique)")
    parser.add_argument("--state", required=True, help="state name as Flink wrote it")
    parser.add_argument(
        "--key",
        action="append",
        type=key_argument,
        help="only this key (repeatable; a JSON list of fields for a composite key); reads only its key-group",
    )
    parser.add_argument("--limit", type=int, help="at most N rows")
    parser.add_argument("--format", choices=("jsonl", "csv", "table"), default="jsonl")
    add_unpickle_argument(parser)
    add_descriptors_argument(parser)


def warn_pickled(state: StateInfo, err: TextIO | None = None) -> None:
    """Says on stderr why a state's PyFlink pickles print as bytes (read without --unpickle)."""
    from statecat.statemeta.descriptors import pickled_notes

    for note in pickled_notes(state):
        (err or sys.stderr).write(f"statecat: {state.name}: {note}\n")


def _coerced(key: Any, state: StateInfo) -> Any:
    """A --key in the type of the state's key column; one that cannot be of it is an error saying how to write it."""
    try:
        return coerce_key(key, state.key_type)
    except KeyNotCoercible as exc:
        column = key_column_type(state.key_type).describe()
        raise LookupFailedError(
            f"--key {shown_key(key)} cannot be a key of {state.name!r}: {exc}",
            hint=f"Write keys of type {column} as {key_form(state.key_type)}",
        ) from None


def run(args: argparse.Namespace) -> int:
    reader = SavepointReader(args.path, unpickle=args.unpickle, descriptors=descriptors_of(args))
    operator, state = reader.find(args.state, args.operator)
    if not args.unpickle:
        warn_pickled(state)
    for reason in state.raw_reasons:  # e.g. PyFlink process-mode state read without --descriptors
        sys.stderr.write(f"statecat: {state.name}: shown as bytes: {reason}\n")
    if args.key and not state.is_keyed:
        raise LookupFailedError(f"--key applies to keyed states; {state.name!r} is a {state.kind} state")
    # Keys were refused above for a state that is not keyed: a keyed state has its key type.
    keys = [_coerced(k, state) for k in args.key] if args.key else None
    columns = reader.schema(state.name, operator.id).names
    rows = _limited(reader.batches(state.name, operator.id, keys=keys), args.limit)
    out = sys.stdout
    count = 0
    if args.format == "jsonl":
        for row in rows:
            count += 1
            out.write(json.dumps({c: json_value(row[c]) for c in columns}, ensure_ascii=False) + "\n")
    elif args.format == "csv":
        writer = csv.writer(out)
        writer.writerow(columns)
        for row in rows:
            count += 1
            writer.writerow([cell(row[c]) for c in columns])
    else:
        table = [[cell(row[c]) for c in columns] for row in rows]
        count = len(table)
        write_table(out, columns, table)
    if count == 0:
        # Never a silent empty answer: the table says "0 rows" itself, JSON lines and CSV on stderr.
        notes = out if args.format == "table" else sys.stderr
        if not args.key and args.format != "table":
            notes.write(f"0 rows: state {state.name!r} holds no entries\n")
        for key in args.key or ():
            nearby = key_view(reader, key, operators=[operator.id], states=[state.name]).nearby_keys
            write_absent_key(notes, key, nearby, state=state.name, counted=args.format == "table")
    return 0


def _limited(batches: Iterable[pa.RecordBatch], limit: int | None) -> Iterator[dict[str, Any]]:
    count = 0
    for batch in batches:
        for row in batch.to_pylist():
            if limit is not None and count >= limit:
                return
            count += 1
            yield row
