"""``statecat inspect PATH [--json]``: operators, their states with kinds and types, sizes, handles."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from statecat.catalog.cli.options import add_descriptors_argument, descriptors_of
from statecat.readers.scans.state_bytes import subtask_stream_bytes
from statecat.statemeta.files.metadata import (
    KeyGroupsHandle,
    NativeRocksDBHandle,
    OperatorState,
    OperatorStreamHandle,
    UnsupportedKeyedHandle,
)
from statecat.statemeta.model import StateMeta, load_state_meta
from statecat.statemeta.naming import catalog_table_names

HELP = "show the operators and states of a savepoint"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="savepoint directory (holding _metadata), or its URI")
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
    add_descriptors_argument(parser)


def run(args: argparse.Namespace) -> int:
    meta = load_state_meta(args.path, descriptors=descriptors_of(args))
    report = describe(meta)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_text(report))
    return 0


def _handle_kinds(op: OperatorState) -> dict[str, int]:
    kinds: dict[str, int] = {}
    # The keyed handles' loop, then the operator handles'.
    handle: KeyGroupsHandle | NativeRocksDBHandle | UnsupportedKeyedHandle | OperatorStreamHandle | None

    def count(kind: str) -> None:
        kinds[kind] = kinds.get(kind, 0) + 1

    for subtask in op.subtasks:
        for handle in (subtask.managed_keyed, subtask.raw_keyed):
            if isinstance(handle, KeyGroupsHandle):
                count(f"keyed-{handle.kind}/{handle.stream.kind}")
            elif isinstance(handle, NativeRocksDBHandle):
                count(f"keyed-{handle.kind}/{len(handle.sst_files)} sst")
            elif isinstance(handle, UnsupportedKeyedHandle):
                count(f"keyed-{handle.kind}")
        for handle in (subtask.managed_operator, subtask.raw_operator):
            if handle is not None:
                count(f"operator/{handle.stream.kind}")
    if op.coordinator is not None:
        count(f"coordinator/{op.coordinator.kind}")
    return kinds


def describe(meta: StateMeta) -> dict:
    md = meta.metadata
    by_id = {op.id: op for op in md.operators}
    tables = catalog_table_names(meta).states
    operators = []
    for op in meta.operators:
        raw_op = by_id[op.id]
        states: list[dict[str, Any]] = []
        for state in op.states:
            states.append(
                {
                    "name": state.name,
                    "kind": state.kind,
                    "state_type": state.state_type,
                    "key_type": state.key.describe() if state.key else None,
                    "namespace_type": state.namespace.describe() if state.namespace else None,
                    "value_type": state.value.describe(),
                    "decode_status": state.decode_status,
                    "raw_reasons": state.raw_reasons,
                    "subtasks": sorted({loc.subtask for loc in state.locations}),
                    "table": tables[(op.id, state.name)],
                }
            )
        operators.append(
            {
                "id": op.id,
                "uid": op.uid,
                "name": op.name,
                "parallelism": op.parallelism,
                "max_parallelism": op.max_parallelism,
                "subtasks_with_state": len(raw_op.subtasks),
                "state_bytes": subtask_stream_bytes(raw_op),
                "coordinator_bytes": op.coordinator_bytes,
                "handles": _handle_kinds(raw_op),
                "unsupported": list(op.unsupported),
                "states": states,
            }
        )
    return {
        "path": meta.path,
        "checkpoint_id": md.checkpoint_id,
        "metadata_version": md.version,
        "checkpoint_type": md.checkpoint_type,
        "savepoint_format": md.savepoint_format,
        "metadata_bytes": md.size,
        "operators": operators,
    }


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def render_text(report: dict) -> str:
    lines = [
        f"savepoint   {report['path']}",
        f"checkpoint  {report['checkpoint_id']}  ({report['checkpoint_type'] or 'type not recorded'}, "
        f"format {report['savepoint_format'] or '-'}, _metadata v{report['metadata_version']}, "
        f"{_size(report['metadata_bytes'])})",
        f"operators   {len(report['operators'])}",
        "",
    ]
    for op in report["operators"]:
        title = op["uid"] or op["name"] or "(no uid or name)"
        lines.append(f"operator {title}")
        lines.append(f"  id {op['id']}" + (f"  name {op['name']}" if op["name"] and op["uid"] else ""))
        handles = ", ".join(f"{k} x{v}" for k, v in sorted(op["handles"].items())) or "none"
        lines.append(
            f"  parallelism {op['parallelism']}, max parallelism {op['max_parallelism']}, "
            f"state {_size(op['state_bytes'])}, handles: {handles}"
        )
        for reason in op["unsupported"]:
            lines.append(f"  not readable: {reason}")
        for st in op["states"]:
            # The table name is the state's name in SQL (and its other name in read, key, ...).
            kind = st["kind"] + (f" {st['state_type']}" if st["state_type"] else "") + f"; table {st['table']}"
            if st["key_type"] is not None:
                types = f"key {st['key_type']}, namespace {st['namespace_type']}, value {st['value_type']}"
            else:
                types = f"value {st['value_type']}"
            status = "" if st["decode_status"] == "full" else f"  [raw: {'; '.join(st['raw_reasons'])}]"
            lines.append(f"    - {st['name']}  ({kind})  {types}{status}")
        if not op["states"]:
            lines.append("    (no state)")
        lines.append("")
    return "\n".join(lines)
