"""flink-avro's ``AvroSerializerSnapshot`` → an ``avro`` descriptor typed by the writer schema.

``AvroSerializer`` (SpecificRecord, GenericRecord and reflect records) keeps the writer schema in
its snapshot, so its values decode with no classes at hand. The payload by snapshot version:

- 1: ``writeUTF(schema)``;
- 2: ``writeUTF(runtime class name)``, ``writeUTF(schema)`` (older flink-avro; 64 KB at most);
- 3: the same two as ``StringUtils.writeString`` (Flink's ``StringValue``: varint length + 1, then
  each UTF-16 unit as a varint; no 64 KB limit) — Flink 1.20 and 2.x.

The schema is Avro's JSON. ``parse_schema`` resolves it into ``AvroType`` trees (named types by
full name, bounded in size and depth; a record that contains itself cannot become a column and
makes the state raw bytes with that reason), and ``column_type`` gives the descriptor of the
column, in the table runtime's logical kinds (so Spark and Arrow types follow from them):
records → ROW with the field names; a union with null → the other branch, nullable; other unions
→ ROW<member0, member1, ...> (Spark's from_avro names) with the one written branch set; enums
→ VARCHAR; fixed and bytes → BINARY/VARBINARY; arrays → ARRAY; maps → MAP<VARCHAR, ...>;
decimal → DECIMAL(p, s) (text beyond 38 digits); date → DATE; time-millis/micros → TIME;
timestamp-* → TIMESTAMP_LTZ (an instant); local-timestamp-* → TIMESTAMP; uuid → VARCHAR.

The descriptor: ``avro`` with one child ``value`` (that column type) and the attributes ``class``
(the runtime type), ``record`` (the schema's full name) and ``schema`` (the schema text, which
``readers/codecs/avro.py`` compiles into the value decoder).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

from statecat.statemeta.binary import DataInput
from statecat.statemeta.errors import FormatError
from statecat.statemeta.types import TypeDescriptor

if TYPE_CHECKING:
    from statecat.statemeta.files.snapshots import SnapshotReader

AVRO_SNAPSHOT = "org.apache.flink.formats.avro.typeutils.AvroSerializerSnapshot"
# Snapshot versions: 1 schema only, 2 class + schema as writeUTF, 3 both as StringValue.
SNAPSHOT_SCHEMA_ONLY, SNAPSHOT_UTF, SNAPSHOT_STRING_VALUE = 1, 2, 3
# Longest schema text read (characters): real schemas are kilobytes; this bounds a damaged length.
MAX_SCHEMA_CHARS = 16 * 1024 * 1024
# Types a schema may expand to (a named type counts at each use) and how deep they may nest: a
# column type and a decoder are built per expanded type, and reused named types could otherwise
# expand exponentially.
MAX_SCHEMA_TYPES = 100_000
MAX_SCHEMA_DEPTH = 64
# StringValue's varint length: at most 5 bytes of 7 bits (a Java int).
MAX_VARINT_BYTES = 5
# Arrow's decimal128 (and Spark's DECIMAL) hold at most this many digits.
MAX_COLUMN_DECIMAL_PRECISION = 38
UNBOUNDED_LENGTH = 2147483647  # VARCHAR/VARBINARY without a length, as Flink writes STRING/BYTES

PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
NAMED = ("record", "error", "enum", "fixed")
# Logical types statecat renders, with the Avro type each annotates (Avro ignores a logical type
# on any other type, and so does statecat: the value is read as its underlying type).
LOGICAL_BASES = {
    "date": ("int",),
    "time-millis": ("int",),
    "time-micros": ("long",),
    "timestamp-millis": ("long",),
    "timestamp-micros": ("long",),
    "timestamp-nanos": ("long",),
    "local-timestamp-millis": ("long",),
    "local-timestamp-micros": ("long",),
    "local-timestamp-nanos": ("long",),
    "uuid": ("string", "fixed"),
    "decimal": ("bytes", "fixed"),
}
UUID_BYTES = 16
# Fractional digits of the time and timestamp logical types.
LOGICAL_PRECISION = {"millis": 3, "micros": 6, "nanos": 9}


@dataclass(eq=False)
class AvroType:
    """One resolved Avro type. Named types are shared objects (a reference is the same object)."""

    kind: str  # a primitive name, record, enum, fixed, array, map or union
    name: str | None = None  # full name of a named type
    fields: tuple[tuple[str, AvroType], ...] = ()  # record fields
    branches: tuple[AvroType, ...] = ()  # union branches, in the writer's index order
    items: AvroType | None = None  # array items, map values
    symbols: tuple[str, ...] = ()  # enum symbols
    size: int = 0  # fixed size in bytes
    logical: str | None = None  # a logical type from LOGICAL_BASES that applies to this type
    precision: int = 0
    scale: int = 0


class AvroSchemaError(ValueError):
    """The schema text is not a schema statecat can read; ``recursive`` when it is valid Avro but
    a record contains itself (no finite column type)."""

    def __init__(self, message: str, *, recursive: bool = False) -> None:
        super().__init__(message)
        self.recursive = recursive


# ----------------------------------------------------------------------------- snapshot


def avro_snapshot(reader: SnapshotReader, version: int, name: str) -> TypeDescriptor:
    """The payload of an ``AvroSerializerSnapshot`` (see the module docstring)."""
    data = reader.data
    if version == SNAPSHOT_SCHEMA_ONLY:
        runtime_class = None
    elif version == SNAPSHOT_UTF:
        runtime_class = data.read_utf()
    elif version == SNAPSHOT_STRING_VALUE:
        runtime_class = read_string_value(data, "the runtime class name")
    else:
        raise data.error(
            f"an AvroSerializerSnapshot version {SNAPSHOT_SCHEMA_ONLY} to {SNAPSHOT_STRING_VALUE}", version
        )
    at = data.offset
    text = data.read_utf() if version < SNAPSHOT_STRING_VALUE else read_string_value(data, "the Avro schema")
    try:
        root = parse_schema(text)
    except AvroSchemaError as exc:
        if exc.recursive:
            return TypeDescriptor.raw(name, f"Avro schema of {runtime_class or 'a record'}: {exc}")
        raise FormatError(f"expected an Avro writer schema: {exc}", file=data.name, offset=at) from None
    return avro_descriptor(root, text, runtime_class)


def avro_descriptor(root: AvroType, text: str, runtime_class: str | None) -> TypeDescriptor:
    attrs: dict[str, Any] = {"class": runtime_class, "record": root.name, "schema": text}
    return TypeDescriptor.of("avro", [("value", column_type(root))], **attrs)


def read_string_value(data: DataInput, what: str) -> str:
    """Flink's ``StringValue.writeString``: varint(length + 1) (0 = null), then each UTF-16 code
    unit as a varint. Lengths are checked against the bytes left and MAX_SCHEMA_CHARS."""
    at = data.offset
    n = _varint(data, what)
    if n == 0:
        raise data.error(f"{what} as a string", "null", offset=at)
    n -= 1
    left = data.remaining
    limit = MAX_SCHEMA_CHARS if left is None else min(MAX_SCHEMA_CHARS, left)  # a char takes at least a byte
    if n > limit:
        raise data.error(f"{what} of at most {limit} characters", n, offset=at)
    units = []
    for _ in range(n):
        c = data.read_u8()
        if c >= 0x80:
            c = _varint_rest(data, c, what)
        units.append(c & 0xFFFF)  # Java keeps the low 16 bits: (char) c
    raw = b"".join(u.to_bytes(2, "little") for u in units)
    return raw.decode("utf-16-le", "replace")


def _varint(data: DataInput, what: str) -> int:
    return _varint_rest(data, data.read_u8(), what)


def _varint_rest(data: DataInput, first: int, what: str) -> int:
    at = data.offset - 1
    value, shift, count = first & 0x7F, 7, 1
    b = first
    while b >= 0x80:
        if count == MAX_VARINT_BYTES:
            raise data.error(f"a varint of at most {MAX_VARINT_BYTES} bytes in {what}", "a longer one", offset=at)
        b = data.read_u8()
        value |= (b & 0x7F) << shift
        shift += 7
        count += 1
    return value


# ----------------------------------------------------------------------------- schema


def parse_schema(text: str) -> AvroType:
    """Avro schema JSON → its resolved root type. Raises AvroSchemaError."""
    if len(text) > MAX_SCHEMA_CHARS:
        raise AvroSchemaError(f"a schema of at most {MAX_SCHEMA_CHARS} characters, got {len(text)}")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise AvroSchemaError(f"schema JSON does not parse: {str(exc)[:200]}") from None
    root = _Parser().parse(doc, None, 0)
    _check_expanded_size(root)
    return root


class _Parser:
    def __init__(self) -> None:
        self.named: dict[str, AvroType] = {}
        self.defining: set[str] = set()  # records being parsed: a reference to one is recursion

    def parse(self, doc: Any, namespace: str | None, depth: int) -> AvroType:
        if depth > MAX_SCHEMA_DEPTH:
            raise AvroSchemaError(f"types nested at most {MAX_SCHEMA_DEPTH} deep")
        if isinstance(doc, str):
            return self._reference(doc, namespace)
        if isinstance(doc, list):
            branches = tuple(self.parse(b, namespace, depth + 1) for b in doc)
            if not branches:
                raise AvroSchemaError("a union with at least one branch, got []")
            if any(b.kind == "union" for b in branches):
                raise AvroSchemaError("a union without nested unions")
            return AvroType("union", branches=branches)
        if not isinstance(doc, dict):
            raise AvroSchemaError(f"a type (name, union or object), got {type(doc).__name__}")
        kind = doc.get("type")
        if isinstance(kind, (dict, list)):  # {"type": {...}}: the nested type, annotations aside
            return self.parse(kind, namespace, depth + 1)
        if not isinstance(kind, str):
            raise AvroSchemaError(f'a "type" name, got {kind!r:.80}')
        if kind in PRIMITIVES:
            return self._logical(AvroType(kind), doc)
        if kind in NAMED:
            return self._named(kind, doc, namespace, depth)
        if kind == "array":
            return AvroType("array", items=self.parse(self._required(doc, "items"), namespace, depth + 1))
        if kind == "map":
            return AvroType("map", items=self.parse(self._required(doc, "values"), namespace, depth + 1))
        return self._reference(kind, namespace)

    @staticmethod
    def _required(doc: dict, key: str) -> Any:
        if key not in doc:
            raise AvroSchemaError(f'a "{key}" in the {doc.get("type")} type')
        return doc[key]

    def _reference(self, name: str, namespace: str | None) -> AvroType:
        if name in PRIMITIVES:
            return AvroType(name)
        for full in ([f"{namespace}.{name}"] if namespace and "." not in name else []) + [name]:
            if full in self.defining:
                raise AvroSchemaError(
                    f"record {full} contains itself; a recursive type has no column type", recursive=True
                )
            if full in self.named:
                return self.named[full]
        raise AvroSchemaError(f"a defined type, got the unknown name {name[:200]!r}")

    def _named(self, kind: str, doc: dict, namespace: str | None, depth: int) -> AvroType:
        name = doc.get("name")
        if not isinstance(name, str) or not name:
            raise AvroSchemaError(f"a name for the {kind}, got {name!r:.80}")
        space = (doc.get("namespace", namespace) if "." not in name else name.rpartition(".")[0]) or None
        if space is not None and not isinstance(space, str):
            raise AvroSchemaError(f"a namespace string, got {space!r:.80}")
        full = name if "." in name or not space else f"{space}.{name}"
        if full in self.named or full in self.defining:
            raise AvroSchemaError(f"each name defined once, got {full!r} again")
        if kind == "enum":
            symbols = doc.get("symbols")
            if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
                raise AvroSchemaError(f"a list of symbol names for enum {full}")
            t = AvroType("enum", name=full, symbols=tuple(symbols))
        elif kind == "fixed":
            size = doc.get("size")
            if not _is_int(size) or not 0 <= size <= MAX_SCHEMA_CHARS:
                raise AvroSchemaError(f"a size of 0 to {MAX_SCHEMA_CHARS} bytes for fixed {full}, got {size!r:.80}")
            t = self._logical(AvroType("fixed", name=full, size=size), doc)
        else:
            fields_doc = doc.get("fields")
            if not isinstance(fields_doc, list):
                raise AvroSchemaError(f"a list of fields for record {full}")
            self.defining.add(full)
            fields = []
            for f in fields_doc:
                if not isinstance(f, dict) or not isinstance(f.get("name"), str) or "type" not in f:
                    raise AvroSchemaError(f"fields with a name and a type in record {full}")
                fields.append((f["name"], self.parse(f["type"], space, depth + 1)))
            self.defining.discard(full)
            if len({n for n, _ in fields}) != len(fields):
                raise AvroSchemaError(f"distinct field names in record {full}")
            t = AvroType("record", name=full, fields=tuple(fields))
        self.named[full] = t
        return t

    @staticmethod
    def _logical(t: AvroType, doc: dict) -> AvroType:
        logical = doc.get("logicalType")
        if not isinstance(logical, str) or t.kind not in LOGICAL_BASES.get(logical, ()):
            return t  # Avro reads an unknown or misplaced logical type as the plain type
        if logical == "decimal":
            precision, scale = doc.get("precision"), doc.get("scale", 0)
            if not (_is_int(precision) and _is_int(scale) and 0 <= scale <= precision and precision > 0):
                return t  # Avro ignores an invalid decimal: the value reads as bytes
            if t.kind == "fixed" and precision > _max_fixed_digits(t.size):
                return t
            t.logical, t.precision, t.scale = logical, precision, scale
        elif logical == "uuid" and t.kind == "fixed" and t.size != UUID_BYTES:
            return t
        else:
            t.logical = logical
        return t


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _max_fixed_digits(size: int) -> int:
    """Avro's bound on a decimal's precision in ``size`` bytes of two's complement (its own
    formula: the digits of 2^(8 size - 1), never computing that number)."""
    return math.floor(math.log10(2) * (8 * size - 1)) if size > 0 else 0


def _check_expanded_size(root: AvroType) -> None:
    sizes: dict[int, int] = {}

    def size(t: AvroType) -> int:
        if id(t) in sizes:
            return sizes[id(t)]
        children = [c for _, c in t.fields] + list(t.branches) + ([t.items] if t.items else [])
        total = min(1 + sum(size(c) for c in children), MAX_SCHEMA_TYPES + 1)
        sizes[id(t)] = total
        return total

    if size(root) > MAX_SCHEMA_TYPES:
        raise AvroSchemaError(f"a schema of at most {MAX_SCHEMA_TYPES} types when expanded")


# ----------------------------------------------------------------------------- column types


def non_null_branches(t: AvroType) -> list[tuple[int, AvroType]]:
    return [(i, b) for i, b in enumerate(t.branches) if b.kind != "null"]


def column_type(t: AvroType) -> TypeDescriptor:
    """The descriptor of the column an Avro value becomes (see the module docstring)."""
    kind = t.kind
    if t.logical is not None:
        return _logical_column(t)
    if kind in _PLAIN_COLUMNS:
        return TypeDescriptor.of(*_PLAIN_COLUMNS[kind])
    if kind in ("string", "enum"):
        return TypeDescriptor.of("VARCHAR", length=UNBOUNDED_LENGTH)
    if kind == "bytes":
        return TypeDescriptor.of("VARBINARY", length=UNBOUNDED_LENGTH)
    if kind == "fixed":
        return TypeDescriptor.of("BINARY", length=t.size)
    if kind == "record":
        return TypeDescriptor.of("ROW", [(n, column_type(f)) for n, f in t.fields])
    if kind == "array":
        assert t.items is not None  # parse_schema sets items on every array
        return TypeDescriptor.of("ARRAY", [("element", column_type(t.items))])
    if kind == "map":
        assert t.items is not None  # and on every map
        key = TypeDescriptor.of("VARCHAR", length=UNBOUNDED_LENGTH)
        return TypeDescriptor.of("MAP", [("key", key), ("value", column_type(t.items))])
    # a union
    others = non_null_branches(t)
    if not others:
        return TypeDescriptor.of("NULL")
    if len(others) == 1:  # with or without null: Arrow and Spark columns are nullable anyway
        return column_type(others[0][1])
    return TypeDescriptor.of("ROW", [(f"member{m}", column_type(b)) for m, (_, b) in enumerate(others)])


_PLAIN_COLUMNS = {
    "null": ("NULL",),
    "boolean": ("BOOLEAN",),
    "int": ("INTEGER",),
    "long": ("BIGINT",),
    "float": ("FLOAT",),
    "double": ("DOUBLE",),
}


def _logical_column(t: AvroType) -> TypeDescriptor:
    logical = t.logical or ""
    if logical == "decimal":
        if t.precision > MAX_COLUMN_DECIMAL_PRECISION:
            return TypeDescriptor.of("VARCHAR", length=UNBOUNDED_LENGTH)  # plain digits, exact
        return TypeDescriptor.of("DECIMAL", precision=t.precision, scale=t.scale)
    if logical == "date":
        return TypeDescriptor.of("DATE")
    if logical == "uuid":
        return TypeDescriptor.of("VARCHAR", length=UNBOUNDED_LENGTH)
    precision = LOGICAL_PRECISION[logical.rpartition("-")[2]]
    if logical.startswith("time-"):
        return TypeDescriptor.of("TIME_WITHOUT_TIME_ZONE", precision=precision)
    if logical.startswith("local-timestamp-"):
        return TypeDescriptor.of("TIMESTAMP_WITHOUT_TIME_ZONE", precision=precision)
    return TypeDescriptor.of("TIMESTAMP_WITH_LOCAL_TIME_ZONE", precision=precision)
