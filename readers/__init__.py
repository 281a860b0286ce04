"""statecat.readers: the state data of a Flink savepoint as Arrow record batches (no Spark).

    from statecat.readers import SavepointReader

    reader = SavepointReader("/savepoints/savepoint-1a2b3c-4d5e6f7a8b9c")
    table = reader.table("accState")                      # pyarrow.Table: key, namespace, value
    one = reader.table("accState", keys=["key_662"])      # reads only key_662's key-group
    for batch in reader.batches("window-contents", operator="my-window-uid"):
        ...
    view = reader.key("key_662")                          # every state holding key_662 (readers/scans/keyview.py)

A Java job's Kryo-serialized state decodes given its classes (``SavepointReader(path,
classpath=["job.jar"])``, ``readers/codecs/kryo.py``); TTL states carry ``ttl_timestamp`` (``readers/codecs/ttl.py``).

Partitions (``reader.partitions(state)``) are small picklable descriptions of one subtask's
key-group range, for engines that spread a scan over workers.

What lives here, by job: ``codecs/`` (bytes <-> values per serializer family, each decoder beside
its encoder), ``backends/`` (where the heap, RocksDB and ForSt backends keep a key-group's bytes),
``scans/`` (rows as Arrow batches, and the views on them: a key, a diff, skew), ``keygroups``
(Flink's key-group assignment) and this front door. Rooms import in that order: codecs, then
backends, then scans; statemeta below them all, and nothing of ``writers`` or ``catalog``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

from statecat.readers.codecs.arrow_types import state_schema
from statecat.readers.keygroups import key_group_for
from statecat.readers.scans import skew
from statecat.readers.scans.diff import SavepointDiff, diff_savepoints
from statecat.readers.scans.keyview import KeyView, key_history, key_not_coercible_error, key_view
from statecat.readers.scans.scan import (
    DEFAULT_BATCH_ROWS,
    KeyedStateScanner,
    OperatorKeyedScan,
    OperatorStateScanner,
    ReadStats,
    scanner_for,
)
from statecat.statemeta.descriptors import apply_descriptors, with_classpath, with_pyflink_pickles
from statecat.statemeta.errors import StatecatError
from statecat.statemeta.model import (
    KeyedLocation,
    OperatorLocation,
    OperatorMeta,
    StateInfo,
    StateMeta,
    load_state_meta,
)

if TYPE_CHECKING:
    from statecat.statemeta.descriptors import DescriptorSource

__all__ = [
    "SavepointReader",
    "Partition",
    "ReadStats",
    "StatecatError",
    "key_group_for",
    "KeyView",
    "key_history",
    "SavepointDiff",
    "diff_savepoints",
    "skew",
]


@dataclass(frozen=True)
class Partition:
    """One unit of parallel work: one subtask's part of a state, optionally a key-group subset."""

    savepoint: str
    operator_id: str
    state: str
    subtask: int | None  # None: the operator coordinator's state (it runs on the JobManager)
    key_groups: tuple[int, ...] | None = None


