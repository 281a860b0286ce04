"""``statecat key PATH K``: every keyed state of every operator that holds key K, as tidy rows.

K is coerced to each state's key type (text, a number, or a JSON list of a composite key's
fields); states it does not fit are listed as skipped, with the reason, and K that fits none is an
error. Each state is read through K's one key-group only. A K no state holds prints "0 rows" (on
stderr for CSV, ``"rows": []`` in JSON) with a few keys of its key-group, to tell a missing key
from one written another way.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from statecat.catalog.cli.options import add_key_arguments, descriptors_of
from statecat.catalog.cli.output import cell, row_json, write_table
from statecat.readers import SavepointReader
from statecat.readers.scans.keyview import shown_key

COLUMNS = ["operator", "state", "namespace", "value"]


HELP = "every state of every operator that holds one key"
DESCRIPTION = (
    "Every keyed state (values and timers) of every operator that holds key K, reading one key-group per state."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="savepoint or checkpoint directory (holding _metadata), or its URI")
    add_key_arguments(parser)


def run(args: argparse.Namespace) -> int:
    reader = SavepointReader(args.path, unpickle=args.unpickle, descriptors=descriptors_of(args))
    view = reader.key(args.key, operators=args.operator, states=args.state)
    warn_kryo(reader, {(row.operator, row.state) for row in view.rows})
    out = sys.stdout
    if args.format == "json":
        json.dump(
            {
                "path": view.path,
                "checkpoint_id": view.checkpoint_id,
                "key": args.key,
                "rows": [row_json(row) for row in view.rows],
                "skipped": [s.as_dict() for s in view.skipped],
            },
            out,
            ensure_ascii=False,
        )
        out.write("\n")
        return 0
    # A ttl_timestamp column only where some state with TTL holds K: other keys' output keeps its columns.
    ttl = any(row.ttl_timestamp is not None for row in view.rows)
    columns = COLUMNS + ["ttl_timestamp"] if ttl else COLUMNS
    rows = [
        [cell(v) for v in (row.operator, row.state, row.namespace, row.value) + ((row.ttl_timestamp,) if ttl else ())]
        for row in view.rows
    ]
    if args.format == "csv":
        writer = csv.writer(out)
        writer.writerow(columns)
        writer.writerows(rows)
        notes = sys.stderr
    else:
        write_table(out, columns, rows)
        notes = out
    for skipped in view.skipped:
        notes.write(f"skipped {skipped.state!r} of {skipped.operator}: {skipped.reason}\n")
    if not rows:
        write_absent_key(notes, args.key, view.nearby_keys, counted=args.format == "table")
    return 0


def warn_kryo(reader: SavepointReader, shown: set[tuple[str, str]]) -> None:
    """Says once on stderr why Kryo values in the view print as bytes (no --classpath)."""
    from statecat.statemeta.java.kryo import kryo_notes

    said: set[str] = set()
    for op in reader.meta.operators:
        for state in op.states:
            if (op.label, state.name) in shown or (op.id, state.name) in shown:
                for note in kryo_notes(state):
                    if note not in said:
                        said.add(note)
                        sys.stderr.write(f"statecat: {state.name}: shown as bytes: {note}\n")


def write_absent_key(
    out: TextIO, key: Any, nearby: Sequence, *, state: str | None = None, counted: bool = False
) -> None:
    """Says that no state (or ``state``) holds ``key``, with keys of its key-group as they are
    written (``nearby``). ``counted``: a table above already said "0 rows"."""
    text = "" if counted else "0 rows: "
    text += f"no state holds key {shown_key(key)}" if state is None else f"{state!r} holds no key {shown_key(key)}"
    if nearby:
        # Stored composite keys (dicts of f0, f1, ...) as the JSON lists a user types.
        typed = [list(k.values()) if isinstance(k, dict) else k for k in nearby]
        text += f" (keys beside it in its key-group: {', '.join(map(shown_key, typed))})"
    out.write(text + "\n")
