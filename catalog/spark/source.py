"""The ``flinkstate`` Spark data source: Flink savepoint state as Arrow batches, spread over executors.

Registered in every session by the top-level module ``pyspark_statecat`` (Spark imports each
installed ``pyspark_*`` module and registers its ``DefaultSource``). Used by the catalog tables
``statecat attach`` creates, and directly:

    spark.read.format("flinkstate").option("path", SAVEPOINT).option("state", "accState").load()

State tables are normally scanned by statecat's Spark extension (catalog/spark/java-extension/), which
plans with this source's reader (pushFilters, partitions) and reads with its read_columns() in
statecat's own Python workers (catalog/spark/columnar_worker.py), handing Spark Arrow columns; this source
reads them row-wise when the extension is off or missing, and reads every other table kind.

Partitions are key-group ranges of the subtasks' state handles. ``key = x`` and ``key IN (...)``
are pushed down (with ``spark.sql.python.filterPushdown.enabled=true``): only the key-groups that
can hold those keys are read. Spark still evaluates every filter itself; pushdown only prunes.
"""

from __future__ import annotations

import gc
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, EqualTo, In, InputPartition

from statecat.catalog.spark.tables import (
    SOURCE_NAME,
    TableRef,
    ref_from_options,
    ref_from_schema,
    spark_schema,
    state_meta_rows,
)
from statecat.statemeta.errors import SavepointNotFoundError, StatecatError

if TYPE_CHECKING:
    from pyspark.sql.datasource import Filter
    from pyspark.sql.types import StructType

    from statecat.readers import Partition
    from statecat.statemeta.model import KeyedLocation, OperatorMeta, StateInfo, StateMeta

# Bytes of state data per Spark partition: a subtask's key-group range is split at key-group
# boundaries into runs of about equal bytes once it holds more, so a large state spreads over
# executors even when the job ran with few subtasks; small states stay one partition per subtask.
# Each task costs about 0.1 s outside read() (bench/bench_spark.py --profile): 32 MB tasks spent 40 %
# of a 1 GB scan's task time on that; 128 MB ones keep it small and still give each core 4 tasks.
PARTITION_BYTES = 128 << 20
_META_CACHE_SIZE = 8
# A file to append each state partition's read() timing to (bench/bench_spark.py --profile).
READ_PROFILE_ENV = "STATECAT_READ_PROFILE"
_meta_cache: dict[str, StateMeta] = {}


def _profiled(
    conform: Callable[[pa.RecordBatch], pa.RecordBatch], batches: Iterable[pa.RecordBatch], log_path: str
) -> Iterator[pa.RecordBatch]:
    """The state batches of one partition, timing decoding, conforming and what Spark does between
    batches (serialising them to the JVM); one JSON line per partition appended to ``log_path``."""
    times = dict.fromkeys(("decode_s", "conform_s", "consumer_s"), 0.0)
    rows = count = size = 0
    started = clock = time.perf_counter()
    for batch in batches:
        now = time.perf_counter()
        times["decode_s"] += now - clock
        if batch.num_rows:
            batch = conform(batch)
            rows, count, size = rows + batch.num_rows, count + 1, size + batch.nbytes
            clock = time.perf_counter()
            times["conform_s"] += clock - now
            yield batch
            now = time.perf_counter()
            times["consumer_s"] += now - clock
        clock = now
    record = {k: round(v, 4) for k, v in times.items()}
    record.update(
        rows=rows, batches=count, bytes=size, total_s=round(time.perf_counter() - started, 4), pid=os.getpid()
    )
    with open(log_path, "a") as log:
        log.write(json.dumps(record) + "\n")


def _projection(full: pa.Schema, target: pa.Schema) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
    """A function from batches of ``full`` to batches of ``target``: its columns, and of a struct
    (also inside a list or map) only the fields it names, as Spark prunes nested fields too."""
    if target.equals(full):
        return lambda batch: batch
    names = target.names
    if all(target.field(name).type == full.field(name).type for name in names):
        return lambda batch: batch.select(names)  # keeps the row count with no columns (count(*))
    # Arrow casts a struct to one with a subset of its fields by name, sharing the children's buffers.
    return lambda batch: pa.RecordBatch.from_arrays([batch.column(f.name).cast(f.type) for f in target], schema=target)


class StatecatQueryError(StatecatError):
    """A state could not be read while Spark ran a query; names savepoint, operator and state."""


