"""StateMeta: one model of everything a savepoint holds, built from ``_metadata`` and stream headers.

Operators with their ids, uids, names and parallelism; each state's name, kind, key/namespace/
value types, decode status, and where its bytes are (per subtask: stream, key-group offsets or
element offsets). Reading it touches ``_metadata`` and the stream headers only, never state data.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from statecat.statemeta.errors import FormatError, LookupFailedError, did_you_mean
from statecat.statemeta.files.headers import (
    StateMetaInfo,
    StreamHeader,
    read_keyed_header,
    read_operator_header,
    read_stream_bytes,
)
from statecat.statemeta.files.metadata import (
    CheckpointMetadata,
    InlineStream,
    KeyGroupsHandle,
    NativeRocksDBHandle,
    OperatorState,
    OperatorStreamHandle,
    StreamHandle,
    UnsupportedKeyedHandle,
    read_metadata,
)
from statecat.statemeta.files.storage import Storage, open_storage
from statecat.statemeta.source_splits import ENUMERATOR_TYPE, SOURCE_READER_STATE, SPLIT_TYPE
from statecat.statemeta.types import TypeDescriptor, collapse_raw

if TYPE_CHECKING:
    from statecat.statemeta.descriptors import DescriptorSource

STATE_KINDS = ("keyed", "timer", "operator_list", "union", "broadcast", "coordinator")
# The operator coordinator's checkpoint (e.g. a FLIP-27 source's split enumerator) shown as a state.
COORDINATOR_STATE = "_coordinator"
COORDINATOR_REASON = "connector-specific bytes of the operator coordinator (e.g. a source's split enumerator)"
KEY_GROUP_PREFIX_ONE_BYTE_MAX_PARALLELISM = 128
TIMER_STATE_PREFIX = "_timer_state/"
PYFLINK_PROCESS_STATE_PREFIX = "python-state-"
# How a keyed stream lays out its key-groups: "canonical" (savepoints, and Flink 1.15's full RocksDB
# checkpoints: framed entries in state order) or "heap_checkpoint" (hashmap-backend checkpoints,
# Flink's HeapSnapshotStrategy: per key-group its id, then per state a counted section of
# unframed (namespace, key, value) entries or priority-queue elements).
HEAP_CHECKPOINT_LAYOUT = "heap_checkpoint"
# Native RocksDB files (incremental/full RocksDB checkpoints, NATIVE savepoints): one column family
# per state in SST files, read by statecat.readers.backends.native_rocksdb.
NATIVE_ROCKSDB_LAYOUT = "rocksdb_native"
KEY_GROUP_LAYOUTS = ("canonical", HEAP_CHECKPOINT_LAYOUT, NATIVE_ROCKSDB_LAYOUT)
PYFLINK_UNDECLARED_REASON = (
    "PyFlink process-mode state: Flink stores PyFlink coder bytes without a schema; pass the job's "
    "state descriptors with --descriptors FILE (or record them once with `statecat snapshot "
    "--descriptors FILE`; see STATEINFO.md)"
)

_MODE_TO_KIND = {"SPLIT_DISTRIBUTE": "operator_list", "UNION": "union", "BROADCAST": "broadcast"}


@dataclass(frozen=True)
class KeyedLocation:
    """One subtask's part of a keyed state: its stream, key-groups and the state's id in that stream."""

    subtask: int
    stream: StreamHandle
    start_key_group: int
    offsets: tuple[int, ...]
    state_id: int
    compressed: bool
    header_length: int
    # States the stream's header declares: every entry's state id in the key-groups must be below
    # it (0 = not known, e.g. built by hand).
    state_count: int = 0
    layout: str = "canonical"  # one of KEY_GROUP_LAYOUTS
    # The RocksDB instance's files for NATIVE_ROCKSDB_LAYOUT (then ``stream`` is its meta-data
    # stream and ``offsets`` is empty: key-groups are found through the SST files' indexes).
    native: NativeRocksDBHandle | None = None

    @property
    def num_key_groups(self) -> int:
        return self.native.num_key_groups if self.native is not None else len(self.offsets)

    def holds_key_group(self, key_group: int) -> bool:
        return self.start_key_group <= key_group < self.start_key_group + self.num_key_groups


@dataclass(frozen=True)
class OperatorLocation:
    """One subtask's part of an operator state: element offsets (list) or the map offset (broadcast)."""

    subtask: int | None  # None for the coordinator, which runs on the JobManager
    stream: StreamHandle
    offsets: tuple[int, ...]
    compressed: bool
    end: int  # where this state's last element ends: the next state's first offset or the stream's end


