"""Flink's own migration-test snapshots (tests/fixtures/flink_migration, copied from apache/flink's
flink-tests resources; see its README for sources and license): Flink 1.11 to 1.20, heap
(hashmap) and RocksDB, canonical and native savepoints and checkpoints, `_metadata` v3 and v4.

Every state of every snapshot reads whole, and the values are what the jobs that wrote them kept,
derived here from the jobs' logic (flink-tests/src/test/java/org/apache/flink/test/checkpointing/:
StatefulJobSnapshotMigrationITCase, called StatefulJobSavepointMigrationITCase until 1.14,
StatefulJobWBroadcastStateMigrationITCase and utils/MigrationTestUtils), never from statecat's reader.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from pathlib import Path

import pytest

from statecat.readers import SavepointReader

MIGRATION = Path(__file__).parent / "fixtures" / "flink_migration"
STATEFUL_JOB = sorted(MIGRATION.glob("new-stateful-udf-migration-itcase-*"))
BROADCAST_JOB = sorted(MIGRATION.glob("new-stateful-broadcast-udf-migration-itcase-*"))

# MigrationTestUtils: what each source keeps in its "source-state" list at a snapshot, and emits.
CHECKPOINTED_STRINGS = (
    "Here be dragons!",
    "Here be more dragons!",
    "Here be yet more dragons!",
    "Here be the mostest dragons!",
)
NUM_SOURCE_ELEMENTS = 4  # each source emits (i, i) for i in 0..3
# Both sources are plain SourceFunctions (not ParallelSourceFunction): one subtask each, although
# the second keeps a union list and "partitions" its strings and elements by subtask.
SOURCE_SUBTASKS = 1
LONG_MIN = -(1 << 63)
# The timely operator sets an event-time timer at currentWatermark() + 10: the sources emit
# Watermark(0) before their elements, so the operator's watermark is Long.MIN_VALUE or 0 by then.
EVENT_TIMER_DELAY = 10
PROCESSING_TIMER_DELAY = 30_000  # currentProcessingTime() + 30 s: a time the job ran at
JOB_RUN_AFTER = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)  # Flink 1.11 was released in 2020


@functools.cache
def _reader(snapshot: Path) -> SavepointReader:
    return SavepointReader(str(snapshot))


def _java_hash(text: str) -> int:
    """String.hashCode(): s[0]*31^(n-1) + ... over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _java_mod(a: int, b: int) -> int:
    """Java's %: the sign of the dividend."""
    return int(math.fmod(a, b))


def _elements(snapshot: Path, state: str, uid: str) -> list[tuple[int, object]]:
    """(subtask, value) of an operator state, found by the operator's uid (Flink derives its id)."""
    return sorted((row["subtask"], row["value"]) for row in _reader(snapshot).table(state, uid).to_pylist())


def _keyed(snapshot: Path, state: str, uid: str) -> dict:
    """{(key, namespace): value} of a keyed state; a Tuple1 key reads as its one field."""
    return {
        (row["key"]["f0"], row["namespace"]): row["value"] for row in _reader(snapshot).table(state, uid).to_pylist()
    }


@pytest.mark.parametrize("snapshot", STATEFUL_JOB + BROADCAST_JOB, ids=lambda p: p.name)
def test_every_state_of_every_migration_snapshot_reads_whole(snapshot):
    """Every state reads, its table has its schema, and every part shown as bytes says why; the
    jobs keep only Long, String and Tuple state, which statecat decodes whole."""
    reader = _reader(snapshot)
    states = [(op, state) for op in reader.meta.operators for state in op.states]
    assert states
    for op, state in states:
        where = f"{snapshot.name} :: {op.label} :: {state.name}"
        assert reader.table(state.name, op.id).schema == reader.schema(state.name, op.id), where
        assert state.raw_reasons == [], where


def _source_lists(snapshot: Path, listed: str, unioned: str) -> None:
    """CheckpointingNonParallelSourceWithListState (uid ``listed``) clears and adds the four
    strings to its list at every snapshot; CheckpointingParallelSourceWithUnionListState
    (``unioned``) adds to its union list those whose hashCode() % parallelism is its subtask (with
    one subtask: all four)."""
    assert _elements(snapshot, "source-state", listed) == sorted((0, s) for s in CHECKPOINTED_STRINGS)
    partitioned = sorted(
        (subtask, s)
        for s in CHECKPOINTED_STRINGS
        for subtask in range(SOURCE_SUBTASKS)
        if _java_mod(_java_hash(s), SOURCE_SUBTASKS) == subtask
    )
    assert _elements(snapshot, "source-state", unioned) == partitioned


