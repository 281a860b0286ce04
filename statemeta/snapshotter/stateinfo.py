"""``stateInfo``: a savepoint's StateMeta as a versioned JSON document (schema: STATEINFO.md).

Written next to ``_metadata`` (or into a separate directory for read-only savepoint storage) by
``statecat snapshot``/``watch``/``savepoint``. It holds everything a reader needs to plan a scan
(operators, states, types, the handles index with key-group offsets) so readers skip parsing
``_metadata`` and the stream headers. ``read_state_info`` rebuilds the very StateMeta that
``load_state_meta`` derives from the savepoint; a size + SHA-256 of ``_metadata`` recorded in the
document tells whether it still describes the savepoint next to it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import posixpath
import tempfile
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pyarrow.fs as pafs

from statecat.statemeta.errors import FormatError, SavepointNotFoundError, StatecatError
from statecat.statemeta.files.metadata import (
    MAX_KEY_GROUPS,
    CheckpointMetadata,
    FileStream,
    InlineStream,
    KeyedHandle,
    KeyGroupsHandle,
    MasterState,
    NativeRocksDBHandle,
    OperatorState,
    OperatorStateEntry,
    OperatorStreamHandle,
    RocksDBFile,
    StreamHandle,
    SubtaskState,
    UnsupportedKeyedHandle,
    check_key_group_offsets,
    check_operator_offsets,
)
from statecat.statemeta.files.snapshots import PRIMITIVE_ARRAY_SNAPSHOTS, SIMPLE_SNAPSHOTS
from statecat.statemeta.files.storage import METADATA_FILE, Storage, open_regular_file, open_storage
from statecat.statemeta.model import (
    KEY_GROUP_LAYOUTS,
    NATIVE_ROCKSDB_LAYOUT,
    STATE_KINDS,
    KeyedLocation,
    OperatorLocation,
    OperatorMeta,
    StateInfo,
    StateMeta,
)
from statecat.statemeta.naming import catalog_table_names
from statecat.statemeta.types import TypeDescriptor

if TYPE_CHECKING:
    from statecat.statemeta.descriptors import DescriptorSource

STATE_INFO_FILE = "stateInfo"
FORMAT_NAME = "statecat.stateInfo"
FORMAT_VERSION = 1
# Fields that change on every write without changing what the document says.
VOLATILE_FIELDS = ("written_at",)
HASH_CHUNK = 1 << 20
# A stateInfo larger than this is not one statecat wrote (real ones are KBs to a few MB).
MAX_STATE_INFO_BYTES = 256 << 20

# ----------------------------------------------------------------------------- serializer classes

_BASE = "org.apache.flink.api.common.typeutils.base."
_RUNTIME = "org.apache.flink.api.java.typeutils.runtime."
_TABLE = "org.apache.flink.table.runtime.typeutils."


def _serializer_of_snapshot(snapshot: str) -> str:
    # "…LongSerializer$LongSerializerSnapshot" → "…LongSerializer"; nested classes keep their outer part.
    return snapshot.rsplit("$", 1)[0] if snapshot.endswith("Snapshot") and "$" in snapshot else snapshot


# Descriptor kind → Java serializer class. Simple kinds come from the snapshot tables of the
# header parser, so both stay in step.
SERIALIZER_CLASSES: dict[str, str | None] = {}
for _snapshot, _kind in SIMPLE_SNAPSHOTS.items():
    SERIALIZER_CLASSES.setdefault(_kind, _serializer_of_snapshot(_snapshot))
SERIALIZER_CLASSES.update(
    {
        "bytes": _BASE + "array.BytePrimitiveArraySerializer",
        "list": _BASE + "ListSerializer",
        "map": _BASE + "MapSerializer",
        "generic_array": _BASE + "GenericArraySerializer",
        "string_array": _BASE + "array.StringArraySerializer",
        "enum": _BASE + "EnumSerializer",
        "timer": "org.apache.flink.streaming.api.operators.TimerSerializer",
        "ttl": "org.apache.flink.runtime.state.ttl.TtlStateFactory$TtlSerializer",
        "tuple": _RUNTIME + "TupleSerializer",
        "row": _RUNTIME + "RowSerializer",
        "nullable": _RUNTIME + "NullableSerializer",
        "either": _RUNTIME + "EitherSerializer",
        "pojo": _RUNTIME + "PojoSerializer",
        "external": _TABLE + "ExternalSerializer",
        "raw_value": _TABLE + "RawValueDataSerializer",
        "decimal_data": _TABLE + "DecimalDataSerializer",
        "timestamp_data": _TABLE + "TimestampDataSerializer",
        "rowdata": _TABLE + "RowDataSerializer",
        "array_data": _TABLE + "ArrayDataSerializer",
        "map_data": _TABLE + "MapDataSerializer",
        # PyFlink process mode: Java keeps byte[] (map keys: ByteArrayWrapper) holding PyFlink coder bytes.
        "pyflink": _BASE + "array.BytePrimitiveArraySerializer",
        "broadcast_entry": None,
        "stream_element": "org.apache.flink.streaming.runtime.streamrecord.StreamElementSerializer",
        "java_serialized": "org.apache.flink.runtime.state.JavaSerializer",
        "dewey_number": "org.apache.flink.cep.nfa.DeweyNumber$DeweyNumberSerializer",
        "cep_nfa_state": "org.apache.flink.cep.nfa.NFAStateSerializer",
        "cep_computation_state": None,  # written by NFAStateSerializer itself
        "cep_event_id": "org.apache.flink.cep.nfa.sharedbuffer.EventId$EventIdSerializer",
        "cep_node_id": "org.apache.flink.cep.nfa.sharedbuffer.NodeId$NodeIdSerializer",
        "cep_lockable": "org.apache.flink.cep.nfa.sharedbuffer.Lockable$LockableTypeSerializer",
        "cep_shared_buffer_edge": "org.apache.flink.cep.nfa.sharedbuffer.SharedBufferEdge$SharedBufferEdgeSerializer",
        "cep_shared_buffer_node": "org.apache.flink.cep.nfa.sharedbuffer.SharedBufferNodeSerializer",
    }
)
for _snapshot, _kind in PRIMITIVE_ARRAY_SNAPSHOTS.items():
    SERIALIZER_CLASSES.setdefault(f"primitive_array<{_kind}>", _serializer_of_snapshot(_snapshot))


def serializer_class(desc: TypeDescriptor) -> str | None:
    """The Java serializer class that writes ``desc`` (the snapshot class for raw ones)."""
    if desc.kind == "raw":
        return _serializer_of_snapshot(str(desc.attr("serializer")))
    if desc.kind == "primitive_array":
        return SERIALIZER_CLASSES.get(f"primitive_array<{desc.fields[0][1].kind}>")
    if desc.kind == "pyflink" and desc.attr("layout") == "plain" and desc.attr("java_class"):
        return desc.attr("java_class")
    if desc.kind == "map" and desc.attr("comparator"):
        return _TABLE + "SortedMapSerializer"
    return SERIALIZER_CLASSES.get(desc.kind)


# ----------------------------------------------------------------------------- freshness


@dataclass(frozen=True)
class MetadataFingerprint:
    size: int
    sha256: str


def metadata_fingerprint(storage: Storage) -> MetadataFingerprint:
    """Size and SHA-256 of ``_metadata``: what a stateInfo must match to describe this savepoint."""
    digest = hashlib.sha256()
    size = 0
    with storage.open(storage.metadata_path) as stream:
        while True:
            chunk = stream.read(HASH_CHUNK)
            if not chunk:
                break
            digest.update(chunk)
            size += len(chunk)
    return MetadataFingerprint(size, digest.hexdigest())


# ----------------------------------------------------------------------------- StateMeta → JSON


def to_state_info(
    meta: StateMeta,
    *,
    descriptors: dict | None = None,
    fingerprint: MetadataFingerprint | None = None,
    written_at: str | None = None,
) -> dict:
    """The stateInfo document of ``meta`` (a plain dict, ready for ``json.dumps``)."""
    from statecat import __version__

    md = meta.metadata
    fingerprint = fingerprint or metadata_fingerprint(meta.storage)
    raw_ops = {op.id: op for op in md.operators}
    doc: dict[str, Any] = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "written_at": written_at or _now(),
        "written_by": f"statecat {__version__}",
        "savepoint": {
            # Absolute, so a stateInfo kept elsewhere (--output) still finds its savepoint.
            "path": meta.path if "://" in meta.path else meta.storage.directory,
            "checkpoint_id": md.checkpoint_id,
            "metadata_version": md.version,
            "checkpoint_type": md.checkpoint_type,
            "savepoint_format": md.savepoint_format,
            "is_savepoint": md.is_savepoint,
            "metadata_file": {"name": METADATA_FILE, "size": fingerprint.size, "sha256": fingerprint.sha256},
        },
        "master_states": [{"name": m.name, "version": m.version, "size": m.size} for m in md.master_states],
        "descriptors": descriptors,
        "operators": [],
    }
    names = catalog_table_names(meta)
    state_tables, operator_tables = names.states, names.operators
    listed = set()
    for op in meta.operators:
        listed.add(op.id)
        out = _operator_json(meta.storage, op, raw_ops[op.id])
        out["table"] = operator_tables.get(op.id)
        for state in out["states"]:
            state["table"] = state_tables.get((op.id, state["name"]))
        doc["operators"].append(out)
    for raw in md.operators:  # operators StateMeta leaves out (none today), so the index stays complete
        if raw.id not in listed:
            doc["operators"].append(_operator_json(meta.storage, None, raw))
    return doc


def _operator_json(storage: Storage, op: OperatorMeta | None, raw: OperatorState) -> dict:
    out = {
        "id": raw.id,
        "uid": raw.uid,
        "name": raw.name,
        "parallelism": raw.parallelism,
        "max_parallelism": raw.max_parallelism,
        "finished": raw.finished,
        "finished_subtasks": list(raw.finished_subtasks),
        "coordinator": _stream_json(storage, raw.coordinator),
        "coordinator_bytes": op.coordinator_bytes if op else 0,
        "table": None,  # the catalog's table of all this operator's states (as JSON text)
        "unsupported": list(op.unsupported) if op else [],
        "handles": [_subtask_json(storage, s) for s in raw.subtasks],
        "in_state_meta": op is not None,
        "states": [],
    }
    if op is not None:
        handles: dict[int | None, SubtaskState] = {s.index: s for s in raw.subtasks}
        out["states"] = [_state_json(storage, op, state, handles) for state in op.states]
    return out


def _stream_json(storage: Storage, stream: StreamHandle | None) -> dict | None:
    if stream is None:
        return None
    if isinstance(stream, InlineStream):
        return {"kind": "inline", "name": stream.name, "offset": stream.offset, "length": stream.length}
    path = stream.path
    if stream.kind == "relative":
        # Relative handles resolve inside the savepoint directory: keep them relative so a moved
        # savepoint keeps a valid stateInfo.
        path = posixpath.relpath(stream.path, storage.directory)
    return {"kind": stream.kind, "path": path, "size": stream.size, "start": stream.start}


def _keyed_handle_json(storage: Storage, handle: KeyedHandle | None) -> dict | None:
    if handle is None:
        return None
    if isinstance(handle, KeyGroupsHandle):
        return {
            "type": "key_groups",
            "kind": handle.kind,
            "start_key_group": handle.start_key_group,
            "key_group_range": list(handle.key_group_range),
            "offsets": list(handle.offsets),
            "stream": _stream_json(storage, handle.stream),
        }
    if isinstance(handle, NativeRocksDBHandle):
        return {
            "type": "rocksdb_native",
            "kind": handle.kind,
            "checkpoint_id": handle.checkpoint_id,
            "backend_id": handle.backend_id,
            "start_key_group": handle.start_key_group,
            "num_key_groups": handle.num_key_groups,
            "checkpointed_size": handle.checkpointed_size,
            "meta_stream": _stream_json(storage, handle.meta_stream),
            "handle_id": handle.handle_id,
            "files": [
                {"name": f.name, "shared": f.shared, "stream": _stream_json(storage, f.stream)} for f in handle.files
            ],
        }
    return {
        "type": "unsupported",
        "kind": handle.kind,
        "start_key_group": handle.start_key_group,
        "num_key_groups": handle.num_key_groups,
        "size": handle.size,
        "reason": handle.reason,
    }


def _operator_handle_json(storage: Storage, handle: OperatorStreamHandle | None) -> dict | None:
    if handle is None:
        return None
    return {
        "type": "operator",
        "kind": handle.kind,
        "entries": [{"name": e.name, "mode": e.mode, "offsets": list(e.offsets)} for e in handle.entries],
        "stream": _stream_json(storage, handle.stream),
    }


def _subtask_json(storage: Storage, subtask: SubtaskState) -> dict:
    return {
        "subtask": subtask.index,
        "managed_operator": _operator_handle_json(storage, subtask.managed_operator),
        "raw_operator": _operator_handle_json(storage, subtask.raw_operator),
        "managed_keyed": _keyed_handle_json(storage, subtask.managed_keyed),
        "raw_keyed": _keyed_handle_json(storage, subtask.raw_keyed),
        "channel_state_handles": subtask.channel_state_handles,
    }


def _type_json(desc: TypeDescriptor | None) -> dict | None:
    if desc is None:
        return None
    return {
        "class": serializer_class(desc),
        "type": desc.to_json(),
        "sql_type": desc.sql_type(),
        "describe": desc.describe(),
    }


def _state_json(storage: Storage, op: OperatorMeta, state: StateInfo, handles: dict[int | None, SubtaskState]) -> dict:
    locations = [_location_json(storage, loc, handles.get(loc.subtask)) for loc in state.locations]
    declared = _declared(state)
    return {
        "name": state.name,
        "stored_name": declared.get("stored_name", state.name) if declared else state.name,
        "table": None,  # the catalog's table of this state, filled in with every state's name known
        "kind": state.kind,
        "state_type": state.state_type,
        "key": _type_json(state.key),
        "namespace": _type_json(state.namespace),
        "value": _type_json(state.value),
        "user_key": _type_json(state.user_key),
        "serializer_snapshots": dict(state.serializer_classes),
        "decode": {"status": state.decode_status, "reasons": state.raw_reasons},
        "declared": declared,
        "notes": list(state.notes),
        "locations": locations,
    }


def _location_json(storage: Storage, loc: KeyedLocation | OperatorLocation, subtask: SubtaskState | None) -> dict:
    """A location as a reference into the handles index when it is a handle's, else in full."""
    if isinstance(loc, KeyedLocation):
        if subtask is not None and _same_keyed(subtask.managed_keyed, loc):
            return {
                "subtask": loc.subtask,
                "handle": "managed_keyed",
                "state_id": loc.state_id,
                "state_count": loc.state_count,
                "compressed": loc.compressed,
                "header_length": loc.header_length,
                **_layout_json(loc),
            }
        return {
            "subtask": loc.subtask,
            "handle": None,
            "type": "keyed",
            "stream": _stream_json(storage, loc.stream),
            "start_key_group": loc.start_key_group,
            "offsets": list(loc.offsets),
            "state_id": loc.state_id,
            "state_count": loc.state_count,
            "compressed": loc.compressed,
            "header_length": loc.header_length,
            **_layout_json(loc),
        }
    entry = _operator_entry(subtask, loc)
    if entry is not None:
        return {
            "subtask": loc.subtask,
            "handle": "managed_operator",
            "entry": entry,
            "compressed": loc.compressed,
            "end": loc.end,
        }
    # e.g. the operator coordinator's bytes, which no subtask holds
    return {
        "subtask": loc.subtask,
        "handle": None,
        "type": "operator",
        "stream": _stream_json(storage, loc.stream),
        "offsets": list(loc.offsets),
        "compressed": loc.compressed,
        "end": loc.end,
    }