@dataclass(frozen=True)
class StateInfo:
    operator_id: str
    name: str
    kind: str  # keyed | timer | operator_list | union | broadcast
    state_type: str | None  # VALUE LIST MAP REDUCING AGGREGATING for keyed states
    key: TypeDescriptor | None
    namespace: TypeDescriptor | None
    value: TypeDescriptor
    user_key: TypeDescriptor | None  # MapState: the map's key type
    locations: tuple[KeyedLocation | OperatorLocation, ...]
    serializer_classes: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def is_keyed(self) -> bool:
        return self.kind in ("keyed", "timer")

    # Typed views for code that knows the kind of state it holds: a keyed or timer state always has
    # a key type and only keyed locations, an operator state only operator locations (the model is
    # built so). They check nothing: they say once what every such reader would otherwise cast.
    @property
    def key_type(self) -> TypeDescriptor:
        """A keyed or timer state's key type."""
        return cast(TypeDescriptor, self.key)

    @property
    def keyed_locations(self) -> tuple[KeyedLocation, ...]:
        """A keyed or timer state's locations."""
        return cast("tuple[KeyedLocation, ...]", self.locations)

    @property
    def operator_locations(self) -> tuple[OperatorLocation, ...]:
        """An operator (list, union, broadcast) state's locations."""
        return cast("tuple[OperatorLocation, ...]", self.locations)

    def _repr_html_(self) -> str:  # notebooks' rich display
        from statecat.statemeta.html import state_html

        return state_html(self)

    @property
    def raw_reasons(self) -> list[str]:
        """Why parts of the state come out as bytes: each reason once, after the serializers it
        concerns (a PyFlink MapState's key and value share theirs)."""
        serializers: dict[str, list[str]] = {}
        for part in (self.key, self.namespace, self.user_key, self.value):
            if part is not None:
                for text in part.bytes_reasons():  # "serializer: reason"
                    serializer, _, reason = text.partition(": ")
                    names = serializers.setdefault(reason, [])
                    if serializer not in names:
                        names.append(serializer)
        return [
            f"{', '.join(names)}: {reason}" if reason else ", ".join(names) for reason, names in serializers.items()
        ]

    @property
    def decode_status(self) -> str:
        """``full`` when every part decodes, ``raw`` when some part comes out as bytes."""
        return "raw" if self.raw_reasons else "full"

    @property
    def stream_bytes(self) -> int:
        """Bytes of the streams this state's data lives in (shared with the operator's other states)."""
        return sum(loc.stream.size for loc in self.locations)


@dataclass(frozen=True)
class OperatorMeta:
    id: str
    uid: str | None
    name: str | None
    parallelism: int
    max_parallelism: int
    states: tuple[StateInfo, ...]
    coordinator_bytes: int = 0
    unsupported: tuple[str, ...] = ()  # handles statecat cannot read, with reasons

    @property
    def label(self) -> str:
        """How messages and tables name the operator: uid, else name, else id."""
        return self.uid or self.name or self.id

    def _repr_html_(self) -> str:  # notebooks' rich display
        from statecat.statemeta.html import operator_html

        return operator_html(self)

    @property
    def key_group_prefix_bytes(self) -> int:
        return 1 if self.max_parallelism <= KEY_GROUP_PREFIX_ONE_BYTE_MAX_PARALLELISM else 2

    def state(self, name: str) -> StateInfo:
        """A state by name, or by another name of it (``statemeta.naming.matching_states``)."""
        for state in self.states:
            if state.name == name:
                return state
        return _one_state(name, [(self, s) for s in self.states], None, f"operator {self.label}")[1]


