"""Serializer snapshots (the type information Flink writes in state stream headers) → descriptors.

A snapshot is ``utf className | i32 version | payload`` where the payload layout belongs to the
class and has no length prefix: statecat must know each class it reads past. Classes it does not
know raise ``UnknownSnapshotError``; the header parser then recovers the payload's extent from
the rest of the header (see ``headers.py``) and the state's values become raw bytes with the
class name as the reason.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

from statecat.statemeta.binary import DataInput
from statecat.statemeta.errors import FormatError, StatecatError
from statecat.statemeta.java.avro import AVRO_SNAPSHOT, avro_snapshot
from statecat.statemeta.java.javaser import java_list, parse_java_object
from statecat.statemeta.types import TypeDescriptor, java_serialized_type, stream_element_type, struct_field_names

SNAPSHOT_PROXY_VERSION = 2
COMPOSITE_MAGIC = 0x000DE704
NESTED_DELEGATE_MAGIC = 0x001457FD
NESTED_DELEGATE_VERSION = 1
LINKED_OPTIONAL_MAP_MAGIC = 0x000004F2C69A3D70
# Composite snapshots read with a version at or below this use the pre-1.8 layout.
HIGHEST_LEGACY_COMPOSITE_VERSION = 2
# Simple (singleton) snapshots before version 3 carried the serializer class name as payload.
FIRST_SIMPLE_SNAPSHOT_VERSION_WITHOUT_NAME = 3
# RowSerializer snapshots from outer version 3 on record whether rows carry a RowKind.
FIRST_ROW_SNAPSHOT_WITH_ROW_KIND = 3
MAX_FIELDS = 1 << 16
# Serializers and logical types nested deeper than this are damaged data, not a real type (and
# would otherwise exhaust Python's recursion limit).
MAX_NESTING = 64
# TimestampKind of a processing-time attribute (TimestampType, LocalZonedTimestampType).
PROCTIME_KIND = "PROCTIME"
# Flink's own bounds on the parameters of the table types statecat decodes.
MAX_DECIMAL_PRECISION = 38
MAX_TIMESTAMP_PRECISION = 9
MAX_TYPE_LENGTH = (1 << 31) - 1


class UnknownSnapshotError(StatecatError):
    """A snapshot class whose payload layout statecat does not know."""

    def __init__(self, class_name: str, *, file: str, offset: int) -> None:
        self.class_name = class_name
        super().__init__(f"unknown serializer snapshot class {class_name}", file=file, offset=offset)


BASE = "org.apache.flink.api.common.typeutils.base."
ARRAY = BASE + "array."
RUNTIME = "org.apache.flink.api.java.typeutils.runtime."
TABLE = "org.apache.flink.table.runtime.typeutils."
CEP = "org.apache.flink.cep.nfa."
CEP_BUFFER = CEP + "sharedbuffer."
SORTED_MAP_SNAPSHOT_VERSION = 3  # the only one Flink 1.15-2.3 write
# NFAStateSerializerSnapshot's outer versions from this one on record whether computation states carry
# the previous event's timestamp.
FIRST_NFA_SNAPSHOT_WITH_PREVIOUS_TIMESTAMP = 2


def _simple(prefix: str, name: str) -> str:
    return f"{prefix}{name}Serializer${name}SerializerSnapshot"


# Snapshots with an empty payload, by class name → descriptor kind.
SIMPLE_SNAPSHOTS: dict[str, str] = {
    **{
        _simple(BASE, java): kind
        for java, kind in {
            "Boolean": "boolean",
            "Byte": "byte",
            "Short": "short",
            "Int": "int",
            "Long": "long",
            "Float": "float",
            "Double": "double",
            "Char": "char",
            "String": "string",
            "Void": "void",
            "BigInt": "bigint",
            "BigDec": "bigdec",
            "Date": "date",
            "SqlDate": "sql_date",
            "SqlTime": "sql_time",
            "SqlTimestamp": "sql_timestamp",
            "LocalDate": "local_date",
            "LocalTime": "local_time",
            "LocalDateTime": "local_datetime",
            "Instant": "instant",
        }.items()
    },
    "org.apache.flink.runtime.state.VoidNamespaceSerializer$VoidNamespaceSerializerSnapshot": "void_namespace",
    "org.apache.flink.streaming.api.windowing.windows.TimeWindow$Serializer$TimeWindowSerializerSnapshot": "time_window",
    "org.apache.flink.table.runtime.operators.window.TimeWindow$Serializer$TimeWindowSerializerSnapshot": "time_window",
    "org.apache.flink.streaming.api.windowing.windows.GlobalWindow$Serializer$GlobalWindowSerializerSnapshot": "global_window",
    "org.apache.flink.table.runtime.operators.window.GlobalWindow$Serializer$GlobalWindowSerializerSnapshot": "global_window",
    "org.apache.flink.table.runtime.operators.window.CountWindow$Serializer$CountWindowSerializerSnapshot": "count_window",
    TABLE + "StringDataSerializer$StringDataSerializerSnapshot": "string_data",
    "org.apache.flink.table.dataview.NullSerializer$NullSerializerSnapshot": "void",
    RUNTIME + "Tuple0SerializerSnapshot": "tuple0",
}

PRIMITIVE_ARRAY_SNAPSHOTS: dict[str, str] = {
    f"{ARRAY}{java}PrimitiveArraySerializer${java}PrimitiveArraySerializerSnapshot": kind
    for java, kind in {
        "Boolean": "boolean",
        "Byte": "byte",
        "Char": "char",
        "Double": "double",
        "Float": "float",
        "Int": "int",
        "Long": "long",
        "Short": "short",
    }.items()
}

# org.apache.flink.table.types.logical.LogicalTypeRoot (Flink 1.15 to 2.3).
LOGICAL_TYPE_ROOTS = frozenset(
    (
        "CHAR",
        "VARCHAR",
        "BOOLEAN",
        "BINARY",
        "VARBINARY",
        "DECIMAL",
        "TINYINT",
        "SMALLINT",
        "INTEGER",
        "BIGINT",
        "FLOAT",
        "DOUBLE",
        "DATE",
        "TIME_WITHOUT_TIME_ZONE",
        "TIMESTAMP_WITHOUT_TIME_ZONE",
        "TIMESTAMP_WITH_TIME_ZONE",
        "TIMESTAMP_WITH_LOCAL_TIME_ZONE",
        "INTERVAL_YEAR_MONTH",
        "INTERVAL_DAY_TIME",
        "ARRAY",
        "MULTISET",
        "MAP",
        "ROW",
        "DISTINCT_TYPE",
        "STRUCTURED_TYPE",
        "NULL",
        "RAW",
        "SYMBOL",
        "UNRESOLVED",
        "DESCRIPTOR",
        "VARIANT",
    )
)
# Logical type class roots that come straight from the enum, for LogicalType objects.
_LOGICAL_ROOTS_WITH_LENGTH = ("CHAR", "VARCHAR", "BINARY", "VARBINARY")
_LOGICAL_ROOTS_WITH_PRECISION = (
    "TIME_WITHOUT_TIME_ZONE",
    "TIMESTAMP_WITHOUT_TIME_ZONE",
    "TIMESTAMP_WITH_LOCAL_TIME_ZONE",
    "TIMESTAMP_WITH_TIME_ZONE",
)


class SnapshotReader:
    """Reads serializer snapshots from an in-memory header (``DataInput.of_bytes``)."""

    def __init__(self, data: DataInput, header: bytes, base: int) -> None:
        self.data = data
        self._header = header
        self._base = base
        self._depth = 0

    # -- envelopes

    def top_level(self) -> TypeDescriptor:
        """``TypeSerializerSnapshotSerializationUtil``: i32 proxy version, then a versioned snapshot."""
        at = self.data.offset
        version = self.data.read_i32()
        if version != SNAPSHOT_PROXY_VERSION:
            raise self.data.error(
                f"serializer snapshot proxy version {SNAPSHOT_PROXY_VERSION}",
                version,
                offset=at,
                hint="Savepoints written by Flink before 1.7 are not supported",
            )
        return self.versioned()

    def versioned(self) -> TypeDescriptor:
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                raise self.data.error(f"serializer snapshots nested at most {MAX_NESTING} deep", "deeper nesting")
            return self._versioned()
        finally:
            self._depth -= 1

    def _versioned(self) -> TypeDescriptor:
        at = self.data.offset
        class_name = self.data.read_utf()
        version = self.data.read_i32()
        if class_name in SIMPLE_SNAPSHOTS:
            if version < FIRST_SIMPLE_SNAPSHOT_VERSION_WITHOUT_NAME:
                self.data.read_utf()
            return TypeDescriptor.of(SIMPLE_SNAPSHOTS[class_name])
        if class_name == ARRAY + "BytePrimitiveArraySerializer$BytePrimitiveArraySerializerSnapshot":
            return TypeDescriptor.of("bytes")
        if class_name in PRIMITIVE_ARRAY_SNAPSHOTS:
            return TypeDescriptor.of(
                "primitive_array", [("element", TypeDescriptor.of(PRIMITIVE_ARRAY_SNAPSHOTS[class_name]))]
            )
        if class_name == ARRAY + "StringArraySerializer$StringArraySerializerSnapshot":
            return TypeDescriptor.of("string_array", [("element", TypeDescriptor.of("string"))])
        parse = COMPLEX_SNAPSHOTS.get(class_name)
        if parse is None:
            raise UnknownSnapshotError(class_name, file=self.data.name, offset=at)
        return parse(self, version, class_name)

    def composite(
        self,
        version: int,
        class_name: str,
        outer: Callable[[SnapshotReader, int], dict] | None = None,
        nested: int | None = None,
    ) -> tuple[dict, list[TypeDescriptor]]:
        """``CompositeTypeSerializerSnapshot``: magic, outer version, outer payload, nested snapshots.

        ``nested``: how many nested serializers the class has (a map two, a list one), when fixed.
        """
        data = self.data
        if version <= HIGHEST_LEGACY_COMPOSITE_VERSION:
            raise UnknownSnapshotError(
                f"{class_name} (pre-1.8 layout, version {version})", file=data.name, offset=data.offset
            )
        at = data.offset
        magic = data.read_i32()
        if magic != COMPOSITE_MAGIC:
            raise data.error(
                f"composite snapshot magic 0x{COMPOSITE_MAGIC:08X}", f"0x{magic & 0xFFFFFFFF:08X}", offset=at
            )
        outer_version = data.read_i32()
        attrs = outer(self, outer_version) if outer is not None else {}
        return attrs, self.nested(nested)

    def nested(self, expected: int | None = None) -> list[TypeDescriptor]:
        data = self.data
        at = data.offset
        magic = data.read_i32()
        if magic != NESTED_DELEGATE_MAGIC:
            raise data.error(
                f"nested serializers magic 0x{NESTED_DELEGATE_MAGIC:08X}", f"0x{magic & 0xFFFFFFFF:08X}", offset=at
            )
        at = data.offset
        version = data.read_i32()
        if version != NESTED_DELEGATE_VERSION:
            raise data.error(f"nested serializers version {NESTED_DELEGATE_VERSION}", version, offset=at)
        at = data.offset
        count = data.read_length("number of nested serializers", limit=MAX_FIELDS)
        if expected is not None and count != expected:
            raise data.error(f"{expected} nested serializer{'s' if expected != 1 else ''}", count, offset=at)
        return [self.versioned() for _ in range(count)]

    def java_object(self) -> object:
        at = self.data.offset
        start = at - self._base
        obj, consumed = parse_java_object(self._header[start:], self.data.name)
        self.data.skip(consumed)
        return obj

    def optional_map(
        self, read_value: Callable[[DataInput], object] | None, *, partial: bool = False
    ) -> list[tuple[str, object]]:
        """Flink's LinkedOptionalMap block: named entries with framed key and value bytes.
        ``partial``: ``read_value`` may read only the start of a value; the rest is skipped."""
        data = self.data
        at = data.offset
        magic = data.read_i64()
        if magic != LINKED_OPTIONAL_MAP_MAGIC:
            raise data.error(
                f"optional map magic 0x{LINKED_OPTIONAL_MAP_MAGIC:016X}", f"0x{magic & (2**64 - 1):016X}", offset=at
            )
        entries = []
        for _ in range(data.read_length("number of optional map entries", limit=MAX_FIELDS)):
            name = data.read_utf()
            if data.read_bool():
                data.skip(data.read_length("optional map key length in bytes"))
            value = None
            if data.read_bool():
                length = data.read_length("optional map value length in bytes")
                end = data.offset + length
                if read_value is None:
                    data.skip(length)
                else:
                    value = read_value(data)
                    if partial and data.offset <= end:
                        data.skip(end - data.offset)
                    if data.offset != end:
                        raise data.error(
                            f"the framed value of {name!r} to end at offset {end}", f"offset {data.offset}"
                        )
            entries.append((name, value))
        return entries


# ----------------------------------------------------------------------------- complex snapshots


def _list(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    _, nested = reader.composite(version, name, nested=1)
    return TypeDescriptor.of("list", [("element", nested[0])])


def _linked_list(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    """The table runtime's LinkedListSerializer (LAG's buffer): outer version 1 adds ``hasNullMask``, a
    boolean; with it the elements follow a null mask, which statecat does not decode."""
    attrs, nested = reader.composite(
        version, name, lambda r, outer_version: {"null_mask": outer_version >= 1 and r.data.read_bool()}, nested=1
    )
    if attrs["null_mask"]:
        return TypeDescriptor.raw("LinkedListSerializer", "a LinkedList written with a null mask is not decoded")
    return TypeDescriptor.of("list", [("element", nested[0])])


def _stream_element(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    _, nested = reader.composite(version, name, nested=1)
    return stream_element_type(nested[0])


def _map(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    _, nested = reader.composite(version, name, nested=2)
    return TypeDescriptor.of("map", [("key", nested[0]), ("value", nested[1])])


def _sorted_map(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    """The table runtime's SortedMapSerializer (rank with retraction): its comparator, Java-serialized,
    then the key and value serializers. Values are MapSerializer's layout, entries in the comparator's
    order; the comparator is walked as data for its class name, never loaded."""
    if version != SORTED_MAP_SNAPSHOT_VERSION:
        raise UnknownSnapshotError(f"{name} (version {version})", file=reader.data.name, offset=reader.data.offset)
    comparator = reader.java_object()
    key, value = reader.nested(2)
    comparator_class = comparator.get("@class") if isinstance(comparator, dict) else None
    return TypeDescriptor.of(
        "map",
        [("key", key), ("value", value)],
        comparator=comparator_class[:200] if isinstance(comparator_class, str) else "?",
    )


def _simple_payload(make: Callable[[], TypeDescriptor]) -> Callable[[SnapshotReader, int, str], TypeDescriptor]:
    """A SimpleTypeSerializerSnapshot of a serializer whose descriptor has fields (a fixed layout)."""

    def parse(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
        if version < FIRST_SIMPLE_SNAPSHOT_VERSION_WITHOUT_NAME:
            reader.data.read_utf()
        return make()

    return parse


def _cep_event_id() -> TypeDescriptor:
    return TypeDescriptor.of(
        "cep_event_id", [("id", TypeDescriptor.of("int")), ("timestamp", TypeDescriptor.of("long"))]
    )


def _cep_node_id(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    """NodeId: the event's id and the pattern stage (page) it was taken by."""
    _, nested = reader.composite(version, name, nested=1)
    return TypeDescriptor.of("cep_node_id", [("event_id", nested[0]), ("page_name", TypeDescriptor.of("string"))])