class SavepointReader:
    def __init__(
        self,
        savepoint: str | StateMeta,
        *,
        unpickle: bool = False,
        descriptors: DescriptorSource | None = None,
        classpath: Sequence[str | os.PathLike[str]] | None = None,
    ) -> None:
        """``descriptors``: a descriptor file (path), its parsed document or a DescriptorSet, applied
        to the savepoint's StateMeta in memory (nothing is written: read-only stores work).
        ``classpath``: the job's JARs and class directories; their class files (read as data, never
        loaded) type the Kryo-serialized state.
        ``unpickle=True`` decodes PyFlink pickles (runs code from the savepoint: trusted ones only)."""
        descriptors = with_classpath(descriptors, classpath)
        if isinstance(savepoint, StateMeta):
            meta = savepoint if descriptors is None else apply_descriptors(savepoint, descriptors)
        else:
            meta = load_state_meta(savepoint, descriptors=descriptors)
        # PyFlink thread mode keeps some values as pickles in byte[]: unpickled only on opt-in.
        self.meta = with_pyflink_pickles(meta, unpickle=True) if unpickle else meta
        self.unpickle = unpickle
        self.last_stats = ReadStats()

    def find(self, state: str, operator: str | None = None) -> tuple[OperatorMeta, StateInfo]:
        return self.meta.find_state(state, operator)

    def schema(self, state: str, operator: str | None = None) -> pa.Schema:
        return state_schema(self.find(state, operator)[1])

    def key_groups_for_keys(self, state: str, keys: Sequence, operator: str | None = None) -> set[int]:
        op, info = self.find(state, operator)
        return {key_group_for(k, info.key_type, op.max_parallelism) for k in keys}  # keyed

    def batches(
        self,
        state: str,
        operator: str | None = None,
        *,
        keys: Sequence | None = None,
        key_groups: set[int] | None = None,
        subtasks: AbstractSet[int | None] | None = None,
        batch_rows: int = DEFAULT_BATCH_ROWS,
    ) -> Iterator[pa.RecordBatch]:
        """Rows of one state. ``keys`` reads only the key-groups that can hold them, then filters."""
        op, info = self.find(state, operator)
        scanner = scanner_for(self.meta, op, info, unpickle=self.unpickle)
        self.last_stats = scanner.stats
        locations = [loc for loc in info.locations if subtasks is None or loc.subtask in subtasks]
        if not info.is_keyed:  # casts: an operator state's scanner and locations
            yield from cast(OperatorStateScanner, scanner).batches(
                cast("list[OperatorLocation]", locations), batch_rows=batch_rows
            )
            return
        # Casts below: a keyed state's scanner and locations.
        if keys is not None:
            wanted = {key_group_for(k, info.key_type, op.max_parallelism) for k in keys}
            key_groups = wanted if key_groups is None else key_groups & wanted
        if key_groups is not None:
            locations = [
                loc for loc in locations if any(cast(KeyedLocation, loc).holds_key_group(g) for g in key_groups)
            ]
        yield from cast(KeyedStateScanner, scanner).batches(
            cast("list[KeyedLocation]", locations), key_groups=key_groups, batch_rows=batch_rows, keys=keys
        )

    def operator_batches(
        self,
        operator: str,
        states: Sequence[str] | None = None,
        *,
        key_groups: set[int] | None = None,
        subtasks: set[int] | None = None,
        batch_rows: int = DEFAULT_BATCH_ROWS,
    ) -> Iterator[tuple[str, pa.RecordBatch]]:
        """(state name, batch) of several states of one operator (default: all of them), each
        keyed key-group's bytes read and walked once for all its states (``OperatorKeyedScan``).
        Each state gets the rows ``batches`` gives it, in the same order; batches of different
        states interleave."""
        op = self.meta.operator(operator)
        infos = [op.state(name) for name in states] if states is not None else list(op.states)
        keyed = [
            cast(KeyedStateScanner, scanner_for(self.meta, op, info, unpickle=self.unpickle))
            for info in infos
            if info.is_keyed
        ]
        for info in infos:
            if not info.is_keyed:
                for batch in self.batches(info.name, op.id, subtasks=subtasks, batch_rows=batch_rows):
                    yield info.name, batch
        if keyed:
            yield from OperatorKeyedScan(keyed).batches(key_groups, subtasks, batch_rows)

    def operator_tables(
        self, operator: str, states: Sequence[str] | None = None, **options: Any
    ) -> dict[str, pa.Table]:
        """{state name: table} of several states of one operator, read in one pass (``operator_batches``)."""
        op = self.meta.operator(operator)
        infos = [op.state(name) for name in states] if states is not None else list(op.states)
        collected: dict[str, list] = {info.name: [] for info in infos}
        for name, batch in self.operator_batches(op.id, [info.name for info in infos], **options):
            collected[name].append(batch)
        return {info.name: pa.Table.from_batches(collected[info.name], schema=state_schema(info)) for info in infos}

    def table(self, state: str, operator: str | None = None, **options: Any) -> pa.Table:
        op, info = self.find(state, operator)
        return pa.Table.from_batches(list(self.batches(state, op.id, **options)), schema=state_schema(info))

    def key(self, key: Any, *, operators: Sequence[str] | None = None, states: Sequence[str] | None = None) -> KeyView:
        """Every keyed state (values and timers) of every operator that holds ``key``, as tidy rows.

        ``key`` is coerced to each state's key type: text, a number, or a list (or JSON list) of
        the fields of a composite key; states it does not fit are in ``skipped`` with the reason.
        Reads one key-group per keyed location. Raises ``LookupFailedError`` when no keyed state
        takes the key."""
        view = key_view(self, key, operators=operators, states=states)
        if not view.coercible:
            raise key_not_coercible_error(key, [view])
        return view

    def partitions(
        self, state: str, operator: str | None = None, key_groups: set[int] | None = None
    ) -> list[Partition]:
        op, info = self.find(state, operator)
        parts = []
        for loc in info.locations:
            if info.is_keyed:
                loc = cast(KeyedLocation, loc)  # a keyed state's locations are keyed ones
                groups = tuple(
                    g
                    for g in range(loc.start_key_group, loc.start_key_group + loc.num_key_groups)
                    if key_groups is None or g in key_groups
                )
                if key_groups is not None and not groups:
                    continue
                parts.append(
                    Partition(self.meta.path, op.id, info.name, loc.subtask, groups if key_groups is not None else None)
                )
            else:
                parts.append(Partition(self.meta.path, op.id, info.name, loc.subtask))
        return parts

    def read_partition(
        self, partition: Partition, *, keys: Sequence | None = None, batch_rows: int = DEFAULT_BATCH_ROWS
    ) -> Iterator[pa.RecordBatch]:
        key_groups = set(partition.key_groups) if partition.key_groups is not None else None
        yield from self.batches(
            partition.state,
            partition.operator_id,
            keys=keys,
            key_groups=key_groups,
            subtasks={partition.subtask},
            batch_rows=batch_rows,
        )
