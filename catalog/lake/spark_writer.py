"""The lake written through Spark (``statecat materialize --engine spark``): delta-spark's writer, and
the state decoded by Spark tasks per key-group range, for histories larger than one machine.

The same lake as the deltalake writer's: the Materializer (lake/materialize.py) plans for both (which
snapshots, their order and ids, the ``snapshots``, ``state_meta`` and ``state_stats`` rows,
retention), and each call here is one Delta commit, as there:

* a state's rows are read through statecat's ``flinkstate`` source, so they are decoded in Spark
  tasks, one per subtask's key-group range (runs of about ``PARTITION_BYTES``, catalog/spark/source.py);
  the snapshot columns go in front, each column is cast to the type the deltalake writer stores
  (``state_table_schema``), and delta-spark writes them with ``replaceWhere snapshot_id = '…'``:
  one commit that replaces the snapshot's partition;
* the state's ``state_stats`` rows (entries per key-group) come from a second Spark job over the same
  key-group ranges, counting what each key-group decodes to exactly as the deltalake writer counts
  while it writes (the source's rows carry no key-group, so the state is decoded twice); the sum is
  checked against the commit's ``numOutputRows`` in the table's history;
* ``state_stats``, ``state_meta`` and the ``snapshots`` marker are a few rows, written from the driver;
* deletes (retention, orphan partitions) and vacuum go through delta-spark's ``DeltaTable``.

Reads of what the lake holds (its snapshot rows and partitions, an existing table's schema) stay the
deltalake package's, as for the deltalake writer.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, cast

import pyarrow as pa

from statecat.catalog.lake.materialize import (
    StateJob,
    _partition_predicate,
    location_batches,
    schema_change_error,
    stat_recorder,
    state_write_error,
)
from statecat.catalog.lake.tables import (
    PARTITION_COLUMN,
    SNAPSHOT_COLUMNS,
    SNAPSHOTS,
    SNAPSHOTS_SCHEMA,
    STATES_DIR,
    Lake,
)
from statecat.statemeta.errors import StatecatError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from statecat.statemeta.descriptors import DescriptorSource
    from statecat.statemeta.model import KeyedLocation, StateMeta

COMMIT_METADATA_KEY = "statecat.snapshot_id"  # in each commit's userMetadata (JSON), as deltalake's commits carry it
RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
# Written as the deltalake writer writes them: INT96 (Spark's default) holds nanoseconds, which Arrow
# readers (deltalake's) overflow past the year 2262.
WRITE_SETTINGS = {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}
# Settings whose defaults are numbers of tasks, sized for clusters: unless the session sets them, as
# many as it has cores. Delta rebuilds a table's state from its log in snapshotPartitions tasks (50:
# seconds per commit on 2 cores); vacuum lists a table's directories in
# parallelPartitionDiscovery.parallelism tasks and joins them with its files in shuffle.partitions
# (10,000 and 200: 20-50 s per table on 2 cores).
TASK_SETTINGS = {
    "spark.databricks.delta.snapshotPartitions": 50,
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": 10_000,
    "spark.sql.shuffle.partitions": 200,
}
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class SparkLakeWriter:
    """The lake written with delta-spark by ``spark`` (a statecat session: it loads Delta)."""

    def __init__(self, lake: Lake, spark: SparkSession, *, descriptors: DescriptorSource | None = None):
        from statecat.catalog.spark.delta import DELTA_EXTENSION, delta_unavailable

        unavailable = delta_unavailable()
        if unavailable:
            raise StatecatError(unavailable, hint="--engine deltalake (the default) needs neither Spark nor its jars")
        if DELTA_EXTENSION not in (spark.conf.get("spark.sql.extensions", "") or ""):
            raise StatecatError(
                f"this Spark session runs without Delta Lake ({DELTA_EXTENSION} is not among its spark.sql.extensions)",
                hint="Use a session from statecat.catalog.session(), which loads Delta",
            )
        self.lake = lake
        self.spark = spark
        self.descriptors = _descriptor_file(descriptors)

    # -- a state

    def write_state(self, job: StateJob, stats: list[dict]) -> int:
        existing = self.lake.open(f"{STATES_DIR}/{job.table}")
        if existing is not None:
            error = schema_change_error(job, pa.schema(existing.schema().to_arrow()))
            if error is not None:
                raise error
        state_stats = self._state_stats(job)
        rows = sum(s["entries"] for s in state_stats)
        try:
            with self._delta_settings(WRITE_SETTINGS):
                self._save(self._state_frame(job), job.uri, job.snapshot_id, partitioned=True)
                output = self._output_rows(job.uri, job.snapshot_id)
        except _spark_errors() as exc:
            raise _failure(exc, lambda message: state_write_error(job, message)) from None
        if output is not None and output != rows:
            raise StatecatError(
                f"lake table {job.uri} received {output} rows of this state, its key-groups hold {rows}",
                operator=job.op.label,
                state=job.state.name,
                hint="The snapshot gets no row; please report this with the savepoint",
            )
        stats.extend(state_stats)
        return rows

    def _state_frame(self, job: StateJob) -> DataFrame:
        """The state's rows as the ``flinkstate`` source reads them (Spark tasks per key-group range),
        with the snapshot columns in front and every column of the type the lake stores."""
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_type

        from statecat.catalog.spark.tables import SOURCE_NAME

        reader = (
            self.spark.read.format(SOURCE_NAME)
            .option("path", _savepoint_path(job.meta))
            .option("state", job.state.name)
            .option("operator", job.op.id)
        )
        if self.descriptors is not None:
            reader = reader.option("descriptors", self.descriptors)
        source = reader.load()
        snapshot_id, checkpoint_id, taken_at = job.snapshot_values
        taken = F.lit(None).cast("timestamp") if taken_at is None else F.timestamp_micros(F.lit(_micros(taken_at)))
        # In the order the deltalake writer's tables have them (its create() puts the partition
        # column after the others), for a table this write creates; an existing one matches by name.
        front = [
            F.lit(checkpoint_id).cast("bigint").alias("checkpoint_id"),
            taken.alias("taken_at"),
            F.lit(snapshot_id).alias(PARTITION_COLUMN),
        ]
        # A cast, not the column itself: the source's column metadata (comments, its table reference)
        # stays out of the Delta schema, and a null-typed column becomes the string the lake stores.
        own = [
            source[f.name].cast(from_arrow_type(f.type, prefer_timestamp_ntz=True)).alias(f.name)
            for f in job.schema
            if f.name not in {c.name for c in SNAPSHOT_COLUMNS}
        ]
        return source.select(*front, *own)

    def _state_stats(self, job: StateJob) -> list[dict]:
        """The state's ``state_stats`` rows, counted by Spark tasks over the source's key-group ranges."""
        from statecat.catalog.spark.source import PARTITION_BYTES, balanced_key_groups

        tasks = []
        for index, loc in enumerate(job.state.locations):
            runs: list[tuple[int, ...] | None] = [None]
            if job.state.is_keyed:
                chunks = balanced_key_groups(cast("KeyedLocation", loc), None, PARTITION_BYTES)
                runs = list(chunks) if len(chunks) > 1 else [None]
            for run in runs:
                tasks.append(
                    _StatsTask(_savepoint_path(job.meta), self.descriptors, job.op.id, job.state.name, index, run)
                )
        stats: list[dict] = []
        if not tasks:
            return stats
        # One task per range: spark.range(n, numPartitions=n) gives each partition one number.
        frame = self.spark.range(len(tasks), numPartitions=len(tasks)).mapInArrow(_stats_counter(tasks), _COUNTS_SCHEMA)
        try:
            counted = frame.collect()
        except _spark_errors() as exc:
            raise _failure(exc, lambda message: state_write_error(job, message)) from None
        stat = stat_recorder(job.op, job.state, job.table, job.snapshot_values, stats)
        for row in counted:
            stat(row["subtask"], row["key_group"], row["entries"], row["bytes"])
        return stats

    def _output_rows(self, uri: str, snapshot_id: str) -> int | None:
        """``numOutputRows`` of the table's last commit, when it is this snapshot's write."""
        from delta.tables import DeltaTable

        last = DeltaTable.forPath(self.spark, uri).history(1).head()
        if last is None or _commit_snapshot(last["userMetadata"]) != snapshot_id:
            return None
        metrics = last["operationMetrics"] or {}
        return int(metrics["numOutputRows"]) if "numOutputRows" in metrics else None

    # -- small tables, from the driver

    def write_partition(self, name: str, schema: pa.Schema, snapshot_id: str, rows: list[dict]) -> None:
        self._write_rows(name, schema, snapshot_id, rows, partitioned=True)

    def write_snapshot_row(self, row: dict) -> None:
        # Replaces an earlier 'unsupported' row of the same snapshot in the same commit.
        self._write_rows(SNAPSHOTS, SNAPSHOTS_SCHEMA, row["snapshot_id"], [row], partitioned=False)

    def _write_rows(self, name: str, schema: pa.Schema, snapshot_id: str, rows: list[dict], partitioned: bool) -> None:
        uri = self.lake.table_uri(name)
        try:
            # From Arrow, so each column gets the Spark type of the deltalake writer's Arrow type.
            frame = self.spark.createDataFrame(pa.Table.from_pylist(rows, schema=schema))
            with self._delta_settings(WRITE_SETTINGS):
                self._save(frame, uri, snapshot_id, partitioned=partitioned)
        except _spark_errors() as exc:
            raise _failure(exc, lambda message: StatecatError(f"cannot write lake table {uri}: {message}")) from None

    def _save(self, frame: DataFrame, uri: str, snapshot_id: str, *, partitioned: bool) -> None:
        """One commit replacing the snapshot's rows of the table at ``uri`` (created when not there)."""
        writer = (
            frame.write.format("delta")
            .mode("overwrite")
            .option("replaceWhere", _partition_predicate(snapshot_id))
            .option("partitionOverwriteMode", "static")  # replaceWhere, whatever the session's default
            .option("mergeSchema", "true")  # new columns and struct fields, as deltalake's schema_mode="merge"
            .option("userMetadata", json.dumps({COMMIT_METADATA_KEY: snapshot_id}))
        )
        if partitioned:
            writer = writer.partitionBy(PARTITION_COLUMN)
        writer.save(uri)

    # -- lake-wide

    def delete(self, name: str, predicate: str) -> None:
        from delta.tables import DeltaTable

        uri = self.lake.table_uri(name)
        try:
            with self._delta_settings():
                if DeltaTable.isDeltaTable(self.spark, uri):
                    DeltaTable.forPath(self.spark, uri).delete(predicate)
        except _spark_errors() as exc:
            raise _failure(exc, lambda message: StatecatError(f"cannot delete from {uri}: {message}")) from None

    def vacuum(self, name: str, retention_hours: int) -> None:
        from delta.tables import DeltaTable

        uri = self.lake.table_uri(name)
        try:
            # As the deltalake writer's enforce_retention_duration=False: --vacuum-hours below Delta's
            # default of 168 is the user's choice.
            with self._delta_settings({RETENTION_CHECK: "false"}), _console_silenced(self.spark):
                if DeltaTable.isDeltaTable(self.spark, uri):
                    DeltaTable.forPath(self.spark, uri).vacuum(float(retention_hours))
        except _spark_errors() as exc:
            raise _failure(exc, lambda message: StatecatError(f"cannot vacuum {uri}: {message}")) from None

    @contextlib.contextmanager
    def _delta_settings(self, settings: dict[str, str] | None = None) -> Iterator[None]:
        """``settings`` and TASK_SETTINGS for one call, the session's own back after it."""
        settings = dict(settings or {})
        cores = _cores(self.spark)
        for key, default in TASK_SETTINGS.items():
            if cores is not None and self.spark.conf.get(key, None) is None:
                settings[key] = str(max(1, min(default, cores)))
        previous = {key: self.spark.conf.get(key, None) for key in settings}
        for key, value in settings.items():
            self.spark.conf.set(key, value)
        try:
            yield
        finally:
            for key, before in previous.items():
                if before is None:
                    self.spark.conf.unset(key)
                else:
                    self.spark.conf.set(key, before)