@dataclass(frozen=True)
class StateMeta:
    storage: Storage
    metadata: CheckpointMetadata
    operators: tuple[OperatorMeta, ...]

    @property
    def path(self) -> str:
        return self.storage.uri

    def _repr_html_(self) -> str:  # notebooks' rich display
        from statecat.statemeta.html import state_meta_html

        return state_meta_html(self)

    @property
    def checkpoint_id(self) -> int:
        return self.metadata.checkpoint_id

    def operator(self, ref: str) -> OperatorMeta:
        """An operator by id (hex), uid or name."""
        matches = [op for op in self.operators if ref in (op.id, op.uid, op.name)]
        if not matches:
            # _metadata before Flink 2.0 keeps no uids, but an operator's id is derived from its uid.
            matches = [op for op in self.operators if op.id == operator_id_for_uid(ref)]
        if len(matches) == 1:
            return matches[0]
        labels = [op.label for op in self.operators]
        if not matches:
            raise LookupFailedError(
                f"unknown operator {ref!r} in savepoint {self.path}",
                hint=did_you_mean(ref, labels + [op.id for op in self.operators]),
            )
        raise LookupFailedError(
            f"operator {ref!r} is ambiguous in savepoint {self.path}",
            hint="Use the operator id: " + ", ".join(op.id for op in matches),
        )

    def find_state(self, state: str, operator: str | None = None) -> tuple[OperatorMeta, StateInfo]:
        """A state by name, or by another name of it (``statemeta.naming.matching_states``), in the
        savepoint or in the named operator."""
        if operator is not None:
            op = self.operator(operator)
            return _one_state(state, [(op, s) for s in op.states], self, f"operator {op.label}")
        return _one_state(state, list(self.states()), self, f"savepoint {self.path}")

    def states(self) -> Iterator[tuple[OperatorMeta, StateInfo]]:
        for op in self.operators:
            for state in op.states:
                yield op, state


def _one_state(
    name: str, states: list[tuple[OperatorMeta, StateInfo]], meta: StateMeta | None, where: str
) -> tuple[OperatorMeta, StateInfo]:
    from statecat.statemeta.naming import matching_states  # naming builds on this module

    found = matching_states(name, states, meta)
    if len(found) == 1:
        return found[0]
    if not found:
        raise LookupFailedError(
            f"unknown state {name!r} in {where}", hint=did_you_mean(name, [s.name for _, s in states])
        )
    if len({op.id for op, _ in found}) > 1:
        candidates = ", ".join(f"{op.label} (id {op.id})" for op, _ in found)
        raise LookupFailedError(
            f"state {name!r} exists in several operators: {candidates}",
            hint="Name the operator with --operator ID|UID|NAME",
        )
    raise LookupFailedError(
        f"state name {name!r} matches several states in {where}: " + ", ".join(repr(s.name) for _, s in found),
        hint="Give the state's name exactly as Flink wrote it",
    )


def load_state_meta(
    path: str | Storage,
    *,
    use_state_info: bool = True,
    state_info: str | None = None,
    descriptors: DescriptorSource | None = None,
    allowed_roots: Iterable[str | os.PathLike[str]] | None = None,
) -> StateMeta:
    """The StateMeta of a savepoint: from its stateInfo when one matches ``_metadata``, else derived.

    ``state_info`` names a stateInfo written elsewhere (``statecat snapshot --output``);
    ``descriptors`` (a descriptor file or DescriptorSet) applies declared types to a derived
    StateMeta (a matching stateInfo already carries the ones it was written with).
    ``allowed_roots`` (paths or URIs) widens where state handles may point beyond the snapshot's
    own directory, like ``STATECAT_ALLOWED_ROOTS`` (see ``storage.Storage.confine``).
    """
    if isinstance(path, Storage):
        storage = path if not allowed_roots else path.with_allowed_roots(allowed_roots)
    else:
        storage = open_storage(path, allowed_roots=allowed_roots)
    if use_state_info:
        from statecat.statemeta.snapshotter.stateinfo import load_fresh_state_info

        meta = load_fresh_state_info(storage, state_info)
        if meta is not None and descriptors is None:
            return meta
    metadata = read_metadata(storage)
    meta = StateMeta(storage, metadata, tuple(_operator_meta(storage, op) for op in metadata.operators))
    if descriptors is not None:
        from statecat.statemeta.descriptors import apply_descriptors

        meta = apply_descriptors(meta, descriptors)
    return meta


