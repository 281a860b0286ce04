"""Materializes savepoints and checkpoints into a lake of Delta tables (see lake/tables.py), exactly once.

Each snapshot gets an id derived from its ``_metadata`` (the first 16 hex digits of its SHA-256),
so the same savepoint is recognised wherever it lies and however often it is given.

Exactly once across re-runs and crashes: every state table's rows for one snapshot are written
in one Delta commit that replaces that snapshot's partition (``predicate snapshot_id = …``), so a
re-run rewrites, never duplicates. The ``snapshots`` row is written last: it is the commit marker.
A snapshot with a row is skipped; one without a row (a crash mid-way) is written again in full;
partitions of snapshots that have no row and will not be written again (the savepoint is gone)
are deleted at the end of each run. Dashboards join ``snapshots`` to see only whole snapshots.
One writer per lake at a time (Delta would reject the second's conflicting commit).

Snapshots statecat cannot read in full (native RocksDB savepoints, incremental RocksDB checkpoints)
are reported and recorded: their readable states are written and the row says ``partial`` with
the reasons; with nothing readable, ``unsupported``. ``unsupported`` rows are tried again by a
newer statecat version. A ``_metadata`` that does not parse, or state that fails to decode, is
reported and written nothing (no row), so a later run tries it again.

The Materializer plans (which snapshots, their order and ids, the rows of ``snapshots``,
``state_meta`` and ``state_stats``, retention); a ``LakeWriter`` commits, one Delta commit per call:
``DeltaRsWriter`` below (the deltalake package, in this process, no JVM) or ``SparkLakeWriter``
(lake/spark_writer.py: delta-spark, each state decoded and written by Spark tasks per key-group
range, for histories larger than one machine). Both write the same lake; either may continue one
the other began.
"""

from __future__ import annotations

import datetime as dt
import logging
import posixpath
import re
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, cast

import pyarrow as pa

from statecat.catalog.lake.tables import (
    PARTITION_COLUMN,
    SNAPSHOT_COLUMNS,
    SNAPSHOTS,
    SNAPSHOTS_SCHEMA,
    STATE_META,
    STATE_META_SCHEMA,
    STATE_STATS,
    STATE_STATS_SCHEMA,
    Lake,
    delta_schema,
    to_delta,
)
from statecat.readers.codecs.arrow_types import state_schema
from statecat.readers.scans.scan import scanner_for
from statecat.statemeta.errors import StatecatError
from statecat.statemeta.files.storage import Storage, open_storage
from statecat.statemeta.model import OperatorMeta, StateInfo, StateMeta, load_state_meta, operator_id_for_uid
from statecat.statemeta.naming import stable_state_names
from statecat.statemeta.snapshotter.stateinfo import metadata_fingerprint
from statecat.statemeta.snapshotter.taken_at import (
    FlinkCheckpointHistory,
    Placing,
    in_checkpoint_order,
    job_id_of,
    placing_of,
    savepoint_time,
    within_job_key,
)

if TYPE_CHECKING:
    from deltalake import CommitProperties
    from pyspark.sql import SparkSession

    from statecat.readers.scans.scan import KeyedStateScanner, OperatorStateScanner
    from statecat.statemeta.descriptors import DescriptorSource
    from statecat.statemeta.model import KeyedLocation, OperatorLocation

log = logging.getLogger("statecat.materialize")

SNAPSHOT_ID_LENGTH = 16
DEFAULT_VACUUM_HOURS = 168  # Delta's default: readers of older versions keep working for a week


@dataclass(frozen=True)
class Selection:
    """Which states to write: operators by id, uid or name; states by Flink name or table name."""

    operators: tuple[str, ...] = ()
    states: tuple[str, ...] = ()

    def wants(self, op: OperatorMeta, state: StateInfo, table: str) -> bool:
        if self.operators and not any(
            ref in (op.id, op.uid, op.name) or operator_id_for_uid(ref) == op.id for ref in self.operators
        ):
            return False
        return not self.states or state.name in self.states or table in self.states


@dataclass
class SnapshotResult:
    path: str
    snapshot_id: str | None
    outcome: str  # written | skipped | unsupported | partial | failed | retired
    detail: str = ""
    rows: int = 0
    states: int = 0