def _layout_json(loc: KeyedLocation) -> dict:
    """``layout`` only where it is not the canonical one: documents of savepoints stay as they were."""
    return {} if loc.layout == "canonical" else {"layout": loc.layout}


def _declared(state: StateInfo) -> dict | None:
    """What a descriptor file said about the state (carried in the value's pyflink descriptor)."""
    value = state.value
    desc = value.child("value") if value.kind in ("map", "broadcast_entry") else value
    if desc.kind != "pyflink":
        return None
    return {
        "stored_name": desc.attr("stored_name"),
        "type": desc.attr("declared"),
        "state_type": state.state_type,
        "source": desc.attr("source"),
    }


def _same_keyed(handle: KeyedHandle | None, loc: KeyedLocation) -> bool:
    if loc.native is not None:
        return handle == loc.native
    return (
        isinstance(handle, KeyGroupsHandle)
        and handle.stream == loc.stream
        and handle.offsets == loc.offsets
        and handle.start_key_group == loc.start_key_group
    )


def _operator_entry(subtask: SubtaskState | None, loc: OperatorLocation) -> str | None:
    handle = subtask.managed_operator if subtask else None
    if handle is not None and handle.stream == loc.stream:
        matches = [e.name for e in handle.entries if e.offsets == loc.offsets]
        if len(matches) == 1:
            return matches[0]
    return None