def _operator_meta(storage: Storage, op: OperatorState) -> OperatorMeta:
    keyed: dict[str, tuple[StateMetaInfo, TypeDescriptor, list[KeyedLocation]]] = {}
    operator: dict[str, tuple[StateMetaInfo, list[OperatorLocation]]] = {}
    unsupported: list[str] = []
    for subtask in op.subtasks:
        for handle in (subtask.managed_keyed, subtask.raw_keyed):
            if isinstance(handle, UnsupportedKeyedHandle):
                unsupported.append(
                    f"subtask {subtask.index}, key-groups {handle.start_key_group}.."
                    f"{handle.start_key_group + handle.num_key_groups - 1}: {handle.reason}"
                )
        if subtask.raw_keyed is not None and not isinstance(subtask.raw_keyed, UnsupportedKeyedHandle):
            unsupported.append(f"subtask {subtask.index}: raw keyed state is user-defined bytes without a schema")
        if isinstance(subtask.managed_keyed, KeyGroupsHandle):
            _collect_keyed(storage, subtask.index, subtask.managed_keyed, keyed)
        elif isinstance(subtask.managed_keyed, NativeRocksDBHandle):
            _collect_native(storage, subtask.index, subtask.managed_keyed, keyed)
        if subtask.managed_operator is not None:
            _collect_operator(storage, subtask.index, subtask.managed_operator, operator)
        if subtask.raw_operator is not None:
            unsupported.append(f"subtask {subtask.index}: raw operator state is user-defined bytes without a schema")
    states = [_keyed_state(op.id, info, key, locs) for info, key, locs in keyed.values()]
    states += [_operator_state(op.id, info, locs) for info, locs in operator.values()]
    if op.coordinator is not None:
        # A source's split enumerator checkpoint, decoded where its connector is known
        # (statecat.readers.codecs.source_splits); other coordinators keep raw bytes and the reason.
        blob = ENUMERATOR_TYPE
        location = OperatorLocation(None, op.coordinator, (0,), False, op.coordinator.size)
        states.append(StateInfo(op.id, COORDINATOR_STATE, "coordinator", None, None, None, blob, None, (location,)))
    states.sort(key=lambda s: (STATE_KINDS.index(s.kind), s.name))
    return OperatorMeta(
        op.id,
        op.uid,
        op.name,
        op.parallelism,
        op.max_parallelism,
        tuple(states),
        op.coordinator.size if op.coordinator else 0,
        tuple(unsupported),
    )


def _collect_keyed(
    storage: Storage,
    subtask: int,
    handle: KeyGroupsHandle,
    into: dict[str, tuple[StateMetaInfo, TypeDescriptor, list[KeyedLocation]]],
) -> None:
    header: StreamHeader = read_keyed_header(storage, handle.stream, list(handle.offsets))
    layout = key_group_layout(storage, handle)
    for state_id, info in enumerate(header.states):
        location = KeyedLocation(
            subtask,
            handle.stream,
            handle.start_key_group,
            handle.offsets,
            state_id,
            header.compressed,
            header.length,
            len(header.states),
            layout,
        )
        if info.name in into:
            into[info.name][2].append(location)
        else:
            # A keyed header always has its key serializer (only operator headers have none).
            into[info.name] = (info, cast(TypeDescriptor, header.key), [location])


def _collect_native(
    storage: Storage,
    subtask: int,
    handle: NativeRocksDBHandle,
    into: dict[str, tuple[StateMetaInfo, TypeDescriptor, list[KeyedLocation]]],
) -> None:
    """A RocksDB instance's states: the meta-data stream is the keyed proxy header alone."""
    header: StreamHeader = read_keyed_header(storage, handle.meta_stream, [])
    for state_id, info in enumerate(header.states):
        # ``compressed`` stays False: the header's flag is about canonical key-group streams, and
        # SST blocks carry their own compression.
        location = KeyedLocation(
            subtask,
            handle.meta_stream,
            handle.start_key_group,
            (),
            state_id,
            False,
            header.length,
            len(header.states),
            NATIVE_ROCKSDB_LAYOUT,
            handle,
        )
        if info.name in into:
            into[info.name][2].append(location)
        else:
            # A keyed header always has its key serializer (only operator headers have none).
            into[info.name] = (info, cast(TypeDescriptor, header.key), [location])


