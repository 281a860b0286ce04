"""Kryo's ``FieldSerializer`` layout as Flink configures it, decoded by a tree compiled once per
``kryo`` descriptor (``statemeta.kryo`` types it from the job's class files).

Checked on real Flink bytes (Flink 1.20 = Kryo 2.24, Flink 2.3 = Kryo 5; tests/test_kryo_state.py):

- A value is ``[class][reference marker][payload]``. The class is varint(registration id + 2)
  (85 = the state's type, then the job's registrations), or ``01`` varint(name id) and, the first
  time in the value, the class name; ``00`` is null.
- The reference marker: ``00`` null, ``01`` a new object (it takes the next reference id, before
  its fields), id + 2 an object read before. Boxed primitives get a null marker but no id (nor do
  enums in Kryo 5); where Kryo writes an object it knows cannot be null, they get no marker at all.
- A field of a final class (String, boxes, arrays of final components, final classes, enums)
  writes no class; a primitive field no marker either. Fields are read in name order over the class
  and its superclasses, static and transient ones skipped.
- int/long are zigzag varints (a long's ninth byte holds its top 8 bits whole, as does a Date's);
  char/short/float/double are big-endian in Kryo 2 and little-endian in Kryo 5. Collections and
  maps: varint(size) in Kryo 2, size + 1 (with a has-nulls flag for collections) in Kryo 5;
  elements of a final generic type carry no class.

A back-reference decodes to the very object its first occurrence decoded to, so object identity in
the decoded value is Kryo's: ``readers.kryo_encoder`` writes a back-reference exactly for an object
it has already written. Python shares one object for equal empty and one-character strings, so such
a String decodes as a ``KryoString`` (a str of its own) unless the bytes refer back to it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from statecat.readers.codecs.decoders import MAX_BIG_INTEGER_BYTES, DecodeError, Decoder, micros, render_big_decimal
from statecat.statemeta.java.kryo import (
    BOXED,
    CHILL_IDS,
    COLLECTIONS,
    KRYO2,
    KRYO5,
    MAPS,
    PRIMITIVES,
    KryoTypes,
    NotKryoDecodable,
)
from statecat.statemeta.types import TypeDescriptor

NULL, NOT_NULL = 0, 1
NAME = 1  # a class written by name (Kryo's NAME + 2)
# Kryo's own registrations (ids 0-8) by the boxed class they stand for.
BUILTIN_CLASSES = {
    0: "java.lang.Integer",
    1: "java.lang.String",
    2: "java.lang.Float",
    3: "java.lang.Boolean",
    4: "java.lang.Byte",
    5: "java.lang.Character",
    6: "java.lang.Short",
    7: "java.lang.Long",
    8: "java.lang.Double",
}
MAX_VARINT_BYTES = 10
VARLONG_GROUPS = 8  # 7-bit groups of a varlong before its ninth, whole, byte
# Values whose classes the bytes name, nested deeper than this, are damage (and Python's stack).
MAX_DYNAMIC_DEPTH = 64
# JDK collection classes written by name whose serializers write nothing (Collections.emptyList() …).
EMPTY_COLLECTIONS = {"java.util.Collections$EmptyList", "java.util.Collections$EmptySet"}
EMPTY_MAPS = {"java.util.Collections$EmptyMap"}
# Kinds decoded as text that Python may share between equal values (see KryoString).
SHAREABLE_TEXT = frozenset({"string", "bigint", "bigdec"})


class KryoString(str):
    """A String (or BigInteger/BigDecimal text) of at most one character that Kryo wrote as an
    object of its own: Python shares one object for equal short strings, this one is distinct, so
    the encoder tells it apart from an equal String the bytes referred back to. (A Date at the epoch
    decodes to the int 0, which Python shares too: two such Dates are written back as one.)"""

    __slots__ = ()


class KryoStream:
    """One top-level value's read state: Kryo resets references and class names per value."""

    __slots__ = ("buf", "pos", "refs", "names", "depth")

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        self.pos = pos
        self.refs: list[Any] = []
        self.names: dict[int, str] = {}
        self.depth = 0  # values nested by the classes the bytes name (a value of type Object …)

    def byte(self) -> int:
        pos = self.pos
        if pos >= len(self.buf):
            raise DecodeError(f"Kryo value runs past the end of its bytes at offset {pos}")
        self.pos = pos + 1
        return self.buf[pos]

    def take(self, n: int) -> bytes:
        pos = self.pos
        if n < 0 or pos + n > len(self.buf):
            raise DecodeError(f"Kryo value needs {n} bytes at offset {pos}, has {len(self.buf) - pos}")
        self.pos = pos + n
        return self.buf[pos : pos + n]

    def varint(self) -> int:
        buf, pos = self.buf, self.pos
        if pos < len(buf) and buf[pos] < 0x80:  # the common one-byte case
            self.pos = pos + 1
            return buf[pos]
        result = shift = 0
        for _ in range(MAX_VARINT_BYTES):
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
        raise DecodeError(f"expected a varint of at most {MAX_VARINT_BYTES} bytes at offset {pos}")

    def zigzag(self) -> int:
        v = self.varint()
        return (v >> 1) ^ -(v & 1)

    def varlong(self) -> int:
        """Kryo's varlong: 7-bit groups, least significant first; a ninth byte holds the top 8 bits whole."""
        result = shift = 0
        for _ in range(VARLONG_GROUPS):
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
        return result | (self.byte() << shift)

    def zigzag_long(self) -> int:
        v = self.varlong()
        return (v >> 1) ^ -(v & 1)

    def varint_flag(self) -> tuple[bool, int]:
        """Kryo 5's varint with a flag: bit 7 the flag, bit 6 "more", 6 value bits, then 7-bit groups."""
        first = self.byte()
        flag, value, shift = bool(first & 0x80), first & 0x3F, 6
        more = first & 0x40
        while more:
            b = self.byte()
            value |= (b & 0x7F) << shift
            shift += 7
            more = b & 0x80
            if shift > 6 + 7 * 4:
                raise DecodeError(f"expected a flagged varint of at most 5 bytes before offset {self.pos}")
        return flag, value

    def string(self) -> str | None:
        first = self.byte()
        if not first & 0x80:  # ASCII: the last character carries bit 7
            start = self.pos - 1
            end = start
            buf = self.buf
            while end < len(buf) and not buf[end] & 0x80:
                end += 1
            if end >= len(buf):
                raise DecodeError(f"Kryo ASCII string from offset {start} runs past the end of its bytes")
            self.pos = end + 1
            return buf[start:end].decode("ascii") + chr(buf[end] & 0x7F)
        self.pos -= 1
        _, length = self.varint_flag()
        if length == 0:
            return None
        chars = length - 1
        if chars > len(self.buf) - self.pos:  # each character takes at least one byte
            raise DecodeError(f"Kryo string of {chars} characters at offset {self.pos} is longer than its bytes")
        units = []
        for _ in range(chars):  # UTF-16 units, each as 1-3 bytes (surrogates separately)
            b = self.byte()
            if b < 0x80:
                units.append(b)
            elif b >> 5 == 0b110:
                units.append(((b & 0x1F) << 6) | (self.byte() & 0x3F))
            else:
                b2, b3 = self.byte(), self.byte()
                units.append(((b & 0x0F) << 12) | ((b2 & 0x3F) << 6) | (b3 & 0x3F))
        try:
            return struct.pack(f"<{len(units)}H", *units).decode("utf-16-le")
        except UnicodeDecodeError:  # Java strings may hold them; Arrow's and Spark's cannot
            raise DecodeError(f"Kryo string before offset {self.pos} holds a lone UTF-16 surrogate") from None