# ----------------------------------------------------------------------------- JSON → StateMeta


def from_state_info(doc: dict, storage: Storage) -> StateMeta:
    """Rebuilds the StateMeta a stateInfo document describes, on the savepoint at ``storage``."""
    _check_format(doc, storage.uri)
    try:
        sp = doc["savepoint"]
        operators_raw = []
        operators_meta = []
        for op in doc["operators"]:
            subtasks = tuple(_subtask_from(storage, s) for s in op["handles"])
            if not (isinstance(op["max_parallelism"], int) and 0 < op["max_parallelism"] <= MAX_KEY_GROUPS):
                raise ValueError(f"max parallelism {op['max_parallelism']!r} outside 1..{MAX_KEY_GROUPS}")
            _natural(op["parallelism"], "parallelism")
            raw = OperatorState(
                op["id"],
                op["uid"],
                op["name"],
                op["parallelism"],
                op["max_parallelism"],
                _stream_from(storage, op["coordinator"]),
                subtasks,
                op["finished"],
                tuple(op["finished_subtasks"]),
            )
            operators_raw.append(raw)
            if not op.get("in_state_meta", True):
                continue
            by_index = {s.index: s for s in subtasks}
            states = tuple([_state_from(storage, op["id"], s, by_index, raw.max_parallelism) for s in op["states"]])
            operators_meta.append(
                OperatorMeta(
                    op["id"],
                    op["uid"],
                    op["name"],
                    op["parallelism"],
                    op["max_parallelism"],
                    states,
                    op["coordinator_bytes"],
                    tuple(op["unsupported"]),
                )
            )
        metadata = CheckpointMetadata(
            storage,
            sp["metadata_version"],
            sp["checkpoint_id"],
            tuple(MasterState(m["name"], m["version"], m["size"]) for m in doc["master_states"]),
            tuple(operators_raw),
            sp["checkpoint_type"],
            sp["savepoint_format"],
            sp["metadata_file"]["size"],
        )
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, StopIteration, RecursionError) as exc:
        raise FormatError(
            f"stateInfo does not follow format version {FORMAT_VERSION}: {exc!r}",
            file=storage.uri,
            hint="Write it again with `statecat snapshot`",
        ) from exc
    return StateMeta(storage, metadata, tuple(operators_meta))