def key_group_layout(storage: Storage, handle: KeyGroupsHandle) -> str:
    """The layout of a key-groups handle's data (see KEY_GROUP_LAYOUTS).

    Tag 12 (checkpoint) handles are written by the heap backend, and in Flink 1.15 also by RocksDB's
    full checkpoints in the canonical layout. Tag 3 (legacy) handles, Flink 1.14's and before, hold
    RocksDB's full snapshots (canonical) or the heap backend's checkpoints and, until 1.12, its
    savepoints, in the heap's own layout (Flink 1.13 gave savepoints tag 7 and one format,
    FLINK-20978 and FLINK-21206). The heap writes every key-group of its range (no
    offset is 0) and starts each with its id as an i32; a canonical key-group starts with a u16
    state id and the first key's i32 length, which could only read as the key-group's id for
    key-group 0, so the first two key-groups are checked."""
    if handle.kind == "savepoint" or not handle.offsets or 0 in handle.offsets:
        return "canonical"
    for i, offset in enumerate(handle.offsets[:2]):
        data, _, _ = read_stream_bytes(storage, handle.stream, offset, 4)
        if int.from_bytes(data, "big", signed=True) != handle.start_key_group + i:
            return "canonical"
    return HEAP_CHECKPOINT_LAYOUT


def _collect_operator(
    storage: Storage,
    subtask: int,
    handle: OperatorStreamHandle,
    into: dict[str, tuple[StateMetaInfo, list[OperatorLocation]]],
) -> None:
    all_offsets = [o for entry in handle.entries for o in entry.offsets]
    header = read_operator_header(storage, handle.stream, all_offsets)
    infos = {info.name: info for info in header.states + header.broadcast_states}
    for entry in handle.entries:
        info = infos.get(entry.name)
        if info is None:
            # Its elements would be silently missing from every result: a damaged name or header.
            file = storage.display(
                storage.metadata_path if isinstance(handle.stream, InlineStream) else handle.stream.path
            )
            raise FormatError(
                f"operator state {entry.name!r} of subtask {subtask} (listed in _metadata) has no "
                f"meta info in its stream's header, which declares "
                f"{sorted(infos) or 'no states'}",
                file=file,
                offset=handle.stream.offset if isinstance(handle.stream, InlineStream) else handle.stream.start,
                hint="The _metadata file or the state file is damaged",
            )
        last = max(entry.offsets, default=0)
        end = min((o for o in all_offsets if o > last), default=handle.stream.size)
        location = OperatorLocation(subtask, handle.stream, entry.offsets, header.compressed, end)
        if entry.name in into:
            into[entry.name][1].append(location)
        else:
            into[entry.name] = (info, [location])


def _classes(info: StateMetaInfo) -> dict[str, str]:
    return {k: v.describe() for k, v in info.serializers.items()}


