"""Writes a canonical savepoint from any snapshot statecat reads: the inverse of the scanners.

    from statecat.writers.savepoint_writer import write_savepoint

    write_savepoint("/checkpoints/<job>/chk-42", "/savepoints/pinned")           # pin a checkpoint
    write_savepoint(src, dst, drop_operators=["old-sink"], set_uids={"a1b2…": "my-uid"})

Output is one canonical savepoint (``_metadata`` in SRC's metadata version, keyed state as
KeyGroupsSavepointStateHandles, streams inline or in files next to ``_metadata``). Flink restores
it into either state backend.

What is not edited keeps its bytes: an untouched canonical stream is copied whole, an untouched
key-group of an edited stream is copied as a byte range, operator state streams are copied whole.
A native RocksDB instance becomes canonical by re-framing its column families' entries (the keys
and values are already canonical bytes); a heap checkpoint by splitting its unframed entries with
the states' decoders. Edits (``StateEditor``) see and return one key-group's entries at a time,
so memory stays bounded by a key-group.

Nothing is written in SRC, and nothing a user owns is lost. DST is built in a hidden sibling
directory (``.DST.statecat-write-XXXXXXXX``, see temp_dirs.py) and renamed into place last (publish.py): readers
see no DST or a whole one. An error, SIGINT or SIGTERM removes the hidden directory; one SIGKILL
left is removed by the next write into the same parent. ``overwrite`` replaces only a savepoint
(``_metadata``, ``stateInfo`` and Flink's UUID-named state files, nothing else), checked before
anything is written and removed only once the new one is in place. DST's directory and files get
the permissions Flink's have under the umask (0777 and 0666 less it).

DST may be an object-store URI (``s3://bucket/prefix``): it is built in the system's temporary
directory and uploaded with ``_metadata`` last (object_store.py); it must not exist, and
``overwrite`` is refused there (no rename).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from statecat.readers.backends.framing import Entry, Runs, frame_runs, key_group_ends, parse_runs
from statecat.readers.backends.streams import decompress_snappy_framed
from statecat.statemeta.errors import StatecatError, UnsupportedError
from statecat.statemeta.files.headers import (
    FIRST_KEYED_PROXY_WITH_COMPRESSION,
    SNAPPY_STREAM_IDENTIFIER,
    open_stream,
    read_stream_bytes,
)
from statecat.statemeta.files.metadata import (
    METADATA_VERSION_RELEASES,
    KeyGroupsHandle,
    NativeRocksDBHandle,
    OperatorStateEntry,
    OperatorStreamHandle,
    StreamHandle,
    SubtaskState,
    UnsupportedKeyedHandle,
)
from statecat.statemeta.files.storage import METADATA_FILE
from statecat.statemeta.model import (
    HEAP_CHECKPOINT_LAYOUT,
    KEY_GROUP_PREFIX_ONE_BYTE_MAX_PARALLELISM,
    NATIVE_ROCKSDB_LAYOUT,
    KeyedLocation,
    OperatorLocation,
    OperatorMeta,
    StateInfo,
    StateMeta,
    load_state_meta,
    operator_id_for_uid,
)
from statecat.statemeta.snapshotter.stateinfo import STATE_INFO_FILE
from statecat.writers.metadata_writer import (
    InlineData,
    KeyGroupsOut,
    OperatorOut,
    OperatorStreamOut,
    SubtaskOut,
    write_metadata,
)
from statecat.writers.object_store import ObjectStoreTarget, is_object_store
from statecat.writers.output import INLINE_THRESHOLD, Output, StoredSpan, read_all
from statecat.writers.publish import (
    _explained,
    _make_temp_dir,
    _make_upload_dir,
    _publish,
    check_destination,
    destination_display,
)
from statecat.writers.temp_dirs import remove_temp_dir, signals_raise

log = logging.getLogger(__name__)

# KeyGroupRangeAssignment.UPPER_BOUND_MAX_PARALLELISM
MAX_MAX_PARALLELISM = 1 << 15
# Re-keyed entries wait in this many spill files, each a contiguous range of new key-groups:
# memory holds one file's entries at a time.
REKEY_BUCKETS = 256
# The keyed proxy header: i32 version, then (version >= 4) the key-group compression flag.
COMPRESSION_FLAG_OFFSET = 4


class StateEditor(Protocol):
    """Changes some states; the SQL layer builds one from statements. The writer asks it which
    key-groups and operator states it changes, and copies everything else untouched."""

    def key_groups(self, operator_id: str) -> frozenset[int]:
        """The key-groups of the operator this editor changes (others are copied untouched)."""
        ...

    def edit(self, operator: OperatorMeta, key_group: int, entries: dict[str, list[Entry]]) -> dict[str, list[Entry]]:
        """The new entries of one key-group, by state name (composite keys with their key-group
        prefix, values as the state stores them). States left out of the result are unchanged."""
        ...

    def operator_states(self, operator_id: str) -> frozenset[str]:
        """The operator (list, union, broadcast) states of the operator this editor changes; the
        name ``COORDINATOR_STATE`` stands for the source coordinator's checkpoint."""
        ...

    def edit_elements(
        self, operator: OperatorMeta, state: str, subtask: int | None, elements: list[bytes]
    ) -> list[bytes]:
        """The new elements of an operator state on one subtask (a broadcast state: one element, the
        serialized map; the coordinator: one element, its checkpoint bytes, subtask None)."""
        ...


