"""``statecat diff A B``: per state, the keys added, removed and changed from savepoint A to B.

Streams: keyed states are compared key-group by key-group (same max parallelism, any parallelism).
States that cannot be compared (another max parallelism, a changed type) are reported with the
reason, as are states in one savepoint only. States with TTL add the old and new last-access
timestamps to their changes (CSV: two more columns when a compared state has TTL) and count the
keys whose value is equal but whose timestamp moved as unchanged ("restamped", readers/scans/diff.py)."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from typing import Any

from statecat.catalog.cli.options import add_descriptors_argument, descriptors_of
from statecat.catalog.cli.output import cell, write_table
from statecat.catalog.render import json_value
from statecat.readers import SavepointReader, diff_savepoints
from statecat.readers.codecs.ttl import ttl_layout
from statecat.readers.scans.diff import COMPARED, NOT_COMPARED, ONLY_IN_A, ONLY_IN_B

CHANGE_COLUMNS = ["operator", "state", "change", "key", "namespace", "old", "new", "reason"]
SUMMARY_COLUMNS = ["operator", "state", "status", "added", "removed", "changed", "unchanged", "reason"]
TEXT_CELL_WIDTH = 80


HELP = "keys added, removed and changed between two savepoints"
DESCRIPTION = (
    "Compares savepoint A (old) with B (new) state by state; states are "
    "matched by operator id/uid and state name, then by table name."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="the old savepoint or checkpoint (directory holding _metadata, or URI)")
    parser.add_argument("b", metavar="B", help="the new one")
    parser.add_argument("--operator", action="append", metavar="ID|UID|NAME", help="only this operator (repeatable)")
    parser.add_argument("--state", action="append", metavar="NAME", help="only states of this name (repeatable)")
    parser.add_argument(
        "--format",
        choices=("table", "csv", "jsonl"),
        default="table",
        help="table: one line per change, then a summary; csv/jsonl: one row per change and per "
        "state that was not compared",
    )
    parser.add_argument("--summary", action="store_true", help="only the counts per state")
    parser.add_argument(
        "--unpickle",
        action="store_true",
        help="unpickle PyFlink pickled values (runs code from the savepoints: trusted ones only)",
    )
    add_descriptors_argument(parser)


def run(args: argparse.Namespace) -> int:
    descriptors = descriptors_of(args)
    # Both sides as a reader sees them: declared types applied, PyFlink pickles marked (or unpickled).
    meta_a, meta_b = (
        SavepointReader(p, unpickle=args.unpickle, descriptors=descriptors).meta for p in (args.a, args.b)
    )
    diff = diff_savepoints(meta_a, meta_b, operators=args.operator, states=args.state, unpickle=args.unpickle)
    out = sys.stdout
    changes = () if args.summary else diff.changes()
    if args.format == "jsonl":
        for change in changes:
            out.write(
                json.dumps(
                    {"type": "change", **{k: json_value(v) for k, v in change.as_dict().items()}}, ensure_ascii=False
                )
                + "\n"
            )
        for entry in diff.summary():
            out.write(json.dumps({"type": "state", **entry.as_dict()}, ensure_ascii=False) + "\n")
        return 0
    if args.format == "csv":
        writer = csv.writer(out)
        ttl = any(
            ttl_layout(side[1]) is not None
            for entry in diff.states
            if entry.status == COMPARED
            for side in (entry.a, entry.b)
            if side is not None
        )
        extra = ["old_ttl_timestamp", "new_ttl_timestamp"] if ttl else []
        writer.writerow(CHANGE_COLUMNS + extra)
        for change in changes:
            writer.writerow(
                [
                    cell(v)
                    for v in (
                        change.operator,
                        change.state,
                        change.change,
                        change.key,
                        change.namespace,
                        change.old,
                        change.new,
                    )
                ]
                + [""]
                + ([cell(change.old_ttl_timestamp), cell(change.new_ttl_timestamp)] if ttl else [])
            )
        for entry in diff.summary():
            if entry.status != COMPARED:
                writer.writerow(
                    [entry.operator, entry.state, entry.status, "", "", "", "", entry.reason] + [""] * len(extra)
                )
        return 0
    for change in changes:
        cells = [change.change, change.state, _short(change.key), _short(change.namespace)]
        if change.change == "changed":
            cells.append(f"{_short(change.old)} -> {_short(change.new)}")
        else:
            cells.append(_short(change.new if change.change == "added" else change.old))
        if change.old_ttl_timestamp is not None or change.new_ttl_timestamp is not None:
            cells.append(f"(ttl_timestamp {_short(change.old_ttl_timestamp)} -> {_short(change.new_ttl_timestamp)})")
        out.write("  ".join(cells) + "\n")
    summary = diff.summary()
    write_table(
        out,
        SUMMARY_COLUMNS,
        [
            [
                entry.operator,
                entry.state,
                entry.status,
                str(entry.added),
                str(entry.removed),
                str(entry.changed),
                str(entry.unchanged),
                entry.reason or "",
            ]
            for entry in summary
        ],
    )
    for entry in summary:  # the table cuts long cells: the reasons in full
        if entry.status == NOT_COMPARED:
            out.write(f"not compared: {entry.state!r} of {entry.operator}: {entry.reason}\n")
    totals = diff.totals()
    restamped = f" ({totals['restamped']} with only a new TTL timestamp)" if totals["restamped"] else ""
    one_side = sum(e.status in (ONLY_IN_A, ONLY_IN_B) for e in summary)
    out.write(
        f"{totals['added']} added, {totals['removed']} removed, {totals['changed']} changed, "
        f"{totals['unchanged']} unchanged{restamped}; {sum(e.status == NOT_COMPARED for e in summary)} states not "
        f"compared, {one_side} in one savepoint only\n"
    )
    return 0


def _short(value: Any) -> str:
    text = cell(value) or "-"
    return text if len(text) <= TEXT_CELL_WIDTH else text[: TEXT_CELL_WIDTH - 1] + "…"