def _keyed_state(
    operator_id: str, info: StateMetaInfo, key: TypeDescriptor, locations: list[KeyedLocation]
) -> StateInfo:
    serializers = info.serializers
    value = serializers.get("VALUE_SERIALIZER") or TypeDescriptor.raw("<none>", "the state has no value serializer")
    notes = []
    if info.backend_type == "PRIORITY_QUEUE":
        if value.kind == "timer":
            return StateInfo(
                operator_id,
                info.name,
                "timer",
                None,
                collapse_raw(value.child("key")),
                collapse_raw(value.child("namespace")),
                TypeDescriptor.of("long"),
                None,
                tuple(locations),
                _classes(info),
            )
        # An element statecat cannot decode holds key, namespace and payload in one blob: the whole
        # element is the raw value.
        reason = "; ".join(value.raw_reasons()) or "priority queue elements other than timers are not decoded"
        element = TypeDescriptor.raw(value.attr("serializer") or value.describe(), reason)
        return StateInfo(
            operator_id, info.name, "timer", None, element, None, element, None, tuple(locations), _classes(info)
        )
    state_type = info.options.get("KEYED_STATE_TYPE")
    namespace = serializers.get("NAMESPACE_SERIALIZER") or TypeDescriptor.of("void_namespace")
    user_key = None
    key, namespace = collapse_raw(key), collapse_raw(namespace)
    if state_type == "MAP":
        if value.kind == "map":
            user_key = collapse_raw(value.child("key"))
            value = TypeDescriptor.of("map", [("key", user_key), ("value", collapse_raw(value.child("value")))])
        else:
            notes.append(f"MapState with a {value.kind} serializer")
            # An unreadable serializer keeps its own reason (e.g. the unknown class inside it). The map's
            # shape stays: each user key ends its entry's composite key and each value is its entry's
            # value, so a key's entries are bytes, one per user key.
            reason = "; ".join(value.raw_reasons()) or "MapState whose serializer is not a MapSerializer"
            user_key = TypeDescriptor.raw(f"{value.describe()} (map key)", reason)
            value = TypeDescriptor.of(
                "map", [("key", user_key), ("value", TypeDescriptor.raw(f"{value.describe()} (map value)", reason))]
            )
    elif state_type == "LIST" and value.kind != "list":
        value = TypeDescriptor.raw(
            value.describe(), "; ".join(value.raw_reasons()) or "ListState whose serializer is not a ListSerializer"
        )
    else:
        value = collapse_raw(value)
    if info.backend_type == "KEY_VALUE_V2":
        notes.append("state of the async (v2) state API")
    if info.name.startswith(PYFLINK_PROCESS_STATE_PREFIX):
        # Java holds PyFlink coder bytes here; only the job's descriptors say what they encode.
        if state_type == "MAP":  # keep the map shape: user keys sit in the key bytes, one row per key
            user_key = TypeDescriptor.raw("ByteArrayWrapperSerializer", PYFLINK_UNDECLARED_REASON)
            value = TypeDescriptor.of(
                "map",
                [
                    ("key", user_key),
                    ("value", TypeDescriptor.raw("BytePrimitiveArraySerializer", PYFLINK_UNDECLARED_REASON)),
                ],
            )
        else:
            value = TypeDescriptor.raw(value.describe(), PYFLINK_UNDECLARED_REASON)
    return StateInfo(
        operator_id,
        info.name,
        "keyed",
        state_type,
        key,
        namespace,
        value,
        user_key,
        tuple(locations),
        _classes(info),
        tuple(notes),
    )


def _operator_state(operator_id: str, info: StateMetaInfo, locations: list[OperatorLocation]) -> StateInfo:
    mode = info.options.get(
        "OPERATOR_STATE_DISTRIBUTION_MODE", "BROADCAST" if info.backend_type == "BROADCAST" else "SPLIT_DISTRIBUTE"
    )
    kind = _MODE_TO_KIND.get(mode, "operator_list")
    serializers = info.serializers
    value = serializers.get("VALUE_SERIALIZER") or TypeDescriptor.raw("<none>", "the state has no value serializer")
    if kind == "broadcast":
        key = serializers.get("KEY_SERIALIZER") or TypeDescriptor.raw("<none>", "the state has no key serializer")
        value = TypeDescriptor.of("broadcast_entry", [("key", collapse_raw(key)), ("value", collapse_raw(value))])
    elif info.name == SOURCE_READER_STATE and value.kind == "bytes":
        # A FLIP-27 source's splits: decoded for known connectors (statemeta.source_splits).
        value = SPLIT_TYPE
    else:
        value = collapse_raw(value)
    notes: tuple[str, ...] = ()
    if info.name.startswith(PYFLINK_PROCESS_STATE_PREFIX) and kind == "broadcast":
        # Java frames each entry's key and value as byte arrays of PyFlink coder bytes: readable as
        # bytes; their types come from the job's descriptors.
        value = TypeDescriptor.of(
            "broadcast_entry", [("key", TypeDescriptor.of("bytes")), ("value", TypeDescriptor.of("bytes"))]
        )
        notes = (PYFLINK_UNDECLARED_REASON,)
    return StateInfo(
        operator_id, info.name, kind, None, None, None, value, None, tuple(locations), _classes(info), notes
    )


def operator_id_for_uid(uid: str) -> str:
    """Flink's OperatorID for a uid: MurmurHash3 x64 128-bit (seed 0) of the uid's UTF-8 bytes."""
    import mmh3

    return mmh3.hash_bytes(uid.encode("utf-8"), 0, True).hex()


STATE_META_TABLE = "state_meta"


def sql_name(text: str) -> str:
    name = re.sub(r"[^0-9a-zA-Z]+", "_", text).strip("_").lower()
    return name or "unnamed"