@dataclass(frozen=True)
class KeyedJob:
    """One subtask's keyed stream to rebuild: the unit a parallel writer hands to a worker."""

    operator_id: str
    subtask: int


# Rebuilds keyed streams into the directory being written; returns each one's handle and the
# counts of what it copied and rebuilt. The default runs them one after the other in-process;
# catalog.spark.edits runs them as Spark tasks.
KeyedRunner = Callable[[list[KeyedJob], str], dict[KeyedJob, tuple[KeyGroupsOut, dict[str, int]]]]
COUNTS = ("streams_copied", "streams_rebuilt", "key_groups_copied", "key_groups_rebuilt", "bytes_written")


# The coordinator's checkpoint as an editable "state" (statemeta names its table the same way).
COORDINATOR_STATE = "_coordinator"


@dataclass
class WriteSummary:
    source: str
    destination: str
    metadata_version: int
    operators: int
    dropped: list[str] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)  # old operator id -> new
    streams_copied: int = 0
    streams_rebuilt: int = 0
    key_groups_copied: int = 0
    key_groups_rebuilt: int = 0
    bytes_written: int = 0


def write_savepoint(
    source: str | StateMeta,
    destination: str,
    *,
    drop_operators: Iterable[str] = (),
    set_uids: Mapping[str, str] | None = None,
    editor: StateEditor | None = None,
    max_parallelism: int | None = None,
    overwrite: bool = False,
    provenance: dict | None = None,
    keyed_runner: KeyedRunner | None = None,
) -> WriteSummary:
    """Writes ``source`` (any snapshot statecat reads) as a canonical savepoint at ``destination``.

    ``drop_operators``: operators (id, uid or name) whose state is left out. ``set_uids``:
    operator (id, uid or name) -> new uid; the operator id becomes the one Flink derives from it.
    ``max_parallelism``: every operator's new max parallelism; keyed state moves to the key-groups
    Flink assigns its keys under it. ``provenance`` is recorded in DST's stateInfo. ``overwrite``:
    replace DST if it is a savepoint and nothing else (anything else raises before anything is
    written). SIGINT and SIGTERM raise ``Interrupted`` here (main thread only), after the cleanup."""
    meta = source if isinstance(source, StateMeta) else load_state_meta(source)
    if not meta.storage.is_local:
        raise UnsupportedError(f"writing from {meta.path} is not supported yet: copy the snapshot to a local directory")
    remote = ObjectStoreTarget.of(destination) if is_object_store(destination) else None
    target = destination_display(destination)
    check_destination(meta, destination, overwrite)
    dropped = {meta.operator(ref).id for ref in drop_operators}
    renames = {meta.operator(ref).id: uid for ref, uid in (set_uids or {}).items()}
    if max_parallelism is not None:
        _check_max_parallelism(meta, max_parallelism, dropped)
    summary = WriteSummary(meta.path, target, meta.metadata.version, 0)
    with signals_raise() as signals:
        temp, published = None, False
        try:
            with signals.hold():  # held until temp is known, so that its cleanup below cannot miss it
                temp = _make_temp_dir(target) if remote is None else _make_upload_dir(target)
            signals.check()
            # Made here, not by mkdtemp (0700): Flink's savepoint directories get 0777 less the umask.
            work = os.path.join(temp, "savepoint")
            os.mkdir(work)
            _write_into(work, meta, summary, dropped, renames, editor, max_parallelism, keyed_runner)
            _write_state_info(work, provenance)
            if remote is not None:
                remote.upload(work, signals)
                published = True
            with signals.hold():  # once renamed DST is whole: a signal now is delivered after the cleanup
                if remote is None:
                    _publish(work, target, overwrite)
                    published = True
                remove_temp_dir(temp)
        except BaseException as exc:
            if temp is not None:
                with signals.hold():
                    remove_temp_dir(temp)
            explained = None if published else _explained(exc, target, temp, remote)
            if explained is None:
                raise
            raise explained from None
    return summary


