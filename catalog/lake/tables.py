"""The lake's layout, its tables' schemas, and the Arrow → Delta type rule.

A lake is a directory (local path or ``s3://``/``gs://``/``az://`` URI) of Delta tables::

    LAKE/snapshots          one row per materialized savepoint or checkpoint (the commit marker)
    LAKE/state_meta         one row per snapshot × state: operator, state, kind, types, table
    LAKE/state_stats        one row per snapshot × state × subtask × key-group: entries, bytes
    LAKE/states/<name>      one table per logical state, partitioned by snapshot_id

Delta has no unsigned, null, time, duration, large or dictionary types. The rule: unsigned
integers widen to the next signed type (uint64 to decimal(20,0)), the null type and time become
strings (nulls, ``HH:MM:SS[.ffffff]``), durations become int64 microseconds, large and view
strings/binaries/lists become their plain forms, dictionaries their value type, timestamps keep
microseconds (Delta's precision) with ``UTC`` for zoned ones. Nested types convert field by field.
The readers' types are already Spark's, so today only the null type occurs in practice.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from deltalake import DeltaTable

SNAPSHOTS = "snapshots"
STATE_META = "state_meta"
STATE_STATS = "state_stats"
STATES_DIR = "states"
PARTITION_COLUMN = "snapshot_id"
# Columns every state table starts with, before the state's own key/namespace/value (or value/subtask).
SNAPSHOT_COLUMNS = [
    pa.field("snapshot_id", pa.string()),
    pa.field("checkpoint_id", pa.int64()),
    pa.field("taken_at", pa.timestamp("us", tz="UTC")),
]

SNAPSHOTS_SCHEMA = pa.schema(
    [
        pa.field("snapshot_id", pa.string()),
        pa.field("path", pa.string()),
        pa.field("checkpoint_id", pa.int64()),
        pa.field("is_savepoint", pa.bool_()),
        pa.field("taken_at", pa.timestamp("us", tz="UTC")),
        pa.field("taken_at_source", pa.string()),
        pa.field("job_id", pa.string()),
        pa.field("metadata_sha256", pa.string()),
        pa.field("metadata_version", pa.int32()),
        pa.field("status", pa.string()),  # complete | partial (some states unsupported) | unsupported
        pa.field("unsupported", pa.list_(pa.string())),
        pa.field("states", pa.int32()),
        pa.field("rows", pa.int64()),
        pa.field("statecat_version", pa.string()),
        pa.field("materialized_at", pa.timestamp("us", tz="UTC")),
    ]
)

STATE_META_SCHEMA = pa.schema(
    SNAPSHOT_COLUMNS
    + [
        pa.field("operator_id", pa.string()),
        pa.field("operator_uid", pa.string()),
        pa.field("operator_name", pa.string()),
        pa.field("parallelism", pa.int32()),
        pa.field("max_parallelism", pa.int32()),
        pa.field("state_name", pa.string()),
        pa.field("kind", pa.string()),
        pa.field("state_type", pa.string()),
        pa.field("key_type", pa.string()),
        pa.field("namespace_type", pa.string()),
        pa.field("value_type", pa.string()),
        pa.field("decode_status", pa.string()),
        pa.field("raw_reasons", pa.list_(pa.string())),
        pa.field("table_name", pa.string()),  # the table under LAKE/states/, null when not materialized
        pa.field("materialized", pa.bool_()),
        pa.field("rows", pa.int64()),
    ]
)

STATE_STATS_SCHEMA = pa.schema(
    SNAPSHOT_COLUMNS
    + [
        pa.field("operator_id", pa.string()),
        pa.field("operator", pa.string()),  # the operator's uid, else name, else id
        pa.field("state_name", pa.string()),
        pa.field("table_name", pa.string()),
        pa.field("subtask", pa.int32()),
        # Keyed states: the key-group. Operator states: null (one row per subtask).
        pa.field("key_group", pa.int32()),
        pa.field("entries", pa.int64()),
        # Keyed states: bytes of the key-group in the operator's stream, which holds all the operator's
        # keyed states of that key-group together (the same figure on each of them: sum it once per
        # operator and key-group). Operator states: the state's own bytes in the subtask's stream.
        pa.field("bytes", pa.int64()),
    ]
)


class Lake:
    """Where the lake's tables live, and how deltalake reaches them."""

    def __init__(self, uri: str):
        uri = str(uri).rstrip("/")
        if "://" not in uri:
            uri = os.path.abspath(uri)
        self.uri = uri
        self.storage_options = storage_options_for(uri)

    def table_uri(self, name: str) -> str:
        return posixpath.join(self.uri, name) if "://" in self.uri else os.path.join(self.uri, name)

    def state_table_uri(self, table: str) -> str:
        return self.table_uri(f"{STATES_DIR}/{table}")

    def open(self, name: str) -> DeltaTable | None:
        """The Delta table at LAKE/name, or None when none was written yet."""
        from deltalake import DeltaTable

        uri = self.table_uri(name)
        if not DeltaTable.is_deltatable(uri, storage_options=self.storage_options):
            return None
        return DeltaTable(uri, storage_options=self.storage_options)

    def read(self, name: str) -> pa.Table | None:
        """The whole of a (small) lake table, or None when none was written yet."""
        table = self.open(name)
        return None if table is None else read_delta(table)

    def state_tables(self) -> list[str]:
        """Names of the state tables written so far (listed from LAKE/states/)."""
        import pyarrow.fs as pafs

        filesystem, base = filesystem_for(self.table_uri(STATES_DIR))
        infos = filesystem.get_file_info(pafs.FileSelector(base, allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)


def read_delta(table: DeltaTable) -> pa.Table:
    """A Delta table's rows through deltalake's own engine.

    Not through ``to_pyarrow_table()``: a process that scanned with pyarrow's dataset threads next to
    deltalake's runtime sometimes aborts at exit ("terminate called without an active exception").
    """
    from deltalake import QueryBuilder

    reader = QueryBuilder().register("t", table).execute("SELECT * FROM t")
    return pa.RecordBatchReader.from_stream(reader).read_all()


def storage_options_for(uri: str) -> dict[str, str] | None:
    """deltalake's storage options for an object-store URI, from the usual environment variables.

    delta-rs reads most AWS_* variables itself; these are passed explicitly so a lake on an
    S3-compatible server (``AWS_ENDPOINT_URL=http://...``) works without further set-up.
    """
    if not uri.startswith(("s3://", "s3a://")):
        return None
    options = {}
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_ENDPOINT_URL",
        "AWS_ALLOW_HTTP",
        "AWS_S3_ALLOW_UNSAFE_RENAME",
        "AWS_S3_LOCKING_PROVIDER",
        "AWS_CONDITIONAL_PUT",
    ):
        if os.environ.get(name):
            options[name] = os.environ[name]
    if "AWS_REGION" not in options and os.environ.get("AWS_DEFAULT_REGION"):
        options["AWS_REGION"] = os.environ["AWS_DEFAULT_REGION"]
    endpoint = options.get("AWS_ENDPOINT_URL", "")
    if endpoint.startswith("http://"):
        options.setdefault("AWS_ALLOW_HTTP", "true")
    return options