# ----------------------------------------------------------------------------- Spark tasks


@dataclass(frozen=True)
class _StatsTask:
    """One Spark task counting a state's entries per key-group: one location, or a run of its key-groups."""

    savepoint: str
    descriptors: str | None
    operator_id: str
    state: str
    location: int  # index into the state's locations
    key_groups: tuple[int, ...] | None  # None: all of the location's


# What a counting task sends back per key-group (keyed states) or subtask (operator states); the
# driver adds the columns every row of the state shares (stat_recorder).
_COUNTS_SCHEMA = "subtask int, key_group int, entries bigint, bytes bigint"
_COUNTS_ARROW = pa.schema(
    [("subtask", pa.int32()), ("key_group", pa.int32()), ("entries", pa.int64()), ("bytes", pa.int64())]
)


def _stats_counter(tasks: list[_StatsTask]) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow's function: for each task number it is given, that task's counts."""

    def count(numbers: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in numbers:
            for number in batch.column(0).to_pylist():
                rows = _task_counts(tasks[number])
                yield pa.RecordBatch.from_pylist(rows, schema=_COUNTS_ARROW)

    return count


def _task_counts(task: _StatsTask) -> list[dict]:
    """In a Python worker: the task's entries and bytes, counted as the deltalake writer counts them."""
    from statecat.catalog.spark.source import StatecatQueryError
    from statecat.readers.scans.scan import scanner_for

    try:
        meta = _worker_meta(task.savepoint, task.descriptors)
        op = meta.operator(task.operator_id)
        state = next(s for s in op.states if s.name == task.state)
        rows: list[dict] = []

        def stat(subtask: int | None, key_group: int | None, entries: int, size: int) -> None:
            rows.append({"subtask": subtask, "key_group": key_group, "entries": entries, "bytes": size})

        for _ in location_batches(
            meta, state, scanner_for(meta, op, state), state.locations[task.location], stat, task.key_groups
        ):
            pass
        return rows
    except StatecatError as exc:
        # The marker catalog/spark/errors.py finds in the worker's traceback: the driver shows this line.
        raise StatecatQueryError(str(exc)) from None