def _state_meta(path: str, descriptors: str | None = None, classpath: tuple[str, ...] = ()) -> StateMeta:
    """StateMeta of a savepoint, cached per Python worker (workers are reused across tasks).

    ``descriptors``: the descriptor file a table was attached with (``TableRef.descriptors``);
    ``classpath``: the job's classes typing its Kryo state (``TableRef.classpath``)."""
    from statecat.statemeta.descriptors import with_classpath
    from statecat.statemeta.model import load_state_meta

    cache_key = "\0".join([path, descriptors or "", *classpath])
    meta = _meta_cache.get(cache_key)
    if meta is None:
        meta = load_state_meta(path, descriptors=with_classpath(descriptors, classpath))
        if len(_meta_cache) >= _META_CACHE_SIZE:
            _meta_cache.pop(next(iter(_meta_cache)))
        _meta_cache[cache_key] = meta
    return meta


def _query_error(ref: TableRef, exc: Exception, *, attached: bool = False) -> StatecatQueryError:
    if attached and isinstance(exc, SavepointNotFoundError):
        from statecat.catalog.spark.relocation import is_missing, missing_error

        if is_missing(ref.savepoint):  # a catalog table whose savepoint moved or was deleted
            return StatecatQueryError(str(missing_error(ref.savepoint)))
    return StatecatQueryError(f"cannot read {ref.describe()}: {exc}")


def key_group_bytes(location: KeyedLocation) -> dict[int, int]:
    """Bytes of each key-group of a keyed location that holds data, from the handle's offsets.

    A native RocksDB instance has no per-key-group offsets: its files' bytes are spread evenly
    over its key-groups (keys hash uniformly into them)."""
    if location.native is not None:
        share = location.native.size // max(location.native.num_key_groups, 1)
        return {location.start_key_group + i: share for i in range(location.native.num_key_groups)}
    starts = sorted(o for o in location.offsets if o > 0)
    ends = dict(zip(starts, starts[1:] + [location.stream.size]))
    return {location.start_key_group + i: ends[o] - o for i, o in enumerate(location.offsets) if o > 0}


def balanced_key_groups(
    location: KeyedLocation, key_groups: tuple[int, ...] | None, target_bytes: int
) -> list[tuple[int, ...]]:
    """The location's key-groups (or the given subset) in as many consecutive runs of about equal
    bytes as runs of ``target_bytes`` they fill (at least one): tasks of one size, so no core idles
    on a short last run while another still reads a full one."""
    sizes = key_group_bytes(location)
    groups = (
        key_groups
        if key_groups is not None
        else tuple(range(location.start_key_group, location.start_key_group + location.num_key_groups))
    )
    total = sum(sizes.get(g, 0) for g in groups)
    runs = max(1, round(total / target_bytes))
    chunks: list[tuple[int, ...]] = []
    current: list[int] = []
    done = 0
    for group in groups:
        current.append(group)
        done += sizes.get(group, 0)
        # Cut where the bytes read so far pass the next equal share (a key-group is never split).
        if len(chunks) < runs - 1 and done * runs >= total * (len(chunks) + 1):
            chunks.append(tuple(current))
            current = []
    if current:
        chunks.append(tuple(current))
    return chunks


_reads_started = 0


def _freeze_loaded_objects() -> None:
    """At the start of a Python worker's second read: moves the objects alive then (modules,
    pyarrow, numba's compiled functions and type caches, statecat's) out of the garbage collector's
    reach. Spark's daemon runs gc.collect() after every task of a reused worker, and walking them
    took 30-50 ms per task. Not at the first read: most of them are created by it (lazy imports,
    compiled functions loaded from numba's cache)."""
    global _reads_started
    _reads_started += 1
    if _reads_started == 2:
        gc.collect()
        gc.freeze()


class StatePartition(InputPartition):
    """One task: a reader Partition (subtask, optional key-group subset) of one state."""

    def __init__(self, partition: Partition, state_kind: str, keys: tuple | None = None):
        self.partition = partition  # statecat.readers.Partition (picklable)
        self.state_kind = state_kind
        self.keys = keys  # only rows of these keys (their key-groups are the partition's); None: all


class OperatorKeyedPartition(InputPartition):
    """One task of an operator table: every wanted keyed state of one subtask (optionally a run of its
    key-groups), read in one pass over their shared key-group bytes."""

    def __init__(self, operator_id: str, subtask: int, key_groups: tuple[int, ...] | None, kinds: dict[str, str]):
        self.operator_id = operator_id
        self.subtask = subtask
        self.key_groups = key_groups
        self.kinds = kinds  # state name -> kind, in the operator's order


class FlinkStateDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def _ref(self, schema: StructType | None = None) -> TableRef:
        ref = ref_from_schema(schema) or ref_from_options(self.options)
        if ref is None:
            raise StatecatError(
                "the flinkstate source needs a savepoint",
                hint="Use spark.read.format('flinkstate').option('path', SAVEPOINT).option('state', NAME), "
                "or query a table that `statecat attach` registered",
            )
        return ref

    def schema(self) -> StructType:
        ref = self._ref()
        try:
            return spark_schema(
                ref, _state_meta(ref.savepoint, ref.descriptors, ref.classpath) if ref.kind == "state" else None
            )
        except StatecatError as exc:
            raise _query_error(ref, exc) from None

    def reader(self, schema: StructType) -> FlinkStateReader:
        # Catalog tables reach the source through their schema only; reads name their path in options.
        return FlinkStateReader(self._ref(schema), schema, attached=ref_from_options(self.options) is None)


class FlinkStateReader(DataSourceReader):
    def __init__(self, ref: TableRef, schema: StructType, *, attached: bool = False):
        from pyspark.sql.pandas.types import to_arrow_schema

        self.ref = ref
        self.attached = attached  # a table `statecat attach` created (its savepoint path is the registry's)
        self.schema = schema
        # What Spark checks the batches against (same field names, nullability, timestamp zones).
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self.keys: set | None = None  # pushed key = / IN values; None: no key filter
        self.state_names: set | None = None  # pushed state_name filter of operator tables
        self.databases: set | None = None  # pushed database filter of statecat.states / .operators / .key_view
        self.sides: dict[str, set] = {}  # pushed a = / b = of statecat.diff (catalog/spark/sql_forms.py)
        self.read_schema = self.arrow_schema  # what a columnar scan sends: the columns a query reads

    # -- planning (driver)

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        for f in filters:
            literals = (f.value,) if isinstance(f, EqualTo) else tuple(f.value) if isinstance(f, In) else None
            # Only scalar literals: arrays or structs compared to a key are left to Spark.
            if literals is not None and len(cast("EqualTo | In", f).attribute) == 1 and self._scalars(literals):
                values = {v for v in literals if v is not None}  # key = NULL matches no row
                column = cast("EqualTo | In", f).attribute[0].lower()
                if column == "key" and self.ref.kind in ("state", "key_view"):
                    self.keys = values if self.keys is None else self.keys & values
                elif (column, self.ref.kind) in (("state_name", "operator"), ("state", "diff")):
                    self.state_names = values if self.state_names is None else self.state_names & values
                elif column == "database" and self.ref.kind in ("states", "operators", "key_view"):
                    self.databases = values if self.databases is None else self.databases & values
                elif column in ("a", "b") and self.ref.kind == "diff":
                    self.sides[column] = values & self.sides.get(column, values)
            # Spark evaluates the filter too: pushdown prunes key-groups, the exact match stays Spark's.
            yield f

    @staticmethod
    def _scalars(values: tuple) -> bool:
        return all(v is None or isinstance(v, (str, int, float, bool)) for v in values)

    def partitions(self) -> Sequence[InputPartition]:
        ref = self.ref
        if ref.kind == "state_meta":
            return [InputPartition(None)]
        if ref.kind in ("states", "operators"):
            from statecat.catalog.spark.catalog_views import catalog_partitions

            try:  # one task per registered savepoint
                return catalog_partitions(ref.savepoint, self.databases) or [InputPartition(None)]
            except StatecatError as exc:
                raise StatecatQueryError(str(exc)) from None
        if ref.kind in ("key_view", "diff"):
            from statecat.catalog.spark.sql_forms import sql_form_partitions

            try:  # key_view: one task per savepoint; diff: per state and key-group range
                return sql_form_partitions(
                    ref.kind,
                    ref.savepoint,
                    keys=self.keys,
                    databases=self.databases,
                    sides=self.sides,
                    states=self.state_names,
                ) or [InputPartition(None)]
            except StatecatError as exc:
                raise StatecatQueryError(str(exc)) from None
        try:
            meta = _state_meta(ref.savepoint, ref.descriptors, ref.classpath)
            # A state table's ref names its state, an operator table's its operator (tables.TableRef).
            if ref.kind == "state":
                return self._state_partitions(meta, cast(str, ref.state), ref.operator) or [InputPartition(None)]
            op = meta.operator(cast(str, ref.operator))
            wanted = [state for state in op.states if self.state_names is None or state.name in self.state_names]
            parts: list[InputPartition] = []
            for state in wanted:
                if not state.is_keyed:
                    parts.extend(self._state_partitions(meta, state.name, op.id))
            parts.extend(self._operator_keyed_partitions(op, [state for state in wanted if state.is_keyed]))
            return parts or [InputPartition(None)]
        except StatecatError as exc:
            # One frame in the traceback Spark shows, as in read().
            failure = _query_error(ref, exc, attached=self.attached)
            raise failure from None

    @staticmethod
    def _operator_keyed_partitions(op: OperatorMeta, states: list[StateInfo]) -> list[OperatorKeyedPartition]:
        """Per subtask, runs of key-groups of about equal bytes; each covers every keyed state."""
        kinds = {state.name: state.kind for state in states}
        locations: dict[int, KeyedLocation] = {}  # subtask -> a location of its keyed stream
        for state in states:
            for location in state.keyed_locations:  # keyed states only
                locations.setdefault(location.subtask, location)
        parts = []
        for subtask, location in sorted(locations.items()):
            chunks = balanced_key_groups(location, None, PARTITION_BYTES)
            for chunk in chunks if len(chunks) > 1 else [None]:
                parts.append(OperatorKeyedPartition(op.id, subtask, chunk, kinds))
        return parts

    def _state_partitions(self, meta: StateMeta, state_name: str, operator: str | None) -> list[StatePartition]:
        from statecat.readers import Partition, SavepointReader
        from statecat.readers.keygroups import key_group_for

        reader = SavepointReader(meta)
        op, state = meta.find_state(state_name, operator)
        key_groups = keys = None
        if self.keys is not None and state.is_keyed:
            try:
                key_groups = {key_group_for(k, state.key_type, op.max_parallelism) for k in self.keys}
                keys = tuple(sorted(self.keys, key=repr))
            except (StatecatError, TypeError, ValueError, KeyError):
                key_groups = None  # keys of a type statecat cannot hash: read everything, Spark filters
        out = []
        for part in reader.partitions(state.name, op.id, key_groups=key_groups):
            if not state.is_keyed:
                out.append(StatePartition(part, state.kind))
                continue
            location = next(loc for loc in state.keyed_locations if loc.subtask == part.subtask)
            chunks = balanced_key_groups(location, part.key_groups, PARTITION_BYTES)
            if len(chunks) == 1 and part.key_groups is None:
                out.append(StatePartition(part, state.kind, keys))
                continue
            out.extend(
                StatePartition(
                    Partition(part.savepoint, part.operator_id, part.state, part.subtask, chunk), state.kind, keys
                )
                for chunk in chunks
            )
        return out

    def project(self, read_schema: StructType) -> None:
        """A columnar scan (catalog/spark/columnar_worker.py) reads only these columns and struct fields."""
        from pyspark.sql.pandas.types import to_arrow_schema

        self.read_schema = to_arrow_schema(read_schema, timezone="UTC")

    # -- reading (executors)

    def read_columns(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The partition's batches in ``read_schema`` (a columnar scan's)."""
        project = _projection(self.arrow_schema, self.read_schema)
        for batch in self.read(partition):
            yield project(batch)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        _freeze_loaded_objects()
        ref = self.ref
        if ref.kind == "state_meta":
            try:
                yield from self._read_state_meta()
            except StatecatError as exc:
                # The one frame of the traceback Spark shows (see below); a comment on the raise line
                # would make Python underline it.
                failure = _query_error(ref, exc, attached=self.attached)
                raise failure from None
            return
        if ref.kind in ("states", "operators"):
            from statecat.catalog.spark.catalog_views import SavepointPartition, catalog_batches

            if isinstance(partition, SavepointPartition):
                try:
                    yield from catalog_batches(ref.kind, partition, self.arrow_schema)
                except StatecatError as exc:
                    raise StatecatQueryError(str(exc)) from None
            return
        if ref.kind in ("key_view", "diff"):
            from statecat.catalog.spark.sql_forms import sql_form_batches

            try:
                yield from sql_form_batches(ref.kind, partition, self.arrow_schema)
            except StatecatError as exc:
                raise StatecatQueryError(str(exc)) from None
            return
        if isinstance(partition, OperatorKeyedPartition):
            yield from self._read_operator_keyed(partition)
            return
        if not isinstance(partition, StatePartition):
            return  # nothing to read (no key-group can hold the pushed keys, or no states)
        part = partition.partition
        try:
            from statecat.readers import SavepointReader

            meta = _state_meta(ref.savepoint, ref.descriptors, ref.classpath)
            reader = SavepointReader(meta, unpickle=ref.unpickle)
            keys = list(partition.keys) if partition.keys is not None else None
            batches = reader.read_partition(part, keys=keys)
            if ref.kind == "state" and os.environ.get(READ_PROFILE_ENV):
                yield from _profiled(self._conform, batches, os.environ[READ_PROFILE_ENV])
            elif ref.kind == "state":
                for batch in batches:
                    if batch.num_rows:
                        yield self._conform(batch)
            else:
                yield from self._as_json(batches, part.state, partition.state_kind, part.subtask)
        except StatecatError as exc:
            label = ref.operator_label if part.operator_id == ref.operator else None
            if label is None:
                try:
                    label = _state_meta(ref.savepoint, ref.descriptors, ref.classpath).operator(part.operator_id).label
                except StatecatError:
                    label = part.operator_id
            failure = _query_error(
                TableRef(ref.kind, ref.savepoint, part.operator_id, part.state, operator_label=label),
                exc,
                attached=self.attached,
            )
            # Raised here, the outermost reader frame, without its cause: the Python traceback Spark
            # embeds in its error (and spark-sql prints) is this one line plus statecat's message.
            raise failure from None

    def _read_operator_keyed(self, partition: OperatorKeyedPartition) -> Iterator[pa.RecordBatch]:
        ref = self.ref
        try:
            from statecat.readers import SavepointReader

            reader = SavepointReader(_state_meta(ref.savepoint, ref.descriptors, ref.classpath), unpickle=ref.unpickle)
            key_groups = set(partition.key_groups) if partition.key_groups is not None else None
            for state, batch in reader.operator_batches(
                partition.operator_id, list(partition.kinds), key_groups=key_groups, subtasks={partition.subtask}
            ):
                yield from self._as_json([batch], state, partition.kinds[state], partition.subtask)
        except StatecatError as exc:
            # As read() does for one state: the one frame Spark shows (the reader's message names the state).
            failure = _query_error(
                TableRef(ref.kind, ref.savepoint, partition.operator_id, None, operator_label=ref.operator_label),
                exc,
                attached=self.attached,
            )
            raise failure from None

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if batch.schema.equals(self.arrow_schema):
            return batch
        try:
            return batch.cast(self.arrow_schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
            raise StatecatError(
                f"the state's decoded columns {batch.schema.to_string(show_schema_metadata=False)!s} no longer fit "
                f"the table's columns: {exc}",
                hint="The table was registered from a different savepoint layout; attach the savepoint again",
            ) from None

    def _as_json(
        self, batches: Iterable[pa.RecordBatch], state_name: str, kind: str, subtask: int | None
    ) -> Iterator[pa.RecordBatch]:
        from statecat.catalog.render import json_value

        def text(value: Any) -> str | None:  # struct fields stay in Flink's order
            return None if value is None else json.dumps(json_value(value), ensure_ascii=False)

        for batch in batches:
            if not batch.num_rows:
                continue
            rows = batch.to_pylist()
            keyed = "key" in batch.schema.names
            columns = {
                "state_name": [state_name] * len(rows),
                "kind": [kind] * len(rows),
                "subtask": [subtask if keyed else row["subtask"] for row in rows],
                "key": [text(row["key"]) if keyed else None for row in rows],
                "namespace": [text(row["namespace"]) if keyed else None for row in rows],
                "value": [text(row["value"]) for row in rows],
            }
            yield pa.RecordBatch.from_arrays(
                [pa.array(columns[f.name], type=f.type) for f in self.arrow_schema], schema=self.arrow_schema
            )

    def _read_state_meta(self) -> Iterator[pa.RecordBatch]:
        rows = state_meta_rows(
            _state_meta(self.ref.savepoint, self.ref.descriptors, self.ref.classpath)
        )  # errors: read() wraps them
        if rows:
            columns = list(zip(*rows))
            arrays = [pa.array(list(c), type=f.type) for c, f in zip(columns, self.arrow_schema)]
            yield pa.RecordBatch.from_arrays(arrays, schema=self.arrow_schema)


__all__ = [
    "PARTITION_BYTES",
    "FlinkStateDataSource",
    "FlinkStateReader",
    "OperatorKeyedPartition",
    "StatePartition",
    "StatecatQueryError",
    "balanced_key_groups",
]