def filesystem_for(uri: str) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and the path in it (S3 endpoints from AWS_ENDPOINT_URL, as pyarrow reads it)."""
    import pyarrow.fs as pafs

    if "://" in uri:
        return pafs.FileSystem.from_uri(uri)
    return pafs.LocalFileSystem(), uri


# ----------------------------------------------------------------------------- Arrow → Delta types


def delta_type(t: pa.DataType) -> pa.DataType:
    """The type a column of type ``t`` is stored as in Delta (see the module's rule)."""
    if pa.types.is_null(t) or pa.types.is_time(t):
        return pa.string()
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t):
        return pa.binary()
    if pa.types.is_unsigned_integer(t):
        return {8: pa.int16(), 16: pa.int32(), 32: pa.int64()}.get(t.bit_width, pa.decimal128(20, 0))
    if pa.types.is_duration(t):
        return pa.int64()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC" if t.tz else None)
    if pa.types.is_date64(t):
        return pa.date32()
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_dictionary(t):
        return delta_type(t.value_type)
    if pa.types.is_decimal256(t) and t.precision <= 38:
        return pa.decimal128(t.precision, t.scale)
    if pa.types.is_map(t):
        return pa.map_(delta_type(t.key_type), delta_type(t.item_type))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_list_view(t):
        return pa.list_(delta_type(t.value_type))
    if pa.types.is_struct(t):
        if t.num_fields == 0:  # Delta has no empty struct
            return pa.string()
        return pa.struct([pa.field(f.name, delta_type(f.type), f.nullable) for f in t])
    return t


def delta_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, delta_type(f.type), f.nullable) for f in schema])


def to_delta(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with every column converted to ``schema``'s Delta types."""
    if batch.schema.equals(schema):
        return batch
    columns = [_convert(batch.column(i), schema.field(i).type) for i in range(batch.num_columns)]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _convert(array: pa.Array, target: pa.DataType) -> pa.Array:
    source = array.type
    if source.equals(target):
        return array
    if pa.types.is_null(source):
        return pa.nulls(len(array), target)
    if pa.types.is_time(source):
        return pc.cast(pc.cast(array, pa.time64("us")), pa.string())
    if pa.types.is_duration(source):
        return pc.cast(pc.cast(array, pa.duration("us")), pa.int64())
    if pa.types.is_dictionary(source):
        return _convert(array.dictionary_decode(), target)
    if pa.types.is_struct(source) and pa.types.is_struct(target):
        children = [_convert(array.field(i), target.field(i).type) for i in range(source.num_fields)]
        return pa.StructArray.from_arrays(
            children, fields=list(target), mask=array.is_null() if array.null_count else None
        )
    if pa.types.is_struct(source) and pa.types.is_string(target):  # empty struct
        return pa.nulls(len(array), pa.string())
    if pa.types.is_map(source) and pa.types.is_map(target):
        keys = _convert(array.keys, target.key_type)
        items = _convert(array.items, target.item_type)
        return pa.MapArray.from_arrays(
            array.offsets, keys, items, type=target, mask=array.is_null() if array.null_count else None
        )
    if (pa.types.is_list(source) or pa.types.is_large_list(source)) and pa.types.is_list(target):
        values = _convert(array.flatten(), target.value_type)
        offsets = pc.cast(array.offsets, pa.int32())
        if array.offset or array.null_count:
            # flatten() drops null slots' values; rebuild offsets from value lengths to match.
            lengths = pc.fill_null(pc.list_value_length(array), 0)
            offsets = pa.array([0] + list(_cumsum(lengths.to_pylist())), pa.int32())
        return pa.ListArray.from_arrays(
            offsets, values, type=target, mask=array.is_null() if array.null_count else None
        )
    return pc.cast(array, target)


def _cumsum(values: Iterable[int]) -> Iterator[int]:
    total = 0
    for v in values:
        total += v
        yield total