@lru_cache(maxsize=8)
def _worker_meta(savepoint: str, descriptors: str | None) -> StateMeta:
    from statecat.statemeta.model import load_state_meta

    return load_state_meta(savepoint, descriptors=descriptors)


# ----------------------------------------------------------------------------- helpers


def _spark_errors() -> tuple[type[BaseException], ...]:
    from statecat.catalog.spark.errors import spark_error_types

    return spark_error_types()


def _failure(exc: BaseException, wrap: Callable[[str], BaseException]) -> BaseException:
    """A Spark error as statecat's: a state that failed to decode says so in the reader's words;
    other errors of Spark or Delta through ``wrap(message)``; a worker's own bug stays itself."""
    from statecat.catalog.spark.errors import QUERY_ERROR_MARKER, spark_error_message

    message = spark_error_message(exc)
    if message is None:
        return exc
    if QUERY_ERROR_MARKER in str(exc):
        return StatecatError(message)
    return wrap(message)


@contextlib.contextmanager
def _console_silenced(spark: SparkSession) -> Iterator[None]:
    """Delta's vacuum prints "Deleted N files and directories ..." with Scala's println, to the JVM's
    stdout, which is the command's own: sent nowhere for the call (it goes to this thread's
    Console.out; PySpark pins each Python thread to one JVM thread)."""
    jvm = getattr(spark, "_jvm", None)  # None: not a session of this process (Spark Connect)
    if jvm is None:
        yield
        return
    console = getattr(getattr(jvm.scala, "Console$"), "MODULE$")
    previous = console.out()
    console.setOutDirect(jvm.java.io.PrintStream(jvm.java.io.OutputStream.nullOutputStream()))
    try:
        yield
    finally:
        console.setOutDirect(previous)