@dataclass
class MaterializeResult:
    snapshots: list[SnapshotResult] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)  # snapshot ids removed by retention
    orphans_deleted: int = 0

    @property
    def failed(self) -> list[SnapshotResult]:
        return [s for s in self.snapshots if s.outcome == "failed"]


@dataclass(frozen=True)
class Retention:
    keep: int | None = None  # the newest N snapshots
    keep_days: float | None = None  # snapshots taken within D days
    vacuum_hours: float = DEFAULT_VACUUM_HOURS

    @property
    def active(self) -> bool:
        return self.keep is not None or self.keep_days is not None

    def removed(self, rows: list[dict], now: dt.datetime) -> set[str]:
        """Ids of the snapshots (rows with snapshot_id, path, taken_at, checkpoint_id) this rule removes."""

        # A lake holds one job: its newest snapshots are those of the highest checkpoint ids, whatever
        # the mtimes of copies say.
        def placing(r: dict) -> Placing:
            return Placing(r.get("path") or r["snapshot_id"], r["checkpoint_id"], None, r["taken_at"], "")

        ordered = sorted(rows, key=lambda r: within_job_key(placing(r)), reverse=True)
        gone = set()
        if self.keep is not None:
            gone |= {r["snapshot_id"] for r in ordered[self.keep :]}
        if self.keep_days is not None:
            cutoff = now - dt.timedelta(days=self.keep_days)
            gone |= {r["snapshot_id"] for r in ordered if r["taken_at"] is not None and r["taken_at"] < cutoff}
        return gone


# ----------------------------------------------------------------------------- discovery


@dataclass(frozen=True)
class Candidate:
    """A savepoint or checkpoint found under the given paths, with its lake identity."""

    storage: Storage
    snapshot_id: str
    metadata_sha256: str
    taken_at: dt.datetime | None
    taken_at_source: str
    job_id: str | None
    placing: Placing  # where it goes in checkpoint order


def find_snapshots(paths: list[str]) -> Iterator[str]:
    """URIs of the savepoints at or under each path (a savepoint, or a root to search)."""
    from statecat.statemeta.snapshotter.watcher import Watcher

    for path in paths:
        try:
            yield open_storage(path).uri
            continue
        except StatecatError:
            pass  # not one savepoint: search it as a root
        found = False
        for root, _fs, base, directory, _info in Watcher([path]).candidates():
            relative = posixpath.relpath(directory, base)
            found = True
            yield root if relative == "." else root.rstrip("/") + "/" + relative
        if not found:
            open_storage(path)  # raises the clear "not a savepoint" error for this path


def identify(uri: str, flink_history: FlinkCheckpointHistory | None = None) -> Candidate:
    storage = open_storage(uri)
    fingerprint = metadata_fingerprint(storage)
    # Flink records no time in _metadata: the best source at hand, named (statemeta.taken_at).
    taken_at, taken_at_source = savepoint_time(storage, flink_history)
    return Candidate(
        storage,
        fingerprint.sha256[:SNAPSHOT_ID_LENGTH],
        fingerprint.sha256,
        taken_at,
        taken_at_source,
        job_id_of(storage.directory),  # <checkpoint dir>/<job id>/chk-N
        placing_of(storage, taken=(taken_at, taken_at_source)),
    )


# ----------------------------------------------------------------------------- the run