Read = Callable[[KryoStream], Any]


def build_kryo_decoder(desc: TypeDescriptor) -> Decoder:
    """The decoder of a ``kryo`` descriptor: ``decode(buf, pos) -> (value, next_pos)``."""
    compiler = _Compiler(desc)
    top = compiler.class_and_object(desc.fields[0][1])

    def decode(buf: bytes, pos: int) -> tuple[Any, int]:
        s = KryoStream(buf, pos)
        return top(s), s.pos

    return decode


class _Compiler:
    """Compiles descriptor nodes into readers; runtime classes the descriptor did not foresee
    (subclasses, values of declared type Object) are typed from the classpath on first sight."""

    def __init__(self, desc: TypeDescriptor) -> None:
        self.version = desc.attr("version")
        self.order = ">" if self.version == KRYO2 else "<"
        self.registered = registered_classes(desc)
        self.custom = dict(desc.attr("custom", ()))
        self.classpath_entries = desc.attr("classpath", ())
        self._types: KryoTypes | None = None
        self._by_class: dict[str, Read] = {}

    # -- runtime classes

    def types(self) -> KryoTypes:
        if self._types is None:
            from statecat.statemeta.java.classpath import ClassPath

            self._types = KryoTypes(ClassPath(self.classpath_entries), self.version, self.custom)
        return self._types

    def read_class(self, s: KryoStream) -> str | None:
        at = s.pos
        tag = s.varint()
        if tag == NULL:
            return None
        if tag == NAME:
            name_id = s.varint()
            name = s.names.get(name_id)
            if name is None:
                name = s.string()
                if not name:
                    raise DecodeError(f"expected a class name at offset {s.pos}")
                s.names[name_id] = name
            return name
        name = self.registered.get(tag - 2)
        if name is None:
            raise DecodeError(f"Kryo registration id {tag - 2} at offset {at} is not one of the job's registrations")
        return name

    def payload_of_class(self, name: str) -> Read:
        """Reads what follows a class written as ``name`` (its reference marker and payload)."""
        read = self._by_class.get(name)
        if read is None:
            try:
                node = self.types().of_class(name)
            except NotKryoDecodable as exc:
                message = exc.message

                def fail(s: KryoStream) -> Any:
                    raise DecodeError(f"a value of class {name}: {message}")

                read = fail
            else:
                read = self.marked(node, nullable=False)
            self._by_class[name] = read
        return read

    # -- the three ways Kryo writes an object

    def class_and_object(self, node: TypeDescriptor) -> Read:
        """writeClassAndObject: the class, then the marker and payload; shaped like ``node``."""
        declared = node.attr("java")
        own = self.marked(node, nullable=False) if node.kind != "kryo_any" else None
        adapt = _adapter(node)
        kinds = _layout_names(node)

        def read(s: KryoStream) -> Any:
            name = self.read_class(s)
            if name is None:
                return None
            if own is not None and (name == declared or name in kinds):
                return own(s)
            if name in EMPTY_COLLECTIONS or name in EMPTY_MAPS:
                return adapt([])
            if s.depth >= MAX_DYNAMIC_DEPTH:
                raise DecodeError(f"Kryo values nested more than {MAX_DYNAMIC_DEPTH} deep at offset {s.pos}")
            s.depth += 1
            value = self.payload_of_class(name)(s)
            s.depth -= 1
            return adapt(value)

        return read

    def marked(self, node: TypeDescriptor, *, nullable: bool) -> Read:
        """writeObject (``nullable=False``) / writeObjectOrNull: the marker where Kryo writes one, then the payload."""
        payload = self.payload(node)
        untracked = not is_tracked(node, self.version)
        distinct = node.kind in SHAREABLE_TEXT
        if untracked and not nullable:
            return payload
        if untracked:

            def null_marked(s: KryoStream) -> Any:
                marker = s.varint()
                if marker == NULL:
                    return None
                if marker != NOT_NULL:
                    raise DecodeError(f"expected a null marker 0 or 1 at offset {s.pos - 1}, got {marker}")
                return payload(s)

            return null_marked

        def tracked(s: KryoStream) -> Any:
            at = s.pos
            marker = s.varint()
            if marker == NOT_NULL:
                index = len(s.refs)
                s.refs.append(None)
                value = payload(s)
                if distinct and value is not None and len(value) <= 1:
                    value = KryoString(value)
                s.refs[index] = value
                return value
            if marker == NULL:
                if not nullable:
                    raise DecodeError(f"expected an object at offset {at}, got null")
                return None
            if marker - 2 >= len(s.refs):
                raise DecodeError(f"reference {marker - 2} at offset {at} is to an object not read yet")
            return s.refs[marker - 2]

        return tracked

    def value(self, node: TypeDescriptor) -> Read:
        """A field or element declared as ``node``: a primitive, a final class, or any class."""
        java = node.attr("java")
        if java in PRIMITIVES:
            return self.payload(node)
        if is_final(node):
            return self.marked(node, nullable=True)
        return self.class_and_object(node)

    # -- payloads

    def payload(self, node: TypeDescriptor) -> Read:
        kind = node.kind
        java = node.attr("java")
        if kind in PRIMITIVES:
            return self._primitive(kind)
        if kind == "string":
            return KryoStream.string
        if kind == "enum":
            constants = node.attr("constants", ())

            def enum(s: KryoStream) -> Any:
                ordinal = s.varint() - 1
                if not 0 <= ordinal < len(constants):
                    raise DecodeError(f"enum {java} ordinal {ordinal} outside 0..{len(constants) - 1}")
                return constants[ordinal]

            return enum
        if kind == "bigint":
            return lambda s: _big_integer_text(self._big_integer(s))
        if kind == "bigdec":

            def bigdec(s: KryoStream) -> Any:
                unscaled = self._big_integer(s)
                scale = s.zigzag()
                return None if unscaled is None else render_big_decimal(unscaled, scale)

            return bigdec
        if kind == "date":
            return lambda s: micros(_signed_long(s.varlong()) * 1000)
        if kind == "pojo":
            return self._struct(node)
        if kind == "nullable":  # Optional: its value written with its class
            return self.class_and_object(node.fields[0][1])
        if kind == "list" and java and java.startswith("["):
            return self._array(node)
        if kind == "list":
            return self._collection(node.fields[0][1])
        if kind == "map":
            return self._map(node.child("key"), node.child("value"))
        if kind == "kryo_any":
            raise NotKryoDecodable(f"no layout for {java}")
        raise NotKryoDecodable(f"no Kryo layout for {node.describe()}")

    def _primitive(self, kind: str) -> Read:
        if kind == "int":
            return KryoStream.zigzag
        if kind == "long":
            return KryoStream.zigzag_long
        if kind == "boolean":
            return lambda s: s.byte() != 0
        if kind == "byte":
            return _signed_byte
        fmt = {"short": "h", "char": "H", "float": "f", "double": "d"}[kind]
        unpack = struct.Struct(self.order + fmt)
        size = unpack.size
        if kind == "char":
            return lambda s: chr(unpack.unpack(s.take(size))[0])
        return lambda s: unpack.unpack(s.take(size))[0]

    def _big_integer(self, s: KryoStream) -> int | None:
        length = s.varint()
        if length == NULL:
            return None
        if length - 1 > MAX_BIG_INTEGER_BYTES:
            raise DecodeError(f"BigInteger of {length - 1} bytes at offset {s.pos}; at most {MAX_BIG_INTEGER_BYTES}")
        return int.from_bytes(s.take(length - 1), "big", signed=True)

    def _struct(self, node: TypeDescriptor) -> Read:
        # Kryo reads fields in name order; the row keeps the class's declaration order.
        names = [name for name, _ in node.fields]
        readers = [(name, self.value(child)) for name, child in sorted(node.fields, key=lambda f: f[0])]

        def struct_(s: KryoStream) -> dict[str, Any]:
            values = {name: read(s) for name, read in readers}
            return {name: values[name] for name in names}

        return struct_

    def _array(self, node: TypeDescriptor) -> Read:
        element_node = node.fields[0][1]
        java = element_node.attr("java")
        if java in PRIMITIVES:
            element = self._primitive(java)
        elif is_final(element_node):
            element = self.marked(element_node, nullable=True)
        else:
            element = self.class_and_object(element_node)

        def array(s: KryoStream) -> list[Any] | None:
            n = s.varint()
            if n == NULL:
                return None
            _check_count(s, n - 1)
            return [element(s) for _ in range(n - 1)]

        return array

    def _collection(self, element_node: TypeDescriptor) -> Read:
        final = element_node.attr("java") not in PRIMITIVES and is_final(element_node)
        or_null = self.marked(element_node, nullable=True) if final else None
        not_null = self.marked(element_node, nullable=False) if final else None
        any_class = self.class_and_object(element_node)
        adapt = _adapter(element_node)
        if self.version == KRYO2:

            def collection2(s: KryoStream) -> list[Any]:
                n = s.varint()
                _check_count(s, n)
                read = or_null or any_class
                return [read(s) for _ in range(n)]

            return collection2

        def collection5(s: KryoStream) -> list[Any] | None:
            flag, n = s.varint_flag()
            if n == 0:
                return None
            n -= 1
            _check_count(s, n)
            if final:
                read = or_null if flag else not_null
                return [read(s) for _ in range(n)]  # type: ignore[misc]
            if not flag:  # elements of different classes
                return [any_class(s) for _ in range(n)]
            if n == 0:
                return []
            name = self.read_class(s)
            if name is None:
                return [None] * n
            has_null = s.byte() != 0
            marked = self._marked_of_class(name, element_node, nullable=has_null)
            return [adapt(marked(s)) for _ in range(n)]

        return collection5

    def _marked_of_class(self, name: str, node: TypeDescriptor, *, nullable: bool) -> Read:
        """Elements all of class ``name`` (Kryo 5 writes the class once): marker and payload."""
        if name == node.attr("java") or name in _layout_names(node):
            return self.marked(node, nullable=nullable)
        key = f"{name}\0{nullable}"
        read = self._by_class.get(key)
        if read is None:
            read = self.marked(self.types().of_class(name), nullable=nullable)
            self._by_class[key] = read
        return read

    def _map(self, key_node: TypeDescriptor, value_node: TypeDescriptor) -> Read:
        key = self.value(key_node) if is_final(key_node) else self.class_and_object(key_node)
        value = self.value(value_node) if is_final(value_node) else self.class_and_object(value_node)
        plus_one = 1 if self.version == KRYO5 else 0

        def map_(s: KryoStream) -> list[tuple[Any, Any]] | None:
            n = s.varint()
            if plus_one:
                if n == 0:
                    return None
                n -= 1
            _check_count(s, n)
            out = []
            for _ in range(n):
                k = key(s)
                out.append((k, value(s)))
            return out

        return map_