@pytest.mark.parametrize("snapshot", STATEFUL_JOB, ids=lambda p: p.name)
def test_the_stateful_job_keeps_each_keys_last_value_and_its_timers(snapshot):
    """StatefulJobSnapshotMigrationITCase: two pipelines, source -> keyBy(f0) -> flatMap (uid
    CheckpointingKeyedStateFlatMap1/2: ValueState "state-name" := f1) -> keyBy(f0) -> timely
    operator (CheckpointingTimelyStatefulOperator1/2: "state-name" := f1 under namespace f0, an
    event-time and a processing-time timer "timer" under namespace f0), over (i, i), i = 0..3."""
    _source_lists(snapshot, "CheckpointingSource1", "CheckpointingSource2")
    keys = range(NUM_SOURCE_ELEMENTS)
    for pipeline in (1, 2):
        flat_map, timely = f"CheckpointingKeyedStateFlatMap{pipeline}", f"CheckpointingTimelyStatefulOperator{pipeline}"
        assert _keyed(snapshot, "state-name", flat_map) == {(i, None): i for i in keys}, snapshot.name
        assert _keyed(snapshot, "state-name", timely) == {(i, i): i for i in keys}, snapshot.name
        event = _keyed(snapshot, "_timer_state/event_timer", timely)
        assert set(event) == {(i, i) for i in keys}
        assert set(event.values()) <= {LONG_MIN + EVENT_TIMER_DELAY, 0 + EVENT_TIMER_DELAY}, snapshot.name
        processing = _keyed(snapshot, "_timer_state/processing_timer", timely)
        assert set(processing) == {(i, i) for i in keys}
        earliest = JOB_RUN_AFTER.timestamp() * 1000 + PROCESSING_TIMER_DELAY
        assert all(earliest < t < earliest + 20 * 365 * 86_400_000 for t in processing.values()), processing


@pytest.mark.parametrize("snapshot", BROADCAST_JOB, ids=lambda p: p.name)
def test_the_broadcast_job_keeps_every_broadcast_element_on_every_subtask(snapshot):
    """StatefulJobWBroadcastStateMigrationITCase: each keyed stream is connected to a broadcast
    stream of (i, i), i = 0..3; BrProcess1 puts each into broadcast-state-1 (i -> i) and
    broadcast-state-2 (str(i) -> i), BrProcess2 into broadcast-state-3 (i -> str(i)). Broadcast
    elements reach every subtask, and each of the 4 subtasks snapshots its whole copy. The four
    sources keep MigrationTestUtils' lists."""
    _source_lists(snapshot, "CheckpointingSource1", "CheckpointingSource2")
    _source_lists(snapshot, "BrCheckpointingSource1", "BrCheckpointingSource2")
    parallelism = 4  # env.setParallelism(4)
    expected = {
        ("broadcast-state-1", "BrProcess1"): {i: i for i in range(NUM_SOURCE_ELEMENTS)},
        ("broadcast-state-2", "BrProcess1"): {str(i): i for i in range(NUM_SOURCE_ELEMENTS)},
        ("broadcast-state-3", "BrProcess2"): {i: str(i) for i in range(NUM_SOURCE_ELEMENTS)},
    }
    for (state, uid), entries in expected.items():
        rows = _reader(snapshot).table(state, uid).to_pylist()
        by_subtask: dict[int, dict] = {}
        for row in rows:
            by_subtask.setdefault(row["subtask"], {})[row["value"]["key"]] = row["value"]["value"]
        assert by_subtask == dict.fromkeys(range(parallelism), entries), (snapshot.name, state)


def test_a_flink_1_11_heap_savepoint_reads_in_the_heaps_own_layout():
    """Until Flink 1.13 unified the savepoint format (FLINK-21206), the heap backend wrote its
    savepoints' key-groups as it writes checkpoints, in tag-3 handles of a version 3 _metadata:
    the 1.11 heap savepoint holds what the 1.12 RocksDB one (canonical layout) holds."""
    heap = MIGRATION / "new-stateful-udf-migration-itcase-flink1.11-savepoint"
    rocksdb = MIGRATION / "new-stateful-udf-migration-itcase-flink1.12-rocksdb-savepoint"
    assert _reader(heap).meta.metadata.version == 3
    layouts = {
        location.layout
        for op in _reader(heap).meta.operators
        for state in op.states
        if state.is_keyed
        for location in state.keyed_locations
    }
    assert layouts == {"heap_checkpoint"}
    for uid in ("CheckpointingKeyedStateFlatMap1", "CheckpointingTimelyStatefulOperator2"):
        assert _keyed(heap, "state-name", uid) == _keyed(rocksdb, "state-name", uid)