def _check_format(doc: dict, where: str) -> None:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
        raise FormatError("not a statecat stateInfo document", file=where)
    if doc.get("format_version") != FORMAT_VERSION:
        raise FormatError(
            f"stateInfo format version {doc.get('format_version')!r}; this statecat reads version {FORMAT_VERSION}",
            file=where,
            hint="Write it again with `statecat snapshot`",
        )


def _stream_from(storage: Storage, data: dict | None) -> StreamHandle | None:
    """A stream handle of the document, checked like one parsed from ``_metadata``.

    The document is not trusted more than ``_metadata``: its paths go through the same
    resolution (relative ones stay inside the savepoint; every file is confined when opened) and
    its sizes and offsets must be non-negative integers.
    """
    if data is None:
        return None
    kind = data["kind"]
    if kind == "inline":
        return InlineStream(
            str(data["name"]), _natural(data["offset"], "inline offset"), _natural(data["length"], "inline length")
        )
    path, size, start = data["path"], _natural(data["size"], "stream size"), _natural(data["start"], "stream start")
    if not isinstance(path, str):
        raise TypeError(f"stream path {path!r} is not a string")
    if kind == "relative":
        path = storage.resolve_relative(path)
    elif kind in ("file", "segment"):
        path = path if "://" in path else storage.resolve_absolute(path)
    else:
        raise ValueError(f"unknown stream kind {kind!r}")
    return FileStream(path, size, kind, start)


