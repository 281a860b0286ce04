"""Arrow types of decoded values, following the type descriptors (and their Spark SQL types)."""

from __future__ import annotations

import pyarrow as pa

from statecat.statemeta.model import StateInfo
from statecat.statemeta.types import STRUCT_KINDS, WINDOW_FIELDS, TypeDescriptor, key_column_type

# Spark keeps microseconds; nanoseconds below that are truncated (documented in the README).
TIMESTAMP = pa.timestamp("us")
TIMESTAMP_UTC = pa.timestamp("us", tz="UTC")

_SCALARS = {
    "boolean": pa.bool_(),
    "byte": pa.int8(),
    "short": pa.int16(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "char": pa.string(),
    "string": pa.string(),
    "bytes": pa.binary(),
    "void": pa.string(),
    "void_namespace": pa.string(),
    "global_window": pa.string(),
    "bigint": pa.string(),
    "bigdec": pa.string(),
    "sql_date": pa.date32(),
    "sql_time": pa.string(),
    "sql_timestamp": TIMESTAMP,
    "date": TIMESTAMP_UTC,
    "instant": TIMESTAMP_UTC,
    "local_date": pa.date32(),
    "local_time": pa.string(),
    "local_datetime": TIMESTAMP,
    "enum": pa.string(),
    "string_data": pa.string(),
    "raw": pa.binary(),
    "pickled": pa.string(),
    "timestamp_data": TIMESTAMP,
    "timer": pa.int64(),
    "CHAR": pa.string(),
    "VARCHAR": pa.string(),
    "BOOLEAN": pa.bool_(),
    "BINARY": pa.binary(),
    "VARBINARY": pa.binary(),
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "DATE": pa.date32(),
    "TIME_WITHOUT_TIME_ZONE": pa.string(),
    "TIMESTAMP_WITHOUT_TIME_ZONE": TIMESTAMP,
    "TIMESTAMP_WITH_LOCAL_TIME_ZONE": TIMESTAMP_UTC,
    "RAW": pa.binary(),
    "NULL": pa.string(),
    "tuple0": pa.string(),
    "kryo_any": pa.string(),  # a Kryo value of a class known only at run time, as JSON text
    "dewey_number": pa.string(),  # CEP's version of a partial match, as DeweyNumber.toString() writes it ("1.0.2")
}


def arrow_type(desc: TypeDescriptor) -> pa.DataType:
    kind = desc.kind
    if kind in _SCALARS:
        return _SCALARS[kind]
    if kind in ("decimal_data", "DECIMAL"):
        precision, scale = desc.attr("precision"), desc.attr("scale")
        if not (
            isinstance(precision, int) and isinstance(scale, int) and 0 <= scale <= precision <= 38 and precision > 0
        ):
            raise TypeError(
                f"no Arrow type for {desc.describe()}: Flink's DECIMAL has 1 to 38 digits and a scale within them"
            )
        return pa.decimal128(precision, scale)
    if kind in ("nullable", "ttl", "external", "raw_value", "pyflink", "kryo"):
        return arrow_type(desc.fields[0][1])
    if kind == "avro":  # the column type of the writer schema (statemeta.avro.column_type)
        return arrow_type(desc.fields[0][1])
    if kind in ("list", "primitive_array", "string_array", "generic_array", "ARRAY", "array_data"):
        return pa.list_(arrow_type(desc.fields[0][1]))
    if kind in ("map", "MAP", "map_data"):
        return pa.map_(arrow_type(desc.child("key")), arrow_type(desc.child("value")))
    if kind == "MULTISET":
        return pa.map_(arrow_type(desc.child("element")), pa.int32())
    if kind in WINDOW_FIELDS:
        return pa.struct([pa.field(name, pa.int64()) for name in WINDOW_FIELDS[kind]])
    if kind in STRUCT_KINDS:
        if not desc.fields:
            return pa.string()
        return pa.struct([pa.field(name, arrow_type(t)) for name, t in desc.fields])
    raise TypeError(f"no Arrow type for {desc.describe()}")


def state_schema(state: StateInfo) -> pa.Schema:
    """Keyed states: (key, namespace, value), and ttl_timestamp for a state with TTL (readers/codecs/ttl.py);
    operator states: (value, subtask)."""
    if state.is_keyed:
        from statecat.readers.codecs.ttl import TTL_COLUMN, ttl_arrow_type, ttl_layout

        fields = [
            pa.field("key", arrow_type(key_column_type(state.key_type))),  # keyed: has one
            pa.field("namespace", arrow_type(state.namespace) if state.namespace is not None else pa.string()),
            pa.field("value", arrow_type(state.value)),
        ]
        layout = ttl_layout(state)
        if layout is not None:
            fields.append(pa.field(TTL_COLUMN, ttl_arrow_type(state, layout)))
        return pa.schema(fields)
    return pa.schema([pa.field("value", arrow_type(state.value)), pa.field("subtask", pa.int32())])