def _cores(spark: SparkSession) -> int | None:
    """The session's default parallelism; None where it is not to be had (a Spark Connect client)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # noqa: BLE001 - a Connect session has no SparkContext, whatever its error
        return None


def _savepoint_path(meta: StateMeta) -> str:
    """The savepoint as Spark's workers open it: its URI, or its absolute local directory."""
    return meta.storage.uri if "://" in meta.storage.uri else meta.storage.directory


def _descriptor_file(descriptors: DescriptorSource | None) -> str | None:
    if descriptors is None:
        return None
    if isinstance(descriptors, (str, os.PathLike)):
        path = os.fspath(descriptors)
        return path if "://" in path else os.path.abspath(path)
    raise StatecatError(
        "the Spark engine takes descriptors as a file, which its workers read",
        hint="Pass the descriptor file's path",
    )


def _micros(taken_at: dt.datetime) -> int:
    """Microseconds since the epoch (a naive time is UTC, as Arrow takes it)."""
    aware = taken_at if taken_at.tzinfo is not None else taken_at.replace(tzinfo=dt.UTC)
    return (aware - EPOCH) // dt.timedelta(microseconds=1)


def _commit_snapshot(user_metadata: str | None) -> str | None:
    try:
        return json.loads(user_metadata or "").get(COMMIT_METADATA_KEY)
    except (ValueError, AttributeError):
        return None