class Materializer:
    """Plans what goes into the lake (which snapshots, in what order, their rows) and has a
    ``LakeWriter`` commit it: deltalake's (default) or, given ``spark``, delta-spark's."""

    def __init__(
        self,
        lake: str | Lake,
        *,
        selection: Selection = Selection(),
        retention: Retention = Retention(),
        descriptors: DescriptorSource | None = None,
        on_result: Callable[[SnapshotResult], None] | None = None,
        flink_history: FlinkCheckpointHistory | None = None,
        spark: SparkSession | None = None,
    ):
        self.lake = lake if isinstance(lake, Lake) else Lake(lake)
        self.flink_history = flink_history
        self.selection = selection
        self.retention = retention
        self.descriptors = descriptors
        self.on_result = on_result
        self._commits = 0
        self._known: dict[str, dict] | None = None  # snapshots rows, cached by materialize_path
        self.writer: LakeWriter
        if spark is None:
            self.writer = DeltaRsWriter(self.lake)
        else:
            from statecat.catalog.lake.spark_writer import SparkLakeWriter

            # Checks that the session has Delta before anything is written.
            self.writer = SparkLakeWriter(self.lake, spark, descriptors=descriptors)

    def run(self, paths: list[str]) -> MaterializeResult:
        """Materializes every snapshot at or under ``paths`` not yet in the lake, in checkpoint order
        (``statemeta.taken_at.in_checkpoint_order``), then applies retention."""
        result = MaterializeResult()
        existing = self.snapshot_rows()
        candidates = []
        for uri in find_snapshots(paths):
            try:
                candidates.append(identify(uri, self.flink_history))
            except (StatecatError, OSError) as exc:
                self._report(result, SnapshotResult(uri, None, "failed", str(exc)))
        seen = set()
        todo = []
        for cand in in_checkpoint_order(candidates, lambda c: c.placing):
            if cand.snapshot_id in seen:
                self._report(
                    result,
                    SnapshotResult(
                        cand.storage.uri, cand.snapshot_id, "skipped", "a copy of another snapshot given in this run"
                    ),
                )
                continue
            seen.add(cand.snapshot_id)
            row = existing.get(cand.snapshot_id)
            if row is not None and not self._retry(row):
                self._report(
                    result,
                    SnapshotResult(
                        cand.storage.uri, cand.snapshot_id, "skipped", f"already in the lake ({row['status']})"
                    ),
                )
                continue
            todo.append(cand)
        retired = self._retired_on_arrival(existing, todo)
        for cand in todo:
            if cand.snapshot_id in retired:
                self._report(
                    result,
                    SnapshotResult(
                        cand.storage.uri, cand.snapshot_id, "retired", "older than what --keep/--keep-days retains"
                    ),
                )
                continue
            self._report(result, self.materialize_one(cand))
        from deltalake.exceptions import DeltaError

        try:
            if self.retention.active:
                result.removed = self.apply_retention()
            result.orphans_deleted = self.delete_orphans()
        except (DeltaError, OSError, StatecatError) as exc:  # StatecatError: the Spark writer's
            raise StatecatError(
                f"cannot clean up the lake {self.lake.uri}: {_first_line(exc)}",
                hint="Its snapshots are written; the next run retries the clean-up",
            ) from exc
        return result

    def materialize_path(self, uri: str) -> SnapshotResult:
        """One savepoint (for ``watch --materialize``): written unless the lake already has it."""
        try:
            cand = identify(uri, self.flink_history)
        except (StatecatError, OSError) as exc:
            return SnapshotResult(uri, None, "failed", str(exc))
        if self._known is None:  # read once: a watcher calls this for every savepoint it finds
            self._known = self.snapshot_rows()
        row = self._known.get(cand.snapshot_id)
        if row is not None and not self._retry(row):
            return SnapshotResult(uri, cand.snapshot_id, "skipped", f"already in the lake ({row['status']})")
        result = self.materialize_one(cand)
        if result.outcome != "failed":
            from statecat import __version__

            status = "complete" if result.outcome == "written" else result.outcome
            self._known[cand.snapshot_id] = {"status": status, "statecat_version": __version__}
        return result

    def _report(self, result: MaterializeResult, item: SnapshotResult) -> None:
        result.snapshots.append(item)
        if self.on_result is not None:
            self.on_result(item)

    @staticmethod
    def _retry(row: dict) -> bool:
        from statecat import __version__

        return row["status"] == "unsupported" and row["statecat_version"] != __version__

    def _retired_on_arrival(self, existing: dict[str, dict], todo: list[Candidate]) -> set[str]:
        # Writing a snapshot that retention would remove at once is wasted work.
        if not self.retention.active or not todo:
            return set()
        rows = [r for r in existing.values() if r["snapshot_id"] not in {c.snapshot_id for c in todo}]
        rows += [
            {
                "snapshot_id": c.snapshot_id,
                "path": c.storage.uri,
                "taken_at": c.taken_at,
                "checkpoint_id": c.placing.checkpoint_id,
            }
            for c in todo
        ]
        return self.retention.removed(rows, _now())

    # -- one snapshot

    def materialize_one(self, cand: Candidate) -> SnapshotResult:
        uri = cand.storage.uri
        try:
            meta = load_state_meta(cand.storage, descriptors=self.descriptors)
        except (StatecatError, OSError) as exc:
            return SnapshotResult(uri, cand.snapshot_id, "failed", str(exc))
        unsupported = [f"{op.label}: {reason}" for op in meta.operators for reason in op.unsupported]
        names = stable_state_names(meta)
        snapshot_values = (cand.snapshot_id, meta.checkpoint_id, cand.taken_at)
        written: dict[tuple[str, str], int] = {}
        stats: list[dict] = []
        try:
            for op, state in meta.states():
                table = names[(op.id, state.name)]
                if not self.selection.wants(op, state, table):
                    continue
                job = StateJob(
                    meta, op, state, table, self.lake.state_table_uri(table), state_table_schema(state), snapshot_values
                )
                written[(op.id, state.name)] = self.writer.write_state(job, stats)
                self._committed()
            self.writer.write_partition(STATE_STATS, STATE_STATS_SCHEMA, snapshot_values[0], stats)
            self._committed()
            self.writer.write_partition(
                STATE_META,
                STATE_META_SCHEMA,
                snapshot_values[0],
                _state_meta_rows(meta, names, written, snapshot_values),
            )
            self._committed()
        except (StatecatError, OSError) as exc:
            # Partitions already written stay invisible (no snapshots row) and are rewritten or deleted later.
            return SnapshotResult(uri, cand.snapshot_id, "failed", str(exc))
        if unsupported:
            status = "partial" if written else "unsupported"
        else:
            status = "complete"
        rows = sum(written.values())
        try:
            self._write_snapshot_row(cand, meta, status, unsupported, len(written), rows)
        except StatecatError as exc:
            return SnapshotResult(uri, cand.snapshot_id, "failed", str(exc))
        outcome = "written" if status == "complete" else status
        detail = "; ".join(unsupported)
        return SnapshotResult(uri, cand.snapshot_id, outcome, detail, rows, len(written))

    def _write_snapshot_row(
        self, cand: Candidate, meta: StateMeta, status: str, unsupported: list[str], states: int, rows: int
    ) -> None:
        from statecat import __version__

        # Absolute, so the lake says where the savepoint is whatever directory the command ran in.
        path = cand.storage.uri if "://" in cand.storage.uri else cand.storage.directory
        self.writer.write_snapshot_row(
            {
                "snapshot_id": cand.snapshot_id,
                "path": path,
                "checkpoint_id": meta.checkpoint_id,
                "is_savepoint": meta.metadata.is_savepoint,
                "taken_at": cand.taken_at,
                "taken_at_source": cand.taken_at_source,
                "job_id": cand.job_id,
                "metadata_sha256": cand.metadata_sha256,
                "metadata_version": meta.metadata.version,
                "status": status,
                "unsupported": unsupported,
                "states": states,
                "rows": rows,
                "statecat_version": __version__,
                "materialized_at": _now(),
            }
        )

    def _committed(self) -> None:
        self._commits += 1

    # -- lake-wide

    def snapshot_rows(self) -> dict[str, dict]:
        table = self.lake.read(SNAPSHOTS)
        if table is None:
            return {}
        return {row["snapshot_id"]: row for row in table.to_pylist()}

    def apply_retention(self) -> list[str]:
        """Removes the snapshots the retention rule drops (marker first), then vacuums."""
        rows = list(self.snapshot_rows().values())
        gone = sorted(self.retention.removed(rows, _now()))
        if gone:
            predicate = _in_predicate(gone)
            # From here on they are not part of the lake (the snapshots table exists: its rows named them).
            self.writer.delete(SNAPSHOTS, predicate)
            for name in self._data_tables():
                self.writer.delete(name, predicate)
        self.vacuum()
        return gone

    def vacuum(self) -> None:
        for name in [SNAPSHOTS, *self._data_tables()]:
            self.writer.vacuum(name, int(self.retention.vacuum_hours))

    def delete_orphans(self) -> int:
        """Deletes partitions of snapshots with no ``snapshots`` row (left by a crash, never resumed)."""
        known = set(self.snapshot_rows())
        deleted = 0
        for name in self._data_tables():
            table = self.lake.open(name)
            if table is None:
                continue
            orphans = sorted({p[PARTITION_COLUMN] for p in table.partitions()} - known)
            if orphans:
                self.writer.delete(name, _in_predicate(orphans))
                deleted += len(orphans)
        return deleted

    def _data_tables(self) -> list[str]:
        return [STATE_STATS, STATE_META] + [f"states/{t}" for t in self.lake.state_tables()]