def _write_into(
    work: str,
    meta: StateMeta,
    summary: WriteSummary,
    dropped: set[str],
    renames: dict[str, str],
    editor: StateEditor | None,
    max_parallelism: int | None,
    keyed_runner: KeyedRunner | None,
) -> None:
    """The savepoint's streams and ``_metadata``, into the directory ``work``."""
    with Output(work, summary) as out:
        prebuilt: dict[KeyedJob, tuple[KeyGroupsOut, dict[str, int]]] = {}
        if keyed_runner is not None:
            jobs = _keyed_jobs(meta, dropped, editor, max_parallelism)
            prebuilt = keyed_runner(jobs, work) if jobs else {}
            for _, counts in prebuilt.values():
                for name in COUNTS:
                    setattr(summary, name, getattr(summary, name) + counts.get(name, 0))
        operators: list[OperatorOut] = []
        taken_ids = {op.id for op in meta.metadata.operators if op.id not in dropped and op.id not in renames}
        for raw in meta.metadata.operators:
            if raw.id in dropped:
                summary.dropped.append(raw.id)
                continue
            operator_meta = next((op for op in meta.operators if op.id == raw.id), None)
            new_uid = renames.get(raw.id)
            new_id = operator_id_for_uid(new_uid) if new_uid is not None else raw.id
            if new_uid is not None:
                if new_id in taken_ids:
                    raise UnsupportedError(
                        f"uid {new_uid!r} gives operator id {new_id}, which another operator of the savepoint has",
                        hint="Choose a uid no other operator uses, or drop that operator",
                    )
                taken_ids.add(new_id)
                summary.renamed[raw.id] = new_id
            new_max = raw.max_parallelism if max_parallelism is None else max_parallelism
            if new_max != raw.max_parallelism and any(s.managed_keyed is not None for s in raw.subtasks):
                if operator_meta is None:
                    raise UnsupportedError(f"operator {raw.id}: its keyed state's header could not be read")
                subtasks = _Rekey(meta, operator_meta, raw.subtasks, raw.parallelism, new_max, editor, out).run()
            else:
                subtasks = tuple(
                    _subtask(meta, operator_meta, raw.id, s, editor, out, prebuilt.get(KeyedJob(raw.id, s.index)))
                    for s in raw.subtasks
                )
            operators.append(
                OperatorOut(
                    new_id,
                    new_uid if new_uid is not None else raw.uid,
                    raw.name,
                    raw.parallelism,
                    new_max,
                    _coordinator(meta, operator_meta, raw.coordinator, editor, out),
                    subtasks,
                    raw.finished,
                    raw.finished_subtasks,
                )
            )
        summary.operators = len(operators)
        metadata = write_metadata(meta.metadata.version, meta.metadata.checkpoint_id, operators)
        out.wait_synced()  # Flink's order: every stream durable before the _metadata naming it
        out.write_file(METADATA_FILE, metadata)


def _check_max_parallelism(meta: StateMeta, max_parallelism: int, dropped: set[str]) -> None:
    if not 1 <= max_parallelism <= MAX_MAX_PARALLELISM:
        raise UnsupportedError(
            f"expected a max parallelism between 1 and {MAX_MAX_PARALLELISM} (Flink's bounds), got {max_parallelism}"
        )
    for raw in meta.metadata.operators:
        if raw.id in dropped:
            continue
        if raw.parallelism > max_parallelism:
            raise UnsupportedError(
                f"operator {raw.name or raw.id} runs at parallelism {raw.parallelism}, above the max parallelism "
                f"{max_parallelism} asked for",
                hint="A max parallelism is at least every operator's parallelism",
            )
        if any(s.raw_keyed is not None for s in raw.subtasks):
            raise UnsupportedError(
                f"operator {raw.name or raw.id} has raw keyed state (the job's own bytes), which cannot be moved "
                f"to new key-groups"
            )


