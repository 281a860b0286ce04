"""Portable type descriptors: what a Flink serializer writes, independent of Java and of Spark.

A ``TypeDescriptor`` names an *encoding*. Lower-case kinds are Flink serializers (``long`` is
``LongSerializer``, ``string`` is ``StringSerializer``, ``rowdata`` is the table runtime's
``RowDataSerializer``); upper-case kinds are SQL logical types as they sit inside the table runtime's
binary formats (``VARCHAR`` inside a BinaryRowData). ``raw`` is a value statecat cannot decode; it
keeps the serializer's class name and the reason. Descriptors serialise to JSON for ``stateInfo``
and give the Spark SQL type of the column they become.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# Java serializer kinds without children, with their Spark SQL type.
SCALAR_SQL_TYPES = {
    "boolean": "BOOLEAN",
    "byte": "TINYINT",
    "short": "SMALLINT",
    "int": "INT",
    "long": "BIGINT",
    "float": "FLOAT",
    "double": "DOUBLE",
    "char": "STRING",
    "string": "STRING",
    "bytes": "BINARY",
    "void": "STRING",
    "tuple0": "STRING",
    "void_namespace": "STRING",
    "global_window": "STRING",
    # Arbitrary precision: a decimal column could overflow, text never does.
    "bigint": "STRING",
    "bigdec": "STRING",
    "sql_date": "DATE",
    "sql_time": "STRING",
    "sql_timestamp": "TIMESTAMP_NTZ",
    "date": "TIMESTAMP",
    "instant": "TIMESTAMP",
    "local_date": "DATE",
    "local_time": "STRING",
    "local_datetime": "TIMESTAMP_NTZ",
    "enum": "STRING",
    "string_data": "STRING",
    "raw": "BINARY",
    "pickled": "STRING",
    "dewey_number": "STRING",
}

# SQL logical types (Flink's LogicalTypeRoot names) without children, with their Spark SQL type.
LOGICAL_SQL_TYPES = {
    "CHAR": "STRING",
    "VARCHAR": "STRING",
    "BOOLEAN": "BOOLEAN",
    "BINARY": "BINARY",
    "VARBINARY": "BINARY",
    "TINYINT": "TINYINT",
    "SMALLINT": "SMALLINT",
    "INTEGER": "INT",
    "BIGINT": "BIGINT",
    "FLOAT": "FLOAT",
    "DOUBLE": "DOUBLE",
    "DATE": "DATE",
    "TIME_WITHOUT_TIME_ZONE": "STRING",
    "TIMESTAMP_WITHOUT_TIME_ZONE": "TIMESTAMP_NTZ",
    "TIMESTAMP_WITH_LOCAL_TIME_ZONE": "TIMESTAMP",
    "RAW": "BINARY",
    "NULL": "STRING",
}

# CEP's NFA state and shared buffer (flink-cep), statecat's kind for each of their serializers.
CEP_KINDS = {
    "cep_event_id": "EVENT_ID",
    "cep_node_id": "NODE_ID",
    "cep_lockable": "LOCKABLE",
    "cep_shared_buffer_edge": "SHARED_BUFFER_EDGE",
    "cep_shared_buffer_node": "SHARED_BUFFER_NODE",
    "cep_computation_state": "COMPUTATION_STATE",
    "cep_nfa_state": "NFA_STATE",
}
STRUCT_KINDS = (
    "tuple",
    "row",
    "pojo",
    "rowdata",
    "ROW",
    "either",
    "broadcast_entry",
    "stream_element",
    "java_serialized",
    *CEP_KINDS,
)
# Window namespaces are structs of fixed fields: a TimeWindow's bounds (epoch ms), a CountWindow's id.
WINDOW_FIELDS = {"time_window": ("start", "end"), "count_window": ("id",)}


@dataclass(frozen=True)
class TypeDescriptor:
    kind: str
    fields: tuple[tuple[str, TypeDescriptor], ...] = ()
    attrs: tuple[tuple[str, Any], ...] = ()

    # -- construction helpers

    @staticmethod
    def of(kind: str, fields: Iterable[tuple[str, TypeDescriptor]] = (), **attrs: Any) -> TypeDescriptor:
        frozen = tuple(sorted((k, _freeze(v)) for k, v in attrs.items() if v is not None))
        return TypeDescriptor(kind, tuple(fields), frozen)

    @staticmethod
    def raw(serializer: str, reason: str) -> TypeDescriptor:
        return TypeDescriptor.of("raw", serializer=serializer, reason=reason)

    def attr(self, name: str, default: Any = None) -> Any:
        for key, value in self.attrs:
            if key == name:
                return value
        return default

    def child(self, name: str) -> TypeDescriptor:
        for key, value in self.fields:
            if key == name:
                return value
        raise KeyError(f"{self.kind} has no field {name!r}")

    # -- decode status

    def raw_reasons(self) -> list[str]:
        """Why (parts of) this type come out as raw bytes; empty when it decodes fully."""
        return self._reasons(stored_fields=False)

    def bytes_reasons(self) -> list[str]:
        """Why parts of this type come out as bytes: raw_reasons(), and the SQL fields a binary row
        frames but statecat shows as stored (RAW, STRUCTURED_TYPE; decoding goes on around them)."""
        return self._reasons(stored_fields=True)

    def _reasons(self, stored_fields: bool) -> list[str]:
        if self.kind == "raw":
            return [f"{self.attr('serializer')}: {self.attr('reason')}"]
        if stored_fields and self.kind == "RAW":
            return [f"{self.attr('shown_as') or 'RAW'}: {self.attr('reason') or 'shown as stored'}"]
        return [reason for _, child in self.fields for reason in child._reasons(stored_fields)]

    @property
    def fixed_length(self) -> int | None:
        """Bytes the serializer always writes, or None when variable (Flink's getLength() < 0)."""
        return _FIXED_LENGTHS.get(self.kind)

    # -- renderings

    def sql_type(self) -> str:
        """The Spark SQL type of the column this type becomes."""
        kind = self.kind
        if kind in SCALAR_SQL_TYPES:
            return SCALAR_SQL_TYPES[kind]
        if kind in LOGICAL_SQL_TYPES:
            return LOGICAL_SQL_TYPES[kind]
        if kind in ("decimal_data", "DECIMAL"):
            return f"DECIMAL({self.attr('precision')},{self.attr('scale')})"
        if kind == "timestamp_data":
            return "TIMESTAMP_NTZ"
        if kind in ("nullable", "ttl", "external", "raw_value", "pyflink", "kryo"):
            return self.fields[0][1].sql_type()
        if kind == "kryo_any":
            return "STRING"
        if kind == "avro":  # the column type of the writer schema (statemeta.avro.column_type)
            return self.fields[0][1].sql_type()
        if kind in ("list", "primitive_array", "string_array", "generic_array", "ARRAY", "array_data"):
            return f"ARRAY<{self.fields[0][1].sql_type()}>"
        if kind in ("map", "MAP", "map_data"):
            return f"MAP<{self.child('key').sql_type()}, {self.child('value').sql_type()}>"
        if kind == "MULTISET":
            return f"MAP<{self.child('element').sql_type()}, INT>"
        if kind == "timer":
            return "BIGINT"
        if kind in WINDOW_FIELDS:
            return "STRUCT<" + ", ".join(f"{name}: BIGINT" for name in WINDOW_FIELDS[kind]) + ">"
        if kind in STRUCT_KINDS:
            if not self.fields:
                return "STRING"
            inner = ", ".join(f"{_sql_ident(name)}: {t.sql_type()}" for name, t in self.fields)
            return f"STRUCT<{inner}>"
        raise ValueError(f"no SQL type for kind {kind!r}")

    def describe(self) -> str:
        """A short human description (Flink-flavoured), e.g. ``MAP<STRING, LONG>``."""
        kind = self.kind
        if kind == "raw":
            return f"RAW({self.attr('serializer')})"
        if kind in ("nullable", "external", "raw_value"):
            return self.fields[0][1].describe()
        if kind == "kryo":
            return f"KRYO<{self.fields[0][1].describe()}>"
        if kind == "kryo_any":
            return f"ANY {self.attr('java')}"
        if kind == "pyflink":  # PyFlink coder bytes of a declared type (descriptor file)
            return self.attr("coder") if self.attr("layout") != "bag_all" else f"LIST<{self.attr('coder')}>"
        if kind == "ttl":
            return f"TTL<{self.fields[0][1].describe()}>"
        if kind == "avro":
            return f"AVRO {self.attr('record') or self.fields[0][1].describe()}"
        if kind in ("decimal_data", "DECIMAL"):
            return f"DECIMAL({self.attr('precision')}, {self.attr('scale')})"
        if kind == "timestamp_data":
            return f"TIMESTAMP({self.attr('precision')})"
        if kind in ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE", "TIME_WITHOUT_TIME_ZONE"):
            name = {
                "TIMESTAMP_WITHOUT_TIME_ZONE": "TIMESTAMP",
                "TIMESTAMP_WITH_LOCAL_TIME_ZONE": "TIMESTAMP_LTZ",
                "TIME_WITHOUT_TIME_ZONE": "TIME",
            }[kind]
            return f"{name}({self.attr('precision')})"
        if kind in ("CHAR", "VARCHAR", "BINARY", "VARBINARY"):
            length = self.attr("length")
            return "STRING" if kind == "VARCHAR" and length == 2147483647 else f"{kind}({length})"
        if kind in LOGICAL_SQL_TYPES or kind in ("ARRAY", "MAP", "MULTISET", "ROW"):
            if not self.fields:
                return kind
            if kind == "ROW":
                return "ROW<" + ", ".join(f"{n} {t.describe()}" for n, t in self.fields) + ">"
            return f"{kind}<" + ", ".join(t.describe() for _, t in self.fields) + ">"
        if kind == "rowdata":
            return "ROW<" + ", ".join(t.describe() for _, t in self.fields) + ">"
        if kind in ("list", "primitive_array", "string_array", "generic_array", "array_data"):
            return f"LIST<{self.fields[0][1].describe()}>"
        if kind in ("map", "map_data"):
            label = "SORTED_MAP" if self.attr("comparator") else "MAP"  # SortedMapSerializer: a TreeMap's entries
            return f"{label}<{self.child('key').describe()}, {self.child('value').describe()}>"
        if kind == "row" and self.attr("codec"):  # a struct statecat decodes (source splits): named, not spelled out
            return f"{self.attr('codec').upper()}<{', '.join(n for n, _ in self.fields)}>"
        if kind in ("tuple", "row", "pojo", "either"):
            label = {"tuple": "TUPLE", "row": "ROW", "pojo": f"POJO {self.attr('class')}", "either": "EITHER"}[kind]
            return f"{label}<" + ", ".join(f"{n} {t.describe()}" for n, t in self.fields) + ">"
        if kind == "timer":
            return f"TIMER<{self.child('key').describe()}, {self.child('namespace').describe()}>"
        if kind == "stream_element":
            return f"STREAM_ELEMENT<{self.child('value').describe()}>"
        if kind == "cep_lockable":
            return f"LOCKABLE<{self.child('value').describe()}>"
        if kind in CEP_KINDS:
            return CEP_KINDS[kind]
        if kind == "java_serialized":
            return "JAVA_SERIALIZED"
        if kind == "enum":
            return f"ENUM {self.attr('class')}"
        return kind.upper()

    # -- JSON (stateInfo)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for key, value in self.attrs:
            out[key] = _thaw(value)
        if self.fields:
            out["fields"] = [{"name": name, "type": t.to_json()} for name, t in self.fields]
        return out

    @staticmethod
    def from_json(data: dict[str, Any]) -> TypeDescriptor:
        attrs = {k: v for k, v in data.items() if k not in ("kind", "fields")}
        fields = tuple((f["name"], TypeDescriptor.from_json(f["type"])) for f in data.get("fields", ()))
        return TypeDescriptor.of(data["kind"], fields, **attrs)


_FIXED_LENGTHS = {
    "boolean": 1,
    "byte": 1,
    "short": 2,
    "int": 4,
    "long": 8,
    "float": 4,
    "double": 8,
    "char": 2,
    "void": 1,
    "tuple0": 1,
    "void_namespace": 1,
    "global_window": 1,
    "time_window": 16,
    "count_window": 8,
    "sql_date": 8,
    "sql_time": 8,
    "sql_timestamp": 12,
    "date": 8,
    "instant": 12,
    "local_date": 6,
    "local_time": 7,
    "local_datetime": 13,
}


def _freeze(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


def _sql_ident(name: str) -> str:
    return name if name.isidentifier() else "`" + name.replace("`", "``") + "`"


# Kinds whose encoding frames each part, so a raw part does not hide where the next one starts.
_FRAMED_CONTAINERS = ("rowdata", "ROW", "ARRAY", "MAP", "MULTISET", "array_data", "map_data", "broadcast_entry")


def collapse_raw(desc: TypeDescriptor) -> TypeDescriptor:
    """A type with a raw part inside an unframed encoding becomes raw as a whole.

    Inside a Tuple, POJO or list nothing says where a value of an unknown serializer ends, so the
    enclosing value can only be kept as bytes. Table runtime binary formats frame every field, so
    their raw parts stay raw on their own.
    """
    if desc.kind == "raw" or not desc.fields:
        return desc
    if desc.kind in _FRAMED_CONTAINERS:
        return TypeDescriptor(desc.kind, tuple((n, collapse_raw(t)) for n, t in desc.fields), desc.attrs)
    reasons = desc.raw_reasons()
    if reasons:
        # With Kryo parts inside, the job's classes may type it later (statemeta.kryo.resolve_kryo).
        uncollapsed = json.dumps(desc.to_json()) if has_kryo(desc) else None
        return TypeDescriptor.of("raw", serializer=desc.describe(), reason="; ".join(reasons), uncollapsed=uncollapsed)
    return desc


def has_kryo(desc: TypeDescriptor | None) -> bool:
    """Whether a type has Kryo parts the job's classes could type (statemeta.kryo)."""
    if desc is None:
        return False
    if desc.kind == "raw" and (desc.attr("kryo_class") or desc.attr("uncollapsed")):
        return True
    return any(has_kryo(child) for _, child in desc.fields)


def stream_element_type(value: TypeDescriptor) -> TypeDescriptor:
    """StreamElementSerializer's elements: the records and watermarks an async operator buffers. Which
    element it is, its time (a record's timestamp, a watermark's, a latency marker's), a record's
    value, a watermark status (or an internal watermark's subpartition), and as JSON what a latency
    marker or record attributes carry besides."""
    return TypeDescriptor.of(
        "stream_element",
        [
            ("element", TypeDescriptor.of("string")),
            ("timestamp", TypeDescriptor.of("long")),
            ("value", value),
            ("status", TypeDescriptor.of("int")),
            ("detail", TypeDescriptor.of("string")),
        ],
    )


def java_serialized_type() -> TypeDescriptor:
    """JavaSerializer's values (legacy ``_default_`` operator state): one Java serialization stream
    each, walked by statecat's own grammar parser (statemeta/java/javaser.py), never deserialized. The top
    object's class, the object graph as JSON text, and the stored bytes, which are what is written."""
    return TypeDescriptor.of(
        "java_serialized",
        [
            ("class", TypeDescriptor.of("string")),
            ("value", TypeDescriptor.of("string")),
            ("raw", TypeDescriptor.of("bytes")),
        ],
    )


def key_column_type(key: TypeDescriptor) -> TypeDescriptor:
    """The type of a state table's ``key`` column: keys that are rows of one field are that field.

    A Flink SQL ``GROUP BY word`` keys its state by a one-field RowData, and PyFlink's ``key_by``
    by a one-field Row; analysts write ``WHERE key = 'x'``, so the single field stands for the
    row. Wider keys stay structs.
    """
    if key.kind in ("rowdata", "row") and len(key.fields) == 1:
        return key.fields[0][1]
    return key


def struct_field_names(count: int) -> list[str]:
    """Positional names for fields Flink keeps no names for (Tuple, Row, RowData)."""
    return [f"f{i}" for i in range(count)]