# ----------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class StateJob:
    """One state of one snapshot: its rows become that snapshot's partition of the state's table."""

    meta: StateMeta
    op: OperatorMeta
    state: StateInfo
    table: str  # its table's name under LAKE/states/
    uri: str  # that table's URI
    schema: pa.Schema  # the table's columns for it, as Delta stores them: SNAPSHOT_COLUMNS, then the state's
    snapshot_values: tuple  # (snapshot_id, checkpoint_id, taken_at)

    @property
    def snapshot_id(self) -> str:
        return cast(str, self.snapshot_values[0])


class LakeWriter(Protocol):
    """What reaches the lake, one Delta commit per call: each ``write_*`` replaces one snapshot's
    partition (``snapshot_id = …``) of one table, so a repeated call rewrites, never duplicates."""

    def write_state(self, job: StateJob, stats: list[dict]) -> int:
        """Writes the state's rows; appends its ``state_stats`` rows to ``stats``; returns its row count."""
        ...

    def write_partition(self, name: str, schema: pa.Schema, snapshot_id: str, rows: list[dict]) -> None:
        """Writes the (few) rows of a snapshot into LAKE/name (``state_stats``, ``state_meta``)."""
        ...

    def write_snapshot_row(self, row: dict) -> None:
        """Writes the snapshot's ``snapshots`` row, the commit marker (replacing an earlier one of it)."""
        ...

    def delete(self, name: str, predicate: str) -> None:
        """Deletes LAKE/name's rows matching ``predicate`` (nothing when the table is not there)."""
        ...

    def vacuum(self, name: str, retention_hours: int) -> None:
        """Deletes LAKE/name's files unreferenced for ``retention_hours`` (nothing when the table is not there)."""
        ...