def registered_classes(desc: TypeDescriptor) -> dict[int, str]:
    """Registration id → class of a ``kryo`` descriptor: Kryo's own, chill's, then the job's."""
    registered = dict(BUILTIN_CLASSES)
    registered.update({i: name for name, i in CHILL_IDS.items()})
    registered.update(dict(desc.attr("registrations", ())))
    return registered


def is_final(node: TypeDescriptor) -> bool:
    """Kryo's ``isFinal`` of a declared type: a value of it is written without its class."""
    java = node.attr("java") or ""
    if java in BOXED or java == "java.lang.String" or java == "java.util.Optional":
        return True
    if node.kind in ("pojo", "enum"):
        return bool(node.attr("final"))
    if java.startswith("["):
        element = node.fields[0][1]
        return element.attr("java") in PRIMITIVES or is_final(element)
    return False


def is_tracked(node: TypeDescriptor, version: int) -> bool:
    """Whether Kryo gives a value of ``node`` a reference id (MapReferenceResolver.useReferences):
    every object but the boxed primitives, and in Kryo 5 but enums."""
    java = node.attr("java")
    if java in BOXED or java in PRIMITIVES:
        return False
    return not (node.kind == "enum" and version == KRYO5)


def _signed_byte(s: KryoStream) -> int:
    b = s.byte()
    return b - 256 if b >= 0x80 else b


