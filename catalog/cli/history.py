"""``statecat history ROOT K``: the key view of K in every savepoint and checkpoint under ROOT,
in the order Flink took them (``statemeta.taken_at.in_checkpoint_order``: by checkpoint id within a
job, never by a copy's mtime)."""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from typing import TYPE_CHECKING, cast

from statecat.catalog.cli.key import write_absent_key
from statecat.catalog.cli.options import add_key_arguments, add_rest_history_argument, descriptors_of, flink_history_of
from statecat.catalog.cli.output import cell, row_json, write_table
from statecat.readers import key_history
from statecat.statemeta.errors import SavepointNotFoundError

if TYPE_CHECKING:
    from statecat.readers.scans.keyview import KeyHistoryEntry, KeyView

COLUMNS = ["taken_at", "checkpoint_id", "snapshot", "operator", "state", "namespace", "value"]
ABSENT = "(key not present)"


HELP = "one key across every savepoint and checkpoint under a root"
DESCRIPTION = (
    "The key view of K (see `statecat key`) in every savepoint and retained checkpoint under ROOT, oldest first."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", help="a directory (or URI) holding savepoints and checkpoints, or one of them")
    add_key_arguments(parser)
    add_rest_history_argument(parser)


def run(args: argparse.Namespace) -> int:
    flink_history = flink_history_of(args)  # a wrong REST address fails before any snapshot is read
    entries = key_history(
        args.root,
        args.key,
        operators=args.operator,
        states=args.state,
        unpickle=args.unpickle,
        descriptors=descriptors_of(args),
        flink_history=flink_history,
    )
    if not entries:
        raise SavepointNotFoundError(
            "no savepoint or checkpoint (no _metadata) under this directory",
            file=args.root,
            hint="Give the directory your job's savepoints or checkpoints are written to",
        )
    out = sys.stdout
    if args.format == "json":
        json.dump(
            {"root": args.root, "key": args.key, "snapshots": [_entry_json(e) for e in entries]},
            out,
            ensure_ascii=False,
        )
        out.write("\n")
        return 0
    # A ttl_timestamp column only where a state with TTL holds K (readers/codecs/ttl.py), as `statecat key`.
    ttl = any(r.ttl_timestamp is not None for e in entries if e.view is not None for r in e.view.rows)
    columns = COLUMNS + ["ttl_timestamp"] if ttl else COLUMNS
    rows = []
    for entry in entries:
        head = [
            entry.taken_at.isoformat() if entry.taken_at else "",
            str(entry.checkpoint_id or ""),
            _short(entry.path, args.root),
        ]
        if entry.error is not None:
            if args.format == "csv":
                sys.stderr.write(f"statecat: could not read {entry.path}: {entry.error}\n")
            else:
                rows.append(head + ["", "", "", f"(not read: {entry.error})"])
            continue
        view = cast("KeyView", entry.view)  # a snapshot read without an error has its key view
        if not view.rows:
            if args.format == "table":
                reasons = sorted({s.reason for s in view.skipped if s.coercion})
                absent = ABSENT if view.coercible else f"(the key fits no state here: {'; '.join(reasons)})"
                rows.append(head + ["", "", "", absent])
        else:
            rows += [
                head
                + [cell(v) for v in (r.operator, r.state, r.namespace, r.value)]
                + ([cell(r.ttl_timestamp)] if ttl else [])
                for r in view.rows
            ]
    if args.format == "csv":
        writer = csv.writer(out)
        writer.writerow(columns)
        writer.writerows(rows)
    else:
        write_table(out, columns, rows)
    views = [e.view for e in entries if e.view is not None]
    if views and not any(v.rows for v in views):  # never a silent empty answer (CSV: header only)
        nearby = next((v.nearby_keys for v in reversed(views) if v.nearby_keys), [])
        table = args.format == "table"
        write_absent_key(out if table else sys.stderr, args.key, nearby, counted=table)
    if args.format == "table":
        # Flink records no time in _metadata: say where each time comes from (e.g. a copy's mtime).
        out.write(f"times from: {'; '.join(sorted({e.time_source for e in entries}))}\n")
    return 0


def _short(path: str, root: str) -> str:
    if "://" in path:
        return path[len(root.rstrip("/")) :].lstrip("/") or path
    relative = os.path.relpath(path, os.path.abspath(root))
    return path if relative == "." else relative


def _entry_json(entry: KeyHistoryEntry) -> dict:
    view = entry.view
    return {
        "path": entry.path,
        "checkpoint_id": entry.checkpoint_id,
        "taken_at": entry.taken_at.isoformat() if entry.taken_at else None,
        "time_source": entry.time_source,
        "error": entry.error,
        "rows": [row_json(r) for r in view.rows] if view else [],
        "skipped": [s.as_dict() for s in view.skipped] if view else [],
    }