def state_table_schema(state: StateInfo) -> pa.Schema:
    """A state's table's columns as Delta stores them: the snapshot columns, then the state's own."""
    return delta_schema(pa.schema(SNAPSHOT_COLUMNS + list(state_schema(state))))


def schema_change_error(job: StateJob, table_schema: pa.Schema) -> StatecatError | None:
    """The error for a state whose columns cannot go into its existing table (the schema rule below)."""
    problem = _schema_change_problem(table_schema, job.schema)
    if not problem:
        return None
    return StatecatError(
        f"lake table {job.uri} cannot hold this state's type: {problem}",
        operator=job.op.label,
        state=job.state.name,
        hint="A table holds one logical state of one job: give another job its own lake (--to LAKE/<job>); "
        "after an incompatible change of a state's type, start a new lake",
    )


def state_write_error(job: StateJob, detail: str) -> StatecatError:
    """The error for a state's write the Delta writer refused."""
    return StatecatError(
        f"cannot write lake table {job.uri}: {detail}",
        operator=job.op.label,
        state=job.state.name,
        hint="A table holds one logical state of one job; if its type changed in a way "
        "Delta cannot merge (see README, Dashboards), or the lake holds another "
        "job's state of that name, use one lake per job (--to LAKE/<job>)",
    )


def stat_recorder(
    op: OperatorMeta, state: StateInfo, table: str, snapshot_values: tuple, stats: list[dict]
) -> Callable[[int | None, int | None, int, int], None]:
    """``stat(subtask, key_group, entries, bytes)``: appends one ``state_stats`` row of the state to ``stats``."""
    snapshot_id, checkpoint_id, taken_at = snapshot_values

    def stat(subtask: int | None, key_group: int | None, entries: int, size: int) -> None:
        stats.append(
            {
                "snapshot_id": snapshot_id,
                "checkpoint_id": checkpoint_id,
                "taken_at": taken_at,
                "operator_id": op.id,
                "operator": op.label,
                "state_name": state.name,
                "table_name": table,
                "subtask": subtask,
                "key_group": key_group,
                "entries": entries,
                "bytes": size,
            }
        )

    return stat