def _signed_long(value: int) -> int:
    """A varlong written with ``optimizePositive``: negative values come as their 64-bit pattern."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _check_count(s: KryoStream, n: int) -> None:
    if n > len(s.buf) - s.pos:  # every element takes at least one byte
        raise DecodeError(f"Kryo count {n} at offset {s.pos} is larger than the bytes left ({len(s.buf) - s.pos})")


def _big_integer_text(value: int | None) -> str | None:
    # Through Decimal: str(int) refuses more than 4300 digits (MAX_BIG_INTEGER_BYTES bounds the cost).
    return None if value is None else str(Decimal(value))


def _layout_names(node: TypeDescriptor) -> frozenset[str]:
    """Runtime classes that share ``node``'s layout (a List field holding an ArrayList)."""
    if node.kind == "list" and not (node.attr("java") or "").startswith("["):
        return COLLECTIONS
    if node.kind == "map":
        return MAPS
    return frozenset()


def _adapter(node: TypeDescriptor) -> Callable[[Any], Any]:
    """Shapes a value decoded by its runtime class like ``node``'s column: JSON text for a value
    of any class, the declared fields of a subclass."""
    if node.kind == "kryo_any":
        return _json_text
    if node.kind == "pojo":
        names = [name for name, _ in node.fields]
        return lambda v: v if not isinstance(v, dict) else {n: v.get(n) for n in names}
    return lambda v: v


def _json_text(value: Any) -> str | None:
    if value is None:
        return None
    return json.dumps(_jsonable(value), ensure_ascii=False, sort_keys=False)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(e, tuple) and len(e) == 2 for e in value):
            if all(isinstance(k, str) for k, _ in value):
                return {k: _jsonable(v) for k, v in value}
            return [[_jsonable(k), _jsonable(v)] for k, v in value]
        return [_jsonable(e) for e in value]
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


__all__ = [
    "build_kryo_decoder",
    "KryoStream",
    "KryoString",
    "KRYO2",
    "KRYO5",
    "is_final",
    "is_tracked",
    "registered_classes",
]