def _cep_lockable(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    """Lockable<V>: how many partial matches hold the value, then the value."""
    _, nested = reader.composite(version, name, nested=1)
    return TypeDescriptor.of("cep_lockable", [("ref_count", TypeDescriptor.of("int")), ("value", nested[0])])


def _cep_shared_buffer_edge(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    _, (node_id, dewey) = reader.composite(version, name, nested=2)
    return TypeDescriptor.of("cep_shared_buffer_edge", [("target", node_id), ("version", dewey)])


def _cep_shared_buffer_node(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    """SharedBufferNode (V2 snapshot): its edges to the previous events, each Lockable."""
    _, (edge,) = reader.composite(version, name, nested=1)
    lockable_edge = TypeDescriptor.of("cep_lockable", [("ref_count", TypeDescriptor.of("int")), ("value", edge)])
    return TypeDescriptor.of(
        "cep_shared_buffer_node", [("edges", TypeDescriptor.of("list", [("element", lockable_edge)]))]
    )


def _cep_nfa_state(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    """NFAState: the partial and the completed matches, each a computation state. From outer version 2
    a flag says whether each carries the previous event's timestamp (Flink writes it since 1.16)."""

    def outer(r: SnapshotReader, outer_version: int) -> dict:
        return {
            "previous_timestamp": outer_version >= FIRST_NFA_SNAPSHOT_WITH_PREVIOUS_TIMESTAMP and r.data.read_bool()
        }

    attrs, (dewey, node_id, event_id) = reader.composite(version, name, outer, nested=3)
    fields = [
        ("state_name", TypeDescriptor.of("string")),
        ("previous_entry", node_id),
        ("version", dewey),
        ("start_timestamp", TypeDescriptor.of("long")),
    ]
    if attrs["previous_timestamp"]:
        fields.append(("previous_timestamp", TypeDescriptor.of("long")))
    fields.append(("start_event", event_id))  # after a presence byte (readers/codecs/cep.py)
    matches = TypeDescriptor.of("list", [("element", TypeDescriptor.of("cep_computation_state", fields))])
    return TypeDescriptor.of("cep_nfa_state", [("partial_matches", matches), ("completed_matches", matches)])


def _generic_array(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    attrs, nested = reader.composite(version, name, lambda r, v: {"class": r.data.read_utf()}, nested=1)
    return TypeDescriptor.of("generic_array", [("element", nested[0])], **attrs)


def _timer(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    _, nested = reader.composite(version, name, nested=2)
    return TypeDescriptor.of("timer", [("key", nested[0]), ("namespace", nested[1])])


def _ttl(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    _, nested = reader.composite(version, name, nested=2)
    return TypeDescriptor.of("ttl", [("value", nested[1])])


def _tuple(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    attrs, nested = reader.composite(version, name, lambda r, v: {"class": r.data.read_utf()})
    return TypeDescriptor.of("tuple", list(zip(struct_field_names(len(nested)), nested)), **attrs)


def _row(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    def outer(r: SnapshotReader, outer_version: int) -> dict:
        kind = r.data.read_bool() if outer_version >= FIRST_ROW_SNAPSHOT_WITH_ROW_KIND else False
        return {"row_kind": kind}

    attrs, nested = reader.composite(version, name, outer)
    return TypeDescriptor.of("row", list(zip(struct_field_names(len(nested)), nested)), **attrs)


def _nullable(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    attrs, nested = reader.composite(version, name, lambda r, v: {"padding": r.data.read_i32()}, nested=1)
    return TypeDescriptor.of("nullable", [("value", nested[0])], **attrs)


def _either(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    _, nested = reader.composite(version, name, nested=2)
    return TypeDescriptor.of("either", [("left", nested[0]), ("right", nested[1])])


def _pass_through(kind: str) -> Callable[[SnapshotReader, int, str], TypeDescriptor]:
    def parse(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
        _, nested = reader.composite(version, name, nested=1)
        return TypeDescriptor.of(kind, [("value", nested[0])])

    return parse


def _external(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    def outer(r: SnapshotReader, outer_version: int) -> dict:
        r.java_object()  # the DataType; the internal serializer below says how bytes look
        r.data.read_bool()  # isInternalInput
        return {}

    _, nested = reader.composite(version, name, outer, nested=1)
    return TypeDescriptor.of("external", [("value", nested[0])])


def _enum(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    data = reader.data
    enum_class = data.read_utf()
    constants = [data.read_utf() for _ in range(data.read_length("number of enum constants", limit=MAX_FIELDS))]
    # ignore: mypy takes the unpacked keys for a possible "fields"; they are attribute names.
    return TypeDescriptor.of("enum", **{"class": enum_class, "constants": constants})  # type: ignore[arg-type]


def _decimal_data(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    at = reader.data.offset
    precision, scale = reader.data.read_i32(), reader.data.read_i32()
    _check_decimal(precision, scale, reader.data.name, at)
    return TypeDescriptor.of("decimal_data", precision=precision, scale=scale)


def _timestamp_data(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    at = reader.data.offset
    precision = reader.data.read_i32()
    _check_range("timestamp precision", precision, 0, MAX_TIMESTAMP_PRECISION, reader.data.name, at)
    return TypeDescriptor.of("timestamp_data", precision=precision)


def _check_range(what: str, value: object, low: int, high: int, file: str, offset: int | None) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise FormatError(f"expected a {what} in {low}..{high}, got {value!r}", file=file, offset=offset)


def _check_decimal(precision: object, scale: object, file: str, offset: int | None) -> None:
    _check_range("decimal precision", precision, 1, MAX_DECIMAL_PRECISION, file, offset)
    # The precision is an int: checked on the line above.
    _check_range("decimal scale", scale, 0, cast(int, precision), file, offset)


def _binary_rowdata(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    arity = reader.data.read_i32()
    return TypeDescriptor.raw(name, f"a BinaryRowData of {arity} fields whose field types Flink does not record")


def _rowdata(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    data = reader.data
    count = data.read_length("number of RowData fields", limit=MAX_FIELDS)
    types = [logical_type(reader.java_object(), data) for _ in range(count)]
    reader.nested()  # the field serializers repeat what the logical types say
    return TypeDescriptor.of("rowdata", list(zip(struct_field_names(count), types)))


def _array_data(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    # Java-serialized: the element LogicalType, then the element serializer (which repeats it).
    element = logical_type(reader.java_object(), reader.data)
    reader.java_object()
    return TypeDescriptor.of("array_data", [("element", element)])


def _map_data(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    # Java-serialized: key and value LogicalTypes, then their serializers.
    key = logical_type(reader.java_object(), reader.data)
    value = logical_type(reader.java_object(), reader.data)
    reader.java_object()
    reader.java_object()
    return TypeDescriptor.of("map_data", [("key", key), ("value", value)])


def _pojo(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    data = reader.data
    pojo_class = data.read_utf()
    fields = reader.optional_map(lambda d: reader.versioned())
    registered = reader.optional_map(lambda d: reader.versioned())
    unregistered = reader.optional_map(lambda d: reader.versioned())  # subclasses met at run time
    attrs: dict[str, Any] = {"class": pojo_class}
    if registered:
        attrs["registered_subclasses"] = [n for n, _ in registered]
    missing = [n for n, t in fields if t is None]
    if missing:
        return TypeDescriptor.raw(name, f"POJO {pojo_class} has fields whose class is gone: {', '.join(missing)}")
    # Every field's type was read by versioned(): none is missing (checked above).
    columns = [(n, cast(TypeDescriptor, t)) for n, t in fields]
    subclasses = [
        (sub, tag if tag < len(registered) else None, t)
        for tag, (sub, t) in enumerate([*registered, *unregistered])
        if isinstance(t, TypeDescriptor)
    ]
    if subclasses:
        # Instances of subclasses are written by their own serializer after a tag or their class
        # name: the column holds the POJO's fields, then the fields only subclasses have.
        attrs["base_fields"] = len(columns)
        attrs["subclasses"] = json.dumps([[sub, tag, t.to_json()] for sub, tag, t in subclasses])
        names = {n for n, _ in columns}
        for _, _, t in subclasses:
            for n, field_type in t.fields if t.kind == "pojo" else ():
                if n not in names:
                    names.add(n)
                    columns.append((n, field_type))
    return TypeDescriptor.of("pojo", columns, **attrs)


def _kryo(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    # KryoSerializerSnapshotData: the type, then the job's registrations, default serializers and
    # default serializer classes (each a LinkedOptionalMap keyed by class name). The registrations'
    # order gives their Kryo ids; a class with a serializer of its own stays bytes (statemeta.kryo).
    from statecat.statemeta.java.kryo import kryo_reason

    data = reader.data
    type_class = data.read_utf()
    registrations = reader.optional_map(_kryo_registration, partial=True)
    defaults = [n for n, _ in reader.optional_map(None)] + [n for n, _ in reader.optional_map(None)]
    return TypeDescriptor.of(
        "raw",
        serializer=name,
        reason=kryo_reason(type_class),
        kryo_class=type_class,
        # (class, its custom serializer or "") in registration order: ids are assigned in this order
        kryo_registrations=tuple((n, s if isinstance(s, str) else "") for n, s in registrations),
        kryo_defaults=tuple(defaults) or None,
    )


# KryoRegistration.SerializerDefinitionType, as KryoRegistrationSerializerConfigSnapshot writes it.
KRYO_UNSPECIFIED, KRYO_SERIALIZER_CLASS, KRYO_SERIALIZER_INSTANCE = 0, 1, 2


def _kryo_registration(data: DataInput) -> str:
    """A registration's serializer: "" for Kryo's default, else the serializer's class."""
    data.read_utf()  # the registered class (the entry's name)
    at = data.offset
    definition = data.read_i32()
    if definition == KRYO_UNSPECIFIED:
        return ""
    if definition == KRYO_SERIALIZER_CLASS:
        return data.read_utf()
    if definition == KRYO_SERIALIZER_INSTANCE:
        return "a serializer instance"  # Java-serialized: the rest of the framed value, skipped
    raise data.error("a Kryo serializer definition type 0, 1 or 2", str(definition), offset=at)


COMPLEX_SNAPSHOTS: dict[str, Callable[[SnapshotReader, int, str], TypeDescriptor]] = {
    BASE + "ListSerializerSnapshot": _list,
    "org.apache.flink.runtime.state.ArrayListSerializerSnapshot": _list,
    BASE + "MapSerializerSnapshot": _map,
    BASE + "GenericArraySerializerSnapshot": _generic_array,
    BASE + "EnumSerializer$EnumSerializerSnapshot": _enum,
    "org.apache.flink.streaming.api.operators.TimerSerializerSnapshot": _timer,
    "org.apache.flink.runtime.state.ttl.TtlStateFactory$TtlSerializerSnapshot": _ttl,
    RUNTIME + "TupleSerializerSnapshot": _tuple,
    RUNTIME + "RowSerializer$RowSerializerSnapshot": _row,
    RUNTIME + "NullableSerializer$NullableSerializerSnapshot": _nullable,
    RUNTIME + "JavaEitherSerializerSnapshot": _either,
    RUNTIME + "PojoSerializerSnapshot": _pojo,
    RUNTIME + "kryo.KryoSerializerSnapshot": _kryo,
    TABLE + "ExternalSerializer$ExternalSerializerSnapshot": _external,
    TABLE + "RawValueDataSerializer$RawValueDataSerializerSnapshot": lambda r, v, n: TypeDescriptor.of(
        "raw_value", [("value", r.composite(v, n, nested=1)[1][0])]
    ),
    TABLE + "DecimalDataSerializer$DecimalSerializerSnapshot": _decimal_data,
    TABLE + "TimestampDataSerializer$TimestampDataSerializerSnapshot": _timestamp_data,
    TABLE + "RowDataSerializer$RowDataSerializerSnapshot": _rowdata,
    TABLE + "BinaryRowDataSerializer$BinaryRowDataSerializerSnapshot": _binary_rowdata,
    TABLE + "ArrayDataSerializer$ArrayDataSerializerSnapshot": _array_data,
    TABLE + "MapDataSerializer$MapDataSerializerSnapshot": _map_data,
    TABLE + "LinkedListSerializer$LinkedListSerializerSnapshot": _linked_list,
    "org.apache.flink.streaming.runtime.streamrecord.StreamElementSerializer$StreamElementSerializerSnapshot": (
        _stream_element
    ),
    TABLE + "SortedMapSerializerSnapshot": _sorted_map,
    "org.apache.flink.runtime.state.JavaSerializer$JavaSerializerSnapshot": _simple_payload(java_serialized_type),
    CEP + "NFAStateSerializerSnapshot": _cep_nfa_state,
    CEP + "DeweyNumber$DeweyNumberSerializer$DeweyNumberSerializerSnapshot": _simple_payload(
        lambda: TypeDescriptor.of("dewey_number")
    ),
    CEP_BUFFER + "EventId$EventIdSerializer$EventIdSerializerSnapshot": _simple_payload(_cep_event_id),
    CEP_BUFFER + "NodeId$NodeIdSerializer$NodeIdSerializerSnapshot": _cep_node_id,
    CEP_BUFFER + "LockableTypeSerializerSnapshot": _cep_lockable,
    CEP_BUFFER + "SharedBufferEdge$SharedBufferEdgeSerializer$SharedBufferEdgeSerializerSnapshot": (
        _cep_shared_buffer_edge
    ),
    CEP_BUFFER + "SharedBufferNodeSerializerSnapshotV2": _cep_shared_buffer_node,
    AVRO_SNAPSHOT: avro_snapshot,  # flink-avro's AvroSerializer: typed by its writer schema
}


# ----------------------------------------------------------------------------- logical types


# The serializer behind a DataView field of an accumulator (MapView, ListView): the view's entries live
# in a state of their own, the row holds nothing.
DATAVIEW_PLACEHOLDER_SERIALIZER = "org.apache.flink.table.dataview.NullSerializer"


def _class_name(obj: object, field: str) -> str:
    value = obj.get(field) if isinstance(obj, dict) else None
    if isinstance(value, dict):
        value = value.get("name") or value.get("@class")
    return value[:200] if isinstance(value, str) else "?"


def _stored_bytes_reason(root: str, obj: dict) -> tuple[str, str]:
    """(what the field is, why its bytes are shown as stored) for a SQL type statecat keeps as bytes."""
    if root == "RAW":
        clazz, serializer = _class_name(obj, "clazz"), _class_name(obj, "serializer")
        if serializer == DATAVIEW_PLACEHOLDER_SERIALIZER:
            return f"RAW('{clazz}')", (
                "a DataView placeholder: the accumulator's view keeps its entries in a state of its own, and the "
                "row holds nothing"
            )
        return f"RAW('{clazz}')", f"written by the job's serializer {serializer}, shown as stored"
    if root == "STRUCTURED_TYPE":
        return f"STRUCTURED_TYPE({_class_name(obj, 'implementationClass')})", "a structured type, shown as stored"
    return root, f"{root} values are shown as stored"


def logical_type(obj: object, data: DataInput, depth: int = 0) -> TypeDescriptor:
    """A Java-serialized ``org.apache.flink.table.types.logical.LogicalType`` → descriptor.

    The object graph comes from the file: back-references can make it cyclic and any field can
    hold any value, so nesting is bounded and every parameter is checked.
    """
    if not isinstance(obj, dict) or not isinstance(obj.get("typeRoot"), str):
        raise FormatError(
            f"expected a serialized LogicalType, got {type(obj).__name__}", file=data.name, offset=data.offset
        )
    if depth > MAX_NESTING:
        raise FormatError(
            f"expected logical types nested at most {MAX_NESTING} deep (a cyclic type?)",
            file=data.name,
            offset=data.offset,
        )
    root = obj["typeRoot"]
    if root not in LOGICAL_TYPE_ROOTS:
        # Flink's LogicalTypeRoot is a closed enum: another name is damage (or a Flink newer than
        # statecat), never a type whose binary layout could be guessed.
        raise FormatError(f"expected a LogicalTypeRoot, got {root[:64]!r}", file=data.name, offset=data.offset)
    # A processing-time attribute is a placeholder Flink computes when it is read: rows store NULL
    # there (CEP's buffered events, for one), whatever nullability the type declares.
    nullable = bool(obj.get("isNullable", True)) or obj.get("kind") == PROCTIME_KIND
    if root in _LOGICAL_ROOTS_WITH_LENGTH:
        _check_range(f"{root} length", obj.get("length"), 0, MAX_TYPE_LENGTH, data.name, data.offset)
        return TypeDescriptor.of(root, length=obj.get("length"), nullable=nullable)
    if root in _LOGICAL_ROOTS_WITH_PRECISION:
        _check_range(f"{root} precision", obj.get("precision"), 0, MAX_TIMESTAMP_PRECISION, data.name, data.offset)
        return TypeDescriptor.of(root, precision=obj.get("precision"), nullable=nullable)
    if root == "DECIMAL":
        _check_decimal(obj.get("precision"), obj.get("scale"), data.name, data.offset)
        return TypeDescriptor.of(root, precision=obj.get("precision"), scale=obj.get("scale"), nullable=nullable)
    if root in ("ARRAY", "MULTISET"):
        return TypeDescriptor.of(
            root, [("element", logical_type(obj.get("elementType"), data, depth + 1))], nullable=nullable
        )
    if root == "MAP":
        return TypeDescriptor.of(
            root,
            [
                ("key", logical_type(obj.get("keyType"), data, depth + 1)),
                ("value", logical_type(obj.get("valueType"), data, depth + 1)),
            ],
            nullable=nullable,
        )
    if root == "ROW":
        try:
            fields = java_list(obj.get("fields"))
        except TypeError as exc:
            raise FormatError(f"expected the fields of a ROW type: {exc}", file=data.name, offset=data.offset) from exc
        if not all(isinstance(f, dict) and isinstance(f.get("name"), str) for f in fields):
            raise FormatError("expected ROW fields with names", file=data.name, offset=data.offset)
        return TypeDescriptor.of(
            root, [(f["name"], logical_type(f.get("type"), data, depth + 1)) for f in fields], nullable=nullable
        )
    if root == "DISTINCT_TYPE":
        return logical_type(obj.get("sourceType"), data, depth + 1)
    if root in (
        "RAW",
        "STRUCTURED_TYPE",
        "SYMBOL",
        "UNRESOLVED",
        "INTERVAL_YEAR_MONTH",
        "INTERVAL_DAY_TIME",
        "TIMESTAMP_WITH_TIME_ZONE",
        "DESCRIPTOR",
        "VARIANT",
    ):
        if root == "INTERVAL_YEAR_MONTH":
            return TypeDescriptor.of("INTEGER", nullable=nullable)
        if root == "INTERVAL_DAY_TIME":
            return TypeDescriptor.of("BIGINT", nullable=nullable)
        shown_as, reason = _stored_bytes_reason(root, obj)
        return TypeDescriptor.of("RAW", nullable=nullable, logical=root, shown_as=shown_as, reason=reason)
    return TypeDescriptor.of(root, nullable=nullable)