def location_batches(
    meta: StateMeta,
    state: StateInfo,
    scanner: KeyedStateScanner | OperatorStateScanner,
    loc: KeyedLocation | OperatorLocation,
    stat: Callable[[int | None, int | None, int, int], None],
    key_groups: Collection[int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The state's rows at one location (one subtask's handle) as the reader gives them, key-group
    by key-group (only ``key_groups``, if given), calling ``stat`` for each key-group (keyed
    states) or for the location (operator states): its entry count is known without hashing any key."""
    if not state.is_keyed:
        loc = cast("OperatorLocation", loc)
        entries = 0
        for batch in cast("OperatorStateScanner", scanner).batches([loc]):
            entries += batch.num_rows
            yield batch
        stat(loc.subtask, None, entries, loc.end - min(loc.offsets, default=loc.end))
        return
    # A keyed state's locations and scanner are keyed ones.
    loc = cast("KeyedLocation", loc)
    keyed = cast("KeyedStateScanner", scanner)
    groups = range(loc.start_key_group, loc.start_key_group + loc.num_key_groups)
    wanted = groups if key_groups is None else [g for g in groups if g in key_groups]
    if loc.native is not None:
        from statecat.readers.backends.native_rocksdb import column_family_bytes

        counts = []
        for group in wanted:
            entries = 0
            for batch in keyed.batches([loc], key_groups={group}):
                entries += batch.num_rows
                yield batch
            counts.append((group, entries))
        # SST files keep no per-key-group sizes. As for canonical key-groups, a key-group's bytes
        # are its whole (all states), repeated on each state: the instance's SST bytes spread
        # evenly over its key-groups.
        total = sum(column_family_bytes(meta.storage, loc.native).values())
        shares = dict(zip(groups, _shares(total, [1] * len(groups))))
        for group, entries in counts:
            stat(loc.subtask, group, entries, shares[group])
        return
    for index, offset in enumerate(loc.offsets):
        group = loc.start_key_group + index
        if key_groups is not None and group not in key_groups:
            continue
        end = loc.offsets[index + 1] if index + 1 < len(loc.offsets) else loc.stream.size
        entries = 0
        for batch in keyed.batches([loc], key_groups={group}):
            entries += batch.num_rows
            yield batch
        stat(loc.subtask, group, entries, end - offset)


class DeltaRsWriter:
    """The lake written with the ``deltalake`` package (delta-rs), in this process: no JVM."""

    def __init__(self, lake: Lake):
        self.lake = lake

    def write_state(self, job: StateJob, stats: list[dict]) -> int:
        from deltalake import write_deltalake
        from deltalake.exceptions import DeltaError

        counter = [0]
        failure: list[BaseException] = []
        batches = _remember_failure(self._state_batches(job, stats, counter), failure)
        reader = pa.RecordBatchReader.from_batches(job.schema, batches)
        try:
            self._prepare_table(job)
            write_deltalake(
                job.uri,
                reader,
                mode="overwrite",
                predicate=_partition_predicate(job.snapshot_id),
                partition_by=[PARTITION_COLUMN],
                schema_mode="merge",
                storage_options=self.lake.storage_options,
                commit_properties=_commit_properties(job.snapshot_id),
            )
        except DeltaError as exc:
            if failure:  # reading the state failed inside the writer: report that error itself
                raise failure[0] from None
            raise state_write_error(job, _first_line(exc)) from exc
        return counter[0]

    def _prepare_table(self, job: StateJob) -> None:
        """Creates the state's table, or checks that the state's columns may go into the existing one."""
        from deltalake import DeltaTable, TableFeatures

        # Neither a first write that replaces a partition nor create() adds the TIMESTAMP_NTZ table
        # feature its columns need (the table is then unreadable): create the table with the snapshot
        # columns only, add the feature, and let the write merge in the state's columns.
        if not DeltaTable.is_deltatable(job.uri, storage_options=self.lake.storage_options):
            DeltaTable.create(
                job.uri,
                pa.schema(SNAPSHOT_COLUMNS),
                partition_by=[PARTITION_COLUMN],
                mode="ignore",
                storage_options=self.lake.storage_options,
            )
        table = DeltaTable(job.uri, storage_options=self.lake.storage_options)
        error = schema_change_error(job, pa.schema(table.schema().to_arrow()))
        if error is not None:
            raise error
        if _has_naive_timestamp(job.schema) and "timestampNtz" not in set(table.protocol().writer_features or ()):
            table.alter.add_feature(TableFeatures.TimestampWithoutTimezone, allow_protocol_versions_increase=True)

    @staticmethod
    def _state_batches(job: StateJob, stats: list[dict], counter: list[int]) -> Iterator[pa.RecordBatch]:
        """The state's rows with the snapshot columns in front; fills ``stats`` per key-group/subtask."""
        scanner = scanner_for(job.meta, job.op, job.state)
        snapshot_id, checkpoint_id, taken_at = job.snapshot_values
        stat = stat_recorder(job.op, job.state, job.table, job.snapshot_values, stats)
        schema = job.schema
        for loc in job.state.locations:
            for batch in location_batches(job.meta, job.state, scanner, loc, stat):
                n = batch.num_rows
                counter[0] += n
                front = [
                    pa.repeat(pa.scalar(snapshot_id, pa.string()), n),
                    pa.repeat(pa.scalar(checkpoint_id, pa.int64()), n),
                    pa.repeat(pa.scalar(taken_at, SNAPSHOT_COLUMNS[2].type), n),
                ]
                yield to_delta(pa.RecordBatch.from_arrays(front + batch.columns, names=schema.names), schema)

    def write_partition(self, name: str, schema: pa.Schema, snapshot_id: str, rows: list[dict]) -> None:
        from deltalake import write_deltalake
        from deltalake.exceptions import DeltaError

        table = pa.Table.from_pylist(rows, schema=schema)
        try:
            write_deltalake(
                self.lake.table_uri(name),
                table,
                mode="overwrite",
                predicate=_partition_predicate(snapshot_id),
                partition_by=[PARTITION_COLUMN],
                schema_mode="merge",
                storage_options=self.lake.storage_options,
                commit_properties=_commit_properties(snapshot_id),
            )
        except DeltaError as exc:
            raise StatecatError(f"cannot write lake table {self.lake.table_uri(name)}: {_first_line(exc)}") from exc

    def write_snapshot_row(self, row: dict) -> None:
        from deltalake import write_deltalake
        from deltalake.exceptions import DeltaError

        # Replaces an earlier 'unsupported' row of the same snapshot in the same commit.
        try:
            write_deltalake(
                self.lake.table_uri(SNAPSHOTS),
                pa.Table.from_pylist([row], schema=SNAPSHOTS_SCHEMA),
                mode="overwrite",
                predicate=_partition_predicate(row["snapshot_id"]),
                schema_mode="merge",
                storage_options=self.lake.storage_options,
                commit_properties=_commit_properties(row["snapshot_id"]),
            )
        except DeltaError as exc:
            raise StatecatError(
                f"cannot write lake table {self.lake.table_uri(SNAPSHOTS)}: {_first_line(exc)}"
            ) from exc

    def delete(self, name: str, predicate: str) -> None:
        table = self.lake.open(name)
        if table is not None:
            table.delete(predicate)

    def vacuum(self, name: str, retention_hours: int) -> None:
        table = self.lake.open(name)
        if table is not None:
            table.vacuum(retention_hours=retention_hours, dry_run=False, enforce_retention_duration=False)


def _state_meta_rows(meta: StateMeta, names: dict, written: dict, snapshot_values: tuple) -> list[dict]:
    snapshot_id, checkpoint_id, taken_at = snapshot_values
    rows = []
    for op, state in meta.states():
        done = (op.id, state.name) in written
        rows.append(
            {
                "snapshot_id": snapshot_id,
                "checkpoint_id": checkpoint_id,
                "taken_at": taken_at,
                "operator_id": op.id,
                "operator_uid": op.uid,
                "operator_name": op.name,
                "parallelism": op.parallelism,
                "max_parallelism": op.max_parallelism,
                "state_name": state.name,
                "kind": state.kind,
                "state_type": state.state_type,
                "key_type": state.key.describe() if state.key is not None else None,
                "namespace_type": state.namespace.describe() if state.namespace is not None else None,
                "value_type": state.value.describe(),
                "decode_status": state.decode_status,
                "raw_reasons": state.raw_reasons,
                "table_name": names[(op.id, state.name)] if done else None,
                "materialized": done,
                "rows": written.get((op.id, state.name)),
            }
        )
    return rows


def _schema_change_problem(table: pa.Schema, incoming: pa.Schema) -> str | None:
    """The schema rule: new columns and new struct fields merge in; any other type change is refused.

    Delta's merge would otherwise cast new rows to the table's old type where it can (long keys
    stored as strings): silently wrong for a dashboard.
    """
    for name in incoming.names:
        if name in table.names:
            problem = _incompatible(table.field(name).type, incoming.field(name).type, name)
            if problem:
                return problem
    return None


def _incompatible(old: pa.DataType, new: pa.DataType, path: str) -> str | None:
    if old.equals(new):
        return None
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        for child in new:
            index = old.get_field_index(child.name)
            if index >= 0:
                problem = _incompatible(old.field(index).type, child.type, f"{path}.{child.name}")
                if problem:
                    return problem
        return None
    if pa.types.is_list(old) and pa.types.is_list(new):
        return _incompatible(old.value_type, new.value_type, f"{path}[]")
    if pa.types.is_map(old) and pa.types.is_map(new):
        return _incompatible(old.key_type, new.key_type, f"{path}.key") or _incompatible(
            old.item_type, new.item_type, f"{path}.value"
        )
    if pa.types.is_timestamp(old) and pa.types.is_timestamp(new) and (old.tz is None) == (new.tz is None):
        return None  # Delta keeps one unit (microseconds) and zone (UTC)
    return f"column {path} was {old}, is now {new}"


def _has_naive_timestamp(schema: pa.Schema) -> bool:
    def naive(t: pa.DataType) -> bool:
        if pa.types.is_timestamp(t):
            return t.tz is None
        if pa.types.is_struct(t):
            return any(naive(f.type) for f in t)
        if pa.types.is_map(t):
            return naive(t.key_type) or naive(t.item_type)
        if pa.types.is_list(t):
            return naive(t.value_type)
        return False

    return any(naive(f.type) for f in schema)


def _remember_failure(batches: Iterable[pa.RecordBatch], failure: list[BaseException]) -> Iterator[pa.RecordBatch]:
    # deltalake turns an exception of the batch source into a DeltaError holding only its text.
    try:
        yield from batches
    except BaseException as exc:
        failure.append(exc)
        raise


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _partition_predicate(snapshot_id: str) -> str:
    _check_id(snapshot_id)
    return f"{PARTITION_COLUMN} = '{snapshot_id}'"


def _in_predicate(snapshot_ids: list[str]) -> str:
    for sid in snapshot_ids:
        _check_id(sid)
    return f"{PARTITION_COLUMN} IN ({', '.join(repr(s) for s in snapshot_ids)})"


def _check_id(snapshot_id: str) -> None:
    # Ids go into predicates: only ever hex digits (anything else was not written by statecat).
    if not re.fullmatch(r"[0-9a-f]+", snapshot_id):
        raise ValueError(f"not a snapshot id: {snapshot_id!r}")


def _commit_properties(snapshot_id: str) -> CommitProperties:
    from deltalake import CommitProperties

    return CommitProperties(custom_metadata={"statecat.snapshot_id": snapshot_id})


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def lake_writer(lake: str) -> Callable[[str], None]:
    """For ``watch --materialize``: writes each ready savepoint into the lake (skips those it has)."""
    materializer = Materializer(lake)

    def write(uri: str) -> None:
        result = materializer.materialize_path(uri)
        # A daemon logs a failure and goes on; the next `statecat materialize` run tries the savepoint again.
        level = logging.ERROR if result.outcome == "failed" else logging.INFO
        log.log(level, "materialize %s: %s%s", uri, result.outcome, f" ({result.detail})" if result.detail else "")

    return write


def _shares(total: int, weights: list[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` (largest remainders), adding up exactly."""
    weight = sum(weights)
    if weight == 0:
        return [0] * len(weights)
    exact = [total * w / weight for w in weights]
    out = [int(x) for x in exact]
    for i in sorted(range(len(weights)), key=lambda i: exact[i] - out[i], reverse=True)[: total - sum(out)]:
        out[i] += 1
    return out
