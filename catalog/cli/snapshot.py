"""``statecat snapshot PATH [--output DIR] [--descriptors FILE]``: write a savepoint's stateInfo.

Reads ``_metadata`` and the state streams' headers only (never state data), so its time does not
grow with the state's size. Atomic and idempotent: see ``statecat.statemeta.snapshotter.stateinfo``.
"""

from __future__ import annotations

import argparse
import json
import sys

from statecat.statemeta.snapshotter.stateinfo import snapshot

HELP = "write the stateInfo (savepoint metadata as JSON) of a savepoint"
DESCRIPTION = (
    "Writes stateInfo into the savepoint directory (or --output DIR): operators, states, "
    "types and the handles index, so readers plan without parsing _metadata."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="savepoint or retained checkpoint directory (holding _metadata), or its URI")
    parser.add_argument("--output", metavar="DIR", help="write DIR/stateInfo instead (for read-only savepoint storage)")
    parser.add_argument(
        "--descriptors",
        metavar="FILE",
        help="descriptor file with the job's declared state types (PyFlink process mode)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    result = snapshot(args.path, args.output, descriptors=args.descriptors)
    doc = result.doc
    states = sum(len(op["states"]) for op in doc["operators"])
    if args.json:
        json.dump(
            {
                "state_info": result.path,
                "written": result.written,
                "savepoint": doc["savepoint"]["path"],
                "checkpoint_id": doc["savepoint"]["checkpoint_id"],
                "operators": len(doc["operators"]),
                "states": states,
            },
            sys.stdout,
        )
        sys.stdout.write("\n")
    else:
        verb = "wrote" if result.written else "unchanged"
        print(
            f"{verb} {result.path} (checkpoint {doc['savepoint']['checkpoint_id']}, "
            f"{len(doc['operators'])} operators, {states} states)"
        )
    return 0