def _natural(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{what} {value!r} is not a non-negative integer")
    return value


def _subtask_from(storage: Storage, data: dict) -> SubtaskState:
    return SubtaskState(
        data["subtask"],
        _operator_handle_from(storage, data["managed_operator"]),
        _operator_handle_from(storage, data["raw_operator"]),
        _keyed_handle_from(storage, data["managed_keyed"]),
        _keyed_handle_from(storage, data["raw_keyed"]),
        data["channel_state_handles"],
    )


def _keyed_handle_from(storage: Storage, data: dict | None) -> KeyedHandle | None:
    if data is None:
        return None
    handle: KeyGroupsHandle | NativeRocksDBHandle
    if data["type"] == "key_groups":
        handle = KeyGroupsHandle(
            data["kind"],
            _natural(data["start_key_group"], "start key-group"),
            tuple(data["offsets"]),
            # A null stream (a damaged document) fails at .size below: AttributeError, a FormatError.
            cast(StreamHandle, _stream_from(storage, data["stream"])),
        )
        check_key_group_offsets(handle.offsets, handle.stream.size, storage.display(storage.metadata_path), None)
        return handle
    if data["type"] == "rocksdb_native":
        handle = NativeRocksDBHandle(
            data["checkpoint_id"],
            data["backend_id"],
            _natural(data["start_key_group"], "start key-group"),
            _natural(data["num_key_groups"], "key-group count"),
            data["checkpointed_size"],
            # ignore: a null stream (a damaged document) passes here, though _metadata's parser refuses one.
            _stream_from(storage, data["meta_stream"]),  # type: ignore[arg-type]
            tuple(
                RocksDBFile(f["name"], _stream_from(storage, f["stream"]), bool(f["shared"]))  # type: ignore[arg-type]
                for f in data["files"]
            ),
            data["handle_id"],
        )
        if any(not f.name or "/" in f.name for f in handle.files):
            raise ValueError("a RocksDB file name with a path separator")
        return handle
    return UnsupportedKeyedHandle(
        data["kind"], data["start_key_group"], data["num_key_groups"], data["size"], data["reason"]
    )


def _operator_handle_from(storage: Storage, data: dict | None) -> OperatorStreamHandle | None:
    if data is None:
        return None
    entries = tuple(OperatorStateEntry(e["name"], e["mode"], tuple(e["offsets"])) for e in data["entries"])
    # A null stream (a damaged document) fails at .size below when there are entries: AttributeError, a FormatError.
    stream = cast(StreamHandle, _stream_from(storage, data["stream"]))
    for entry in entries:
        check_operator_offsets(entry, stream.size, storage.display(storage.metadata_path), None)
    return OperatorStreamHandle(entries, stream, data["kind"])


def _type_from(data: dict | None) -> TypeDescriptor | None:
    return None if data is None else TypeDescriptor.from_json(data["type"])


def _state_from(
    storage: Storage, operator_id: str, data: dict, subtasks: dict[int, SubtaskState], max_parallelism: int
) -> StateInfo:
    if data["kind"] not in STATE_KINDS or not isinstance(data["name"], str):
        raise ValueError(f"state {data['name']!r} has unknown kind {data['kind']!r}")
    keyed = data["kind"] in ("keyed", "timer")
    locations: list[KeyedLocation | OperatorLocation] = []
    handle: KeyedHandle | OperatorStreamHandle | None
    offsets: tuple[int, ...]
    for loc in data["locations"]:
        subtask = loc["subtask"]
        if subtask is not None:
            _natural(subtask, "subtask")
        if loc["handle"] == "managed_keyed":
            handle = subtasks[subtask].managed_keyed
            native = handle if isinstance(handle, NativeRocksDBHandle) else None
            if native is not None:
                stream, start, offsets = native.meta_stream, native.start_key_group, ()
            elif isinstance(handle, KeyGroupsHandle):
                stream, start, offsets = handle.stream, handle.start_key_group, handle.offsets
            else:
                raise ValueError(f"subtask {subtask} has no key-groups handle")
        elif loc["handle"] == "managed_operator":
            # None (no operator handle) fails at .entries below: AttributeError, a FormatError.
            handle = cast(OperatorStreamHandle, subtasks[subtask].managed_operator)
            entries = [e for e in handle.entries if e.name == loc["entry"]]
            if len(entries) != 1:
                raise ValueError(f"subtask {subtask} has no operator state entry {loc['entry']!r}")
            stream, offsets = handle.stream, entries[0].offsets
        elif loc["type"] in ("keyed", "operator"):
            native = None
            # A null stream (a damaged document) fails at .size below: AttributeError, a FormatError.
            stream = cast(StreamHandle, _stream_from(storage, loc["stream"]))
            offsets = tuple(loc["offsets"])
            if loc["type"] == "keyed":
                start = _natural(loc["start_key_group"], "start key-group")
                check_key_group_offsets(offsets, stream.size, storage.display(storage.metadata_path), None)
            elif not all(isinstance(o, int) and 0 <= o <= stream.size for o in offsets):
                raise ValueError(f"operator state offsets {offsets} outside their {stream.size}-byte stream")
        else:
            raise ValueError(f"unknown location type {loc['type']!r}")
        if keyed != (loc["handle"] == "managed_keyed" or loc.get("type") == "keyed"):
            raise ValueError(f"a {data['kind']} state with a location of another kind")
        if not isinstance(loc["compressed"], bool):
            raise ValueError(f"compressed {loc['compressed']!r} is not a boolean")
        if keyed:
            count = native.num_key_groups if native is not None else len(offsets)
            if start + count > max_parallelism:
                raise ValueError(f"key-groups {start}..{start + count - 1} beyond max parallelism {max_parallelism}")
            state_count = _natural(loc["state_count"], "state count")
            if not _natural(loc["state_id"], "state id") < state_count:
                raise ValueError(f"state id {loc['state_id']} not below the header's {state_count} states")
            header_length = _natural(loc["header_length"], "header length")
            layout = loc.get("layout", "canonical")
            if layout not in KEY_GROUP_LAYOUTS or (layout == NATIVE_ROCKSDB_LAYOUT) != (native is not None):
                raise ValueError(f"key-group layout {layout!r} does not fit its handle")
            locations.append(
                KeyedLocation(
                    subtask,
                    stream,
                    start,
                    offsets,
                    loc["state_id"],
                    loc["compressed"],
                    header_length,
                    state_count,
                    layout,
                    native,
                )
            )
        else:
            end = _natural(loc["end"], "end")
            if end > stream.size or any(o > end for o in offsets):
                raise ValueError(f"operator state end {end} outside its stream or before its elements")
            locations.append(OperatorLocation(subtask, stream, offsets, loc["compressed"], end))
    return StateInfo(
        operator_id,
        data["name"],
        data["kind"],
        data["state_type"],
        _type_from(data["key"]),
        _type_from(data["namespace"]),
        _type_from(data["value"]),  # type: ignore[arg-type]  # a null value (a damaged document) passes unchecked
        _type_from(data["user_key"]),
        tuple(locations),
        dict(data["serializer_snapshots"]),
        tuple(data["notes"]),
    )


# ----------------------------------------------------------------------------- files


def state_info_location(storage: Storage, output_dir: str | None = None) -> tuple[pafs.FileSystem, str]:
    """Where the stateInfo of a savepoint goes: next to ``_metadata``, or into ``output_dir``."""
    if output_dir is None:
        return storage.filesystem, posixpath.join(storage.directory, STATE_INFO_FILE)
    filesystem, directory = _filesystem_for(output_dir)
    return filesystem, posixpath.join(directory, STATE_INFO_FILE)


def _filesystem_for(path: str) -> tuple[pafs.FileSystem, str]:
    path = str(path)
    if "://" in path:
        filesystem, inner = pafs.FileSystem.from_uri(path)
        return filesystem, inner.rstrip("/") or "/"
    return pafs.LocalFileSystem(), os.path.abspath(path)


def render(doc: dict) -> str:
    """Deterministic text: same document, same bytes (idempotent rewrites compare equal)."""
    return _pretty(doc) + "\n"


def _pretty(o: Any, pad: str = "") -> str:
    # Indented like json.dumps(indent=1), but lists of scalars (offsets) stay on one line.
    inner = pad + " "
    if isinstance(o, dict) and o:
        items = [f"{inner}{json.dumps(k)}: {_pretty(v, inner)}" for k, v in o.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(o, list) and o and any(isinstance(x, (dict, list)) for x in o):
        return "[\n" + ",\n".join(inner + _pretty(x, inner) for x in o) + "\n" + pad + "]"
    return json.dumps(o, ensure_ascii=False)


@dataclass(frozen=True)
class WriteResult:
    path: str  # where the stateInfo is, in the filesystem's terms
    written: bool  # False when an identical stateInfo was already there
    doc: dict


def write_state_info(
    meta: StateMeta, output_dir: str | None = None, *, descriptors: dict | None = None, taken: dict | None = None
) -> WriteResult:
    """Writes the stateInfo of ``meta`` atomically; a no-op when an identical one is there.

    "Identical" ignores ``written_at``: a re-run keeps the first write's time, so running the
    snapshotter twice leaves the file byte for byte unchanged.

    ``taken`` is when the savepoint was taken, as ``statecat savepoint`` observed it
    (``taken_at.rest_record``); without it the document records the ``_metadata`` mtime the
    snapshotter sees. A record already there for the same ``_metadata`` is kept unless ``taken``
    is given: the first observation is the one closest to the savepoint's completion.
    """
    from statecat.statemeta.snapshotter.taken_at import snapshotter_record

    filesystem, path = state_info_location(meta.storage, output_dir)
    doc = to_state_info(meta, descriptors=descriptors)
    existing = _read_json(filesystem, path, meta.storage if output_dir is None else None)
    if (
        taken is None
        and existing is not None
        and isinstance(existing.get("taken"), dict)
        and _same_metadata(existing, doc)
    ):
        taken = existing["taken"]
    taken = taken or snapshotter_record(meta.storage)
    if taken is not None:
        ordered = {}
        for key, value in doc.items():
            ordered[key] = value
            if key == "savepoint":  # near the top, not after the (long) operator list
                ordered["taken"] = taken
        doc = ordered
    if existing is not None and _comparable(existing) == _comparable(doc):
        return WriteResult(path, False, existing)
    _atomic_write(filesystem, path, render(doc).encode("utf-8"))
    return WriteResult(path, True, doc)


def _same_metadata(a: dict, b: dict) -> bool:
    try:
        return a["savepoint"]["metadata_file"] == b["savepoint"]["metadata_file"]
    except (KeyError, TypeError):
        return False


def _comparable(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in VOLATILE_FIELDS}


def _read_json(filesystem: pafs.FileSystem, path: str, storage: Storage | None = None) -> dict | None:
    """The JSON document at ``path``, or None when it is missing, not a regular file, too large or damaged.

    A savepoint's own stateInfo (``storage`` given) is read under the savepoint's confinement: a
    symbolic link named stateInfo that leaves the directory reads as no stateInfo.
    """
    try:
        if storage is not None:
            stream = storage.open(path)
        else:
            stream = open_regular_file(filesystem, path, path)
        with stream:
            if stream.file_size > MAX_STATE_INFO_BYTES:
                return None
            data = stream.read()
    except (StatecatError, OSError):
        return None
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return None  # damaged: rewritten by the caller
    return doc if isinstance(doc, dict) else None


def _atomic_write(filesystem: pafs.FileSystem, path: str, data: bytes) -> None:
    directory = posixpath.dirname(path)
    if isinstance(filesystem, pafs.LocalFileSystem):
        os.makedirs(directory, exist_ok=True)
        # Temp file in the same directory, then rename: readers see the old file or the new one.
        fd, tmp = tempfile.mkstemp(prefix=f".{STATE_INFO_FILE}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        return
    # Object stores (s3, gs, abfs) publish an object only when its upload completes, so writing
    # the final name directly is atomic there. HDFS-like stores: temp name plus rename.
    if type(filesystem).__name__ in ("S3FileSystem", "GcsFileSystem", "AzureFileSystem"):
        with filesystem.open_output_stream(path) as out:
            out.write(data)
        return
    filesystem.create_dir(directory, recursive=True)
    tmp = posixpath.join(directory, f".{STATE_INFO_FILE}.{uuid.uuid4().hex}.tmp")
    with filesystem.open_output_stream(tmp) as out:
        out.write(data)
    filesystem.move(tmp, path)


def read_state_info_file(path: str) -> dict:
    """The stateInfo document at ``path`` (the file, or a directory holding one)."""
    filesystem, inner = _filesystem_for(path)
    info = filesystem.get_file_info(inner)
    if info.type == pafs.FileType.Directory:
        inner = posixpath.join(inner, STATE_INFO_FILE)
    doc = _read_json(filesystem, inner)
    if doc is None:
        raise SavepointNotFoundError(
            "no readable stateInfo", file=str(path), hint="Write one with `statecat snapshot SAVEPOINT`"
        )
    _check_format(doc, str(path))
    return doc


def is_fresh(doc: dict, storage: Storage, fingerprint: MetadataFingerprint | None = None) -> bool:
    """Does the document describe the savepoint at ``storage`` (same ``_metadata`` bytes)?"""
    try:
        recorded = doc["savepoint"]["metadata_file"]
        if storage.size(storage.metadata_path) != recorded["size"]:
            return False  # cheap check first: no hashing when the size already differs
        fingerprint = fingerprint or metadata_fingerprint(storage)
        return fingerprint.sha256 == recorded["sha256"]
    except (KeyError, TypeError, StatecatError):
        return False


def read_state_info(
    state_info: str | None = None, savepoint: str | Storage | None = None, *, check_fresh: bool = True
) -> StateMeta:
    """The StateMeta of a stateInfo document.

    ``state_info``: the stateInfo file or the directory holding it (default: the savepoint's
    directory). ``savepoint``: the savepoint it describes (default: the path recorded in it).
    Raises ``FormatError`` when the document is stale (``_metadata`` changed since it was written).
    """
    if state_info is None and savepoint is None:
        raise ValueError("give the stateInfo path, the savepoint, or both")
    if savepoint is not None:
        storage = savepoint if isinstance(savepoint, Storage) else open_storage(savepoint)
    if state_info is None:
        state_info = storage.uri if "://" in storage.uri else storage.directory
        doc = _read_json(storage.filesystem, posixpath.join(storage.directory, STATE_INFO_FILE), storage)
        if doc is None:
            raise SavepointNotFoundError(
                "the savepoint has no readable stateInfo",
                file=storage.uri,
                hint="Write one with `statecat snapshot SAVEPOINT`",
            )
        _check_format(doc, storage.uri)
    else:
        doc = read_state_info_file(state_info)
    if savepoint is None:
        storage = open_storage(doc["savepoint"]["path"])
    if check_fresh and not is_fresh(doc, storage):
        raise FormatError(
            "stateInfo is stale: _metadata changed since it was written",
            file=str(state_info),
            hint="Write it again with `statecat snapshot SAVEPOINT`",
        )
    return from_state_info(doc, storage)


def load_fresh_state_info(storage: Storage, state_info: str | None = None) -> StateMeta | None:
    """The StateMeta of the savepoint's stateInfo when there is one that matches; else None.

    Used by ``load_state_meta``: a missing, damaged, stale or newer-format stateInfo means "derive
    from the savepoint", never an error.
    """
    try:
        if state_info is None:
            doc = _read_json(storage.filesystem, posixpath.join(storage.directory, STATE_INFO_FILE), storage)
        else:
            doc = read_state_info_file(state_info)
        if doc is None or doc.get("format") != FORMAT_NAME or doc.get("format_version") != FORMAT_VERSION:
            return None
        if not is_fresh(doc, storage) or _written_before_native_reading(doc):
            return None
        return from_state_info(doc, storage)
    except StatecatError:
        return None


def _written_before_native_reading(doc: dict) -> bool:
    """A stateInfo that recorded native RocksDB handles as unsupported (written before statecat
    read them) would hide their states: derive again instead."""
    for op in doc.get("operators") or ():
        for handles in op.get("handles") or ():
            for name in ("managed_keyed", "raw_keyed"):
                handle = handles.get(name) if isinstance(handles, dict) else None
                if (
                    isinstance(handle, dict)
                    and handle.get("type") == "unsupported"
                    and handle.get("kind") == "native-rocksdb"
                ):
                    return True
    return False


def _now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def snapshot(
    path: str | Storage,
    output_dir: str | None = None,
    *,
    descriptors: DescriptorSource | None = None,
    taken: dict | None = None,
) -> WriteResult:
    """``statecat snapshot``: derive StateMeta from ``_metadata`` + stream headers, write stateInfo.

    Always derives from the savepoint itself (never from an existing stateInfo), applying the
    descriptor file's declarations when given.
    """
    from statecat.statemeta.model import load_state_meta

    meta = load_state_meta(path, use_state_info=False)
    recorded = None
    if descriptors is not None:
        from statecat.statemeta.descriptors import apply_descriptors, as_descriptor_set

        descriptor_set = as_descriptor_set(descriptors)  # a file, a parsed document or a DescriptorSet
        meta = apply_descriptors(meta, descriptor_set)
        recorded = descriptor_set.to_json()
    return write_state_info(meta, output_dir, descriptors=recorded, taken=taken)