def _write_state_info(work: str, provenance: dict | None) -> None:
    from statecat.statemeta.snapshotter.stateinfo import to_state_info

    doc = to_state_info(load_state_meta(work, use_state_info=False))
    if provenance is not None:
        doc["provenance"] = provenance
    import json

    with open(os.path.join(work, STATE_INFO_FILE), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")


# ----------------------------------------------------------------------------- subtasks


def _subtask(
    meta: StateMeta,
    operator: OperatorMeta | None,
    operator_id: str,
    subtask: SubtaskState,
    editor: StateEditor | None,
    out: Output,
    prebuilt: tuple[KeyGroupsOut, dict[str, int]] | None = None,
) -> SubtaskOut:
    return SubtaskOut(
        subtask.index,
        _operator_handle(meta, subtask.managed_operator, out, operator, subtask.index, editor),
        _operator_handle(meta, subtask.raw_operator, out),
        prebuilt[0] if prebuilt is not None else _keyed(meta, operator, operator_id, subtask, editor, out),
        _raw_keyed(meta, operator_id, subtask, out),
    )


def _needs_rebuild(operator: OperatorMeta | None, subtask: SubtaskState, editor: StateEditor | None) -> bool:
    """Whether a subtask's keyed stream is rebuilt (converted or edited) rather than copied whole."""
    handle = subtask.managed_keyed
    if handle is None or isinstance(handle, UnsupportedKeyedHandle) or operator is None:
        return False
    if isinstance(handle, NativeRocksDBHandle):
        return True
    states = _stream_states(operator, subtask.index, handle.stream)
    if states is not None and states.layout != "canonical":
        return True
    first, last = handle.key_group_range
    touched = editor.key_groups(operator.id) if editor is not None else frozenset()
    return any(first <= g <= last for g in touched)


def _keyed_jobs(
    meta: StateMeta, dropped: set[str], editor: StateEditor | None, max_parallelism: int | None
) -> list[KeyedJob]:
    jobs = []
    for raw in meta.metadata.operators:
        if raw.id in dropped or (max_parallelism is not None and max_parallelism != raw.max_parallelism):
            continue  # re-keying moves entries across subtasks: the driver does it
        operator = next((op for op in meta.operators if op.id == raw.id), None)
        jobs += [KeyedJob(raw.id, s.index) for s in raw.subtasks if _needs_rebuild(operator, s, editor)]
    return jobs


def rebuild_keyed_stream(
    meta: StateMeta, job: KeyedJob, editor: StateEditor | None, directory: str
) -> tuple[KeyGroupsOut, dict[str, int]]:
    """One subtask's keyed stream rebuilt into ``directory`` (a worker's share of a parallel write)."""
    operator = next(op for op in meta.operators if op.id == job.operator_id)
    raw = next(op for op in meta.metadata.operators if op.id == job.operator_id)
    subtask = next(s for s in raw.subtasks if s.index == job.subtask)
    summary = WriteSummary(meta.path, directory, meta.metadata.version, 0)
    with Output(directory, summary) as out:
        handle = _keyed(meta, operator, job.operator_id, subtask, editor, out)
    if handle is None:
        raise UnsupportedError(f"operator {operator.label} subtask {job.subtask} has no keyed state to rebuild")
    return handle, {name: getattr(summary, name) for name in COUNTS}


def _coordinator(
    meta: StateMeta,
    operator: OperatorMeta | None,
    handle: StreamHandle | None,
    editor: StateEditor | None,
    out: Output,
) -> InlineData | None:
    if handle is None:
        return None
    copied = out.inline_copy(meta, handle)
    if editor is None or operator is None or COORDINATOR_STATE not in editor.operator_states(operator.id):
        return copied
    (data,) = editor.edit_elements(operator, COORDINATOR_STATE, None, [copied.data])
    return InlineData(copied.name, data)


def _operator_handle(
    meta: StateMeta,
    handle: OperatorStreamHandle | None,
    out: Output,
    operator: OperatorMeta | None = None,
    subtask: int | None = None,
    editor: StateEditor | None = None,
) -> OperatorStreamOut | None:
    if handle is None:
        return None
    edited = editor.operator_states(operator.id) if editor is not None and operator is not None else frozenset()
    if operator is None or not edited & {e.name for e in handle.entries}:
        return OperatorStreamOut(handle.entries, out.copy(meta, handle.stream))
    return _rewrite_operator_stream(meta, operator, subtask, handle, edited, editor, out)


def _edit_compressed(
    operator: OperatorMeta,
    state: str,
    subtask: int | None,
    elements: list[bytes],
    editor: StateEditor,
    meta: StateMeta,
) -> list[bytes]:
    """Edits elements of a snappy-compressed operator stream: Flink flushes the framed stream at
    every element, so each element is whole chunks; an edited one is compressed again on its own."""
    import cramjam

    plain = [decompress_snappy_framed(e, meta.storage.display(meta.storage.metadata_path), 0) for e in elements]
    stored = {id(p): e for p, e in zip(plain, elements)}
    out = []
    for element in editor.edit_elements(operator, state, subtask, plain):
        original = stored.get(id(element))
        if original is not None:
            out.append(original)
            continue
        framed = bytes(cramjam.snappy.compress(element))
        # The stream identifier is written once, before the first element (Flink reads it when it
        # opens the decompressing stream, then seeks to each element's chunks).
        if not framed.startswith(SNAPPY_STREAM_IDENTIFIER):
            raise UnsupportedError("snappy framing without its stream identifier: cannot compress an element")
        out.append(framed[len(SNAPPY_STREAM_IDENTIFIER) :])
    return out


def _rewrite_operator_stream(
    meta: StateMeta,
    operator: OperatorMeta,
    subtask: int | None,
    handle: OperatorStreamHandle,
    edited: frozenset[str],
    editor: StateEditor | None,
    out: Output,
) -> OperatorStreamOut:
    """An operator state stream with some states' elements replaced: the header and the other
    states' elements are copied as bytes; each element's end is the next element's start."""
    compressed = any(
        isinstance(loc, OperatorLocation) and loc.stream == handle.stream and loc.compressed
        for s in operator.states
        for loc in s.locations
    )
    data = read_all(meta, handle.stream)
    starts = sorted(o for entry in handle.entries for o in entry.offsets)
    header_end = starts[0] if starts else len(data)
    ends = dict(zip(starts, starts[1:] + [len(data)]))
    sink = bytearray(data[:header_end])
    entries = []
    # States keep their order in the stream (the order of their first elements).
    for entry in sorted(handle.entries, key=lambda e: min(e.offsets) if e.offsets else len(data)):
        elements = [data[o : ends[o]] for o in sorted(entry.offsets)]
        if entry.name in edited and editor is not None:
            if compressed:
                elements = _edit_compressed(operator, entry.name, subtask, elements, editor, meta)
            else:
                elements = editor.edit_elements(operator, entry.name, subtask, elements)
        offsets = []
        for element in elements:
            offsets.append(len(sink))
            sink += element
        entries.append(OperatorStateEntry(entry.name, entry.mode, tuple(offsets)))
    out.summary.streams_rebuilt += 1
    stream_sink = out.new_stream()
    stream_sink.write(sink)
    return OperatorStreamOut(tuple(entries), stream_sink.finish())


def _raw_keyed(meta: StateMeta, operator_id: str, subtask: SubtaskState, out: Output) -> KeyGroupsOut | None:
    """Raw keyed state is the job's own bytes behind key-group offsets: copied as they are."""
    handle = subtask.raw_keyed
    if handle is None:
        return None
    if not isinstance(handle, KeyGroupsHandle):
        raise UnsupportedError(
            f"raw keyed state of operator {operator_id} subtask {subtask.index} is a {handle.kind} handle, "
            f"which a canonical savepoint cannot hold"
        )
    return KeyGroupsOut(handle.start_key_group, handle.offsets, out.copy(meta, handle.stream))


@dataclass(frozen=True)
class _StreamStates:
    """The states a keyed stream's header declares, by id, with where each stream's parts are."""

    header_length: int
    by_id: dict[int, StateInfo]
    locations: dict[int, KeyedLocation]
    layout: str
    compressed: bool


def _stream_states(operator: OperatorMeta | None, subtask: int, stream: StreamHandle) -> _StreamStates | None:
    by_id: dict[int, StateInfo] = {}
    locations: dict[int, KeyedLocation] = {}
    for state in operator.states if operator is not None else ():
        for loc in state.locations:
            if isinstance(loc, KeyedLocation) and loc.subtask == subtask and loc.stream == stream:
                by_id[loc.state_id] = state
                locations[loc.state_id] = loc
    if not locations:
        return None
    first = next(iter(locations.values()))
    return _StreamStates(first.header_length, by_id, locations, first.layout, first.compressed)


def _keyed(
    meta: StateMeta,
    operator: OperatorMeta | None,
    operator_id: str,
    subtask: SubtaskState,
    editor: StateEditor | None,
    out: Output,
) -> KeyGroupsOut | None:
    handle = subtask.managed_keyed
    if handle is None:
        return None
    if isinstance(handle, UnsupportedKeyedHandle):
        raise UnsupportedError(
            f"operator {operator_id} subtask {subtask.index}: {handle.kind} keyed state cannot be rewritten "
            f"({handle.reason})"
        )
    stream = handle.meta_stream if isinstance(handle, NativeRocksDBHandle) else handle.stream
    states = _stream_states(operator, subtask.index, stream)
    touched = editor.key_groups(operator_id) if editor is not None else frozenset()
    first, last = handle.key_group_range
    touched = frozenset(g for g in touched if first <= g <= last)
    if isinstance(handle, KeyGroupsHandle) and (states is None or states.layout == "canonical") and not touched:
        return KeyGroupsOut(handle.start_key_group, handle.offsets, out.copy(meta, handle.stream))
    if states is None or operator is None:
        raise UnsupportedError(
            f"operator {operator_id} subtask {subtask.index}: its keyed stream's header could not be read, "
            f"so its key-groups cannot be converted"
        )
    return _KeyedRewrite(meta, operator, handle, states, touched, editor, out).run()


class _KeyedRewrite:
    """One subtask's keyed stream written anew: header, then each key-group copied or rebuilt."""

    def __init__(
        self,
        meta: StateMeta,
        operator: OperatorMeta,
        handle: KeyGroupsHandle | NativeRocksDBHandle,
        states: _StreamStates,
        touched: frozenset[int],
        editor: StateEditor | None,
        out: Output,
    ) -> None:
        self.meta = meta
        self.operator = operator
        self.handle = handle
        self.states = states
        self.touched = touched
        self.editor = editor
        self.out = out
        self.summary = out.summary
        self.prefix = operator.key_group_prefix_bytes
        # Key-groups copied as byte ranges keep their compression; a converted stream is written plain.
        self.keep_compression = states.layout == "canonical" and states.compressed

    def run(self) -> KeyGroupsOut:
        self.summary.streams_rebuilt += 1
        header = self.header()
        sink = self.out.new_stream()
        sink.write(header)
        first, last = self.handle.key_group_range
        offsets = []
        for _, data in self._key_groups(first, last):
            if isinstance(data, StoredSpan):
                assert isinstance(self.handle, KeyGroupsHandle)  # spans come from canonical streams only
                offsets.append(sink.position)
                sink.copy_range(self.meta.storage, self.handle.stream, data.offset, data.length)
            elif data:
                offsets.append(sink.position)
                sink.write(data)
            else:
                offsets.append(0)
        return KeyGroupsOut(first, tuple(offsets), sink.finish())

    def header(self) -> bytes:
        stream = self.handle.meta_stream if isinstance(self.handle, NativeRocksDBHandle) else self.handle.stream
        length = self.states.header_length
        header = bytearray(read_stream_bytes(self.meta.storage, stream, 0, length)[0])
        version = int.from_bytes(header[:4], "big")
        if (
            version >= FIRST_KEYED_PROXY_WITH_COMPRESSION
            and header[COMPRESSION_FLAG_OFFSET]
            and not self.keep_compression
        ):
            header[COMPRESSION_FLAG_OFFSET] = 0
        return bytes(header)

    def _key_groups(self, first: int, last: int) -> Iterator[tuple[int, bytes | StoredSpan]]:
        """Each key-group's bytes in the canonical framing; an untouched canonical one where it is
        stored (copied unread)."""
        if self.states.layout != "canonical":
            for key_group, runs in self.runs(first, last):
                self.summary.key_groups_rebuilt += 1
                yield key_group, self._frame(self.edited(key_group, runs))
            return
        handle = self.handle
        assert isinstance(handle, KeyGroupsHandle)
        for key_group, data, name, at in self._stored(handle, first, last, self.touched):
            if isinstance(data, StoredSpan):
                self.summary.key_groups_copied += 1
                yield key_group, data
                continue
            plain = decompress_snappy_framed(data, name, at) if data and self.states.compressed else data
            self.summary.key_groups_rebuilt += 1
            rebuilt = self._frame(self.edited(key_group, parse_runs(plain, name, at) if plain else []))
            if rebuilt and self.keep_compression:
                import cramjam

                rebuilt = bytes(cramjam.snappy.compress(rebuilt))
            yield key_group, rebuilt

    def runs(self, first: int, last: int) -> Iterator[tuple[int, Runs]]:
        """Each key-group's runs (state id, entries), whatever the layout."""
        if self.states.layout == NATIVE_ROCKSDB_LAYOUT:
            yield from self._native(first, last)
        elif self.states.layout == HEAP_CHECKPOINT_LAYOUT:
            from statecat.writers.heap_rewrite import heap_key_group_runs

            handle = self.handle
            assert isinstance(handle, KeyGroupsHandle)
            yield from heap_key_group_runs(self.meta, self.operator, handle, self.states.by_id, self.states.locations)
        else:
            handle = self.handle
            assert isinstance(handle, KeyGroupsHandle)
            for key_group, data, name, at in self._stored(handle, first, last):
                assert isinstance(data, bytes)  # every key-group read: no ``only``
                plain = decompress_snappy_framed(data, name, at) if data and self.states.compressed else data
                yield key_group, parse_runs(plain, name, at) if plain else []

    def edited(self, key_group: int, runs: Runs) -> dict[str, list[Entry]]:
        """A key-group's entries by state name, in the runs' order (a state the editor adds last),
        after the editor where it touches the key-group."""
        by_name = {
            self.states.by_id[state_id].name: entries for state_id, entries in runs if state_id in self.states.by_id
        }
        if self.editor is not None and key_group in self.touched:
            for name, entries in self.editor.edit(self.operator, key_group, dict(by_name)).items():
                if name not in self.ids:
                    raise UnsupportedError(
                        f"state {name!r} has no place in key-group {key_group}'s stream of operator {self.operator.label}"
                    )
                by_name[name] = sorted(entries)  # RocksDB's order: unsigned bytes of the composite key
        return by_name

    def _frame(self, by_name: dict[str, list[Entry]]) -> bytes:
        runs = [(self.ids[name], entries) for name, entries in by_name.items()]
        # A canonical key-group keeps its runs' order (Flink's heap backend writes its own, RocksDB's
        # is the state id's), so a rebuilt key-group without a change is the bytes Flink wrote; a
        # converted layout's runs go in state-id order, as a RocksDB full snapshot writes them.
        return frame_runs(runs if self.states.layout == "canonical" else sorted(runs))

    @property
    def ids(self) -> dict[str, int]:
        return {state.name: state_id for state_id, state in self.states.by_id.items()}

    # -- layouts

    def _stored(
        self, handle: KeyGroupsHandle, first: int, last: int, only: frozenset[int] | None = None
    ) -> Iterator[tuple[int, bytes | StoredSpan, str, int]]:
        """(key-group, stored bytes, file, file offset) of each key-group of a savepoint-layout
        stream; with ``only``, the others' bytes unread, as their span of the stream."""
        ends = key_group_ends(handle.offsets, handle.stream.size)
        stream, name, base = open_stream(self.meta.storage, handle.stream, 0)
        with stream:
            for i in range(last - first + 1):
                offset = handle.offsets[i]
                data: bytes | StoredSpan = b""
                if offset > 0 and only is not None and first + i not in only:
                    data = StoredSpan(offset, ends[i] - offset)
                elif offset > 0:
                    stream.seek(base + offset)
                    data = stream.read(ends[i] - offset)
                    if len(data) != ends[i] - offset:
                        raise StatecatError(
                            f"expected key-group {first + i} to span {ends[i] - offset} bytes, the file ends after "
                            f"{len(data)}",
                            file=name,
                            offset=base + offset + len(data),
                            hint="The state file is truncated",
                        )
                yield first + i, data, name, base + offset

    def _native(self, first: int, last: int) -> Iterator[tuple[int, Runs]]:
        from contextlib import ExitStack

        from statecat.readers.backends.native_rocksdb import NativeInstance

        handle = self.handle
        assert isinstance(handle, NativeRocksDBHandle)
        instance = NativeInstance(self.meta.storage, handle)
        with ExitStack() as stack:
            readers = {
                state_id: stack.enter_context(instance.column_family(state.name))
                for state_id, state in sorted(self.states.by_id.items())
            }
            for key_group in range(first, last + 1):
                runs: Runs = []
                for state_id, reader in readers.items():
                    data = reader.key_group(key_group, self.prefix, state_id)
                    if data:
                        runs.append((state_id, _entries_of(data)))
                yield key_group, runs


def key_group_range(max_parallelism: int, parallelism: int, index: int) -> tuple[int, int]:
    """KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex: subtask ``index``'s key-groups."""
    start = (index * max_parallelism + parallelism - 1) // parallelism
    end = ((index + 1) * max_parallelism - 1) // parallelism
    return start, end


_SPILL_RECORD = struct.Struct(">HHii")  # new key-group, state index, key length, value length


class _Rekey:
    """An operator's keyed state under a new max parallelism: every entry to the key-group Flink
    assigns its key, the key-group prefix rewritten, the subtasks' ranges rebuilt.

    Entries are spilled into files by ranges of new key-groups, then each subtask's stream is
    written from them in key-group order."""

    def __init__(
        self,
        meta: StateMeta,
        operator: OperatorMeta,
        subtasks: tuple[SubtaskState, ...],
        parallelism: int,
        max_parallelism: int,
        editor: StateEditor | None,
        out: Output,
    ) -> None:
        self.meta = meta
        self.operator = operator
        self.subtasks = subtasks
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.editor = editor
        self.out = out
        self.new_prefix = 1 if max_parallelism <= KEY_GROUP_PREFIX_ONE_BYTE_MAX_PARALLELISM else 2
        self.names: list[str] = []

    def _bucket(self, key_group: int) -> int:
        return key_group * min(self.max_parallelism, REKEY_BUCKETS) // self.max_parallelism

    def run(self) -> tuple[SubtaskOut, ...]:
        from statecat.readers.keygroups import key_grouper
        from statecat.writers.entry_codec import EntryCodec

        spill = tempfile.mkdtemp(prefix=".rekey-", dir=self.out.directory)
        files: dict[int, Any] = {}
        try:
            header: bytes | None = None
            header_states: _StreamStates | None = None
            codecs: dict[str, EntryCodec] = {}
            groupers: dict[str, Callable[[Any], int]] = {}
            old_prefix = self.operator.key_group_prefix_bytes
            for subtask in self.subtasks:
                handle = subtask.managed_keyed
                if handle is None:
                    continue
                if isinstance(handle, UnsupportedKeyedHandle):
                    raise UnsupportedError(
                        f"operator {self.operator.label}: {handle.kind} keyed state ({handle.reason})"
                    )
                stream = handle.meta_stream if isinstance(handle, NativeRocksDBHandle) else handle.stream
                states = _stream_states(self.operator, subtask.index, stream)
                if states is None:
                    raise UnsupportedError(f"operator {self.operator.label}: a keyed stream's header could not be read")
                first, last = handle.key_group_range
                touched = self.editor.key_groups(self.operator.id) if self.editor is not None else frozenset()
                rewrite = _KeyedRewrite(self.meta, self.operator, handle, states, touched, self.editor, self.out)
                rewrite.keep_compression = False
                if header is None:
                    header, header_states = rewrite.header(), states
                for key_group, runs in rewrite.runs(first, last):
                    self.out.summary.key_groups_rebuilt += 1
                    for name, entries in rewrite.edited(key_group, runs).items():
                        if not entries:
                            continue
                        codec = codecs.get(name)
                        if codec is None:
                            codec = codecs[name] = EntryCodec(self.meta, self.operator, self.operator.state(name))
                            groupers[name] = key_grouper(codec.key_type, self.max_parallelism)
                        if name not in self.names:
                            self.names.append(name)
                        index = self.names.index(name)
                        for row in codec.rows(key_group, entries):
                            target = groupers[name](row.key)
                            prefix = target.to_bytes(self.new_prefix, "big")
                            bucket = self._bucket(target)
                            sink = files.get(bucket)
                            if sink is None:
                                sink = files[bucket] = open(os.path.join(spill, str(bucket)), "wb")  # noqa: SIM115
                            for key, value in row.entries or ():
                                moved = prefix + key[old_prefix:]
                                sink.write(_SPILL_RECORD.pack(target, index, len(moved), len(value)))
                                sink.write(moved)
                                sink.write(value)
            for sink in files.values():
                sink.close()
            assert header is not None and header_states is not None
            return self._write(spill, header, header_states)
        finally:
            for sink in files.values():  # closed already unless the write failed
                with contextlib.suppress(OSError):
                    sink.close()
            shutil.rmtree(spill, ignore_errors=True)

    def _write(self, spill: str, header: bytes, states: _StreamStates) -> tuple[SubtaskOut, ...]:
        ids = {state.name: state_id for state_id, state in states.by_id.items()}
        missing = [name for name in self.names if name not in ids]
        if missing:
            raise UnsupportedError(
                f"operator {self.operator.label}: states {missing} are not in every subtask's stream header"
            )
        by_index = {s.index: s for s in self.subtasks}
        loaded: tuple[int, dict[int, dict[str, list[Entry]]]] = (-1, {})
        out = []
        self.out.summary.streams_rebuilt += self.parallelism
        for index in range(self.parallelism):
            first, last = key_group_range(self.max_parallelism, self.parallelism, index)
            sink = self.out.new_stream()
            sink.write(header)
            offsets = []
            for key_group in range(first, last + 1):
                bucket = self._bucket(key_group)
                if loaded[0] != bucket:
                    loaded = (bucket, self._load(spill, bucket))
                by_name = loaded[1].pop(key_group, {})
                data = frame_runs(sorted((ids[name], sorted(entries)) for name, entries in by_name.items()))
                offsets.append(sink.position if data else 0)
                sink.write(data)
            keyed = KeyGroupsOut(first, tuple(offsets), sink.finish())
            old = by_index.get(index)
            out.append(
                SubtaskOut(
                    index,
                    _operator_handle(self.meta, old.managed_operator, self.out, self.operator, index, self.editor)
                    if old is not None
                    else None,
                    _operator_handle(self.meta, old.raw_operator, self.out) if old is not None else None,
                    keyed,
                )
            )
        return tuple(out)

    def _load(self, spill: str, bucket: int) -> dict[int, dict[str, list[Entry]]]:
        path = os.path.join(spill, str(bucket))
        groups: dict[int, dict[str, list[Entry]]] = {}
        if not os.path.exists(path):
            return groups
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos < len(data):
            key_group, index, key_len, value_len = _SPILL_RECORD.unpack_from(data, pos)
            pos += _SPILL_RECORD.size
            key = data[pos : pos + key_len]
            value = data[pos + key_len : pos + key_len + value_len]
            pos += key_len + value_len
            groups.setdefault(key_group, {}).setdefault(self.names[index], []).append((key, value))
        return groups


def _entries_of(data: bytes) -> list[Entry]:
    """A native key-group's entries: from the merge's positions, or from its canonical framing."""
    positions = getattr(data, "positions", None)
    if positions is None:
        return parse_runs(data)[0][1]
    key_at, key_len, value_at, value_len = (p.tolist() for p in positions)
    raw = bytes(data)
    return [(raw[k : k + kl], raw[v : v + vl]) for k, kl, v, vl in zip(key_at, key_len, value_at, value_len)]


__all__ = [
    "write_savepoint",
    "StateEditor",
    "COORDINATOR_STATE",
    "WriteSummary",
    "INLINE_THRESHOLD",
    "METADATA_VERSION_RELEASES",
]
