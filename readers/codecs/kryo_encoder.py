"""Kryo values written back: the inverse of ``readers.kryo``'s decoder tree, compiled once per
``kryo`` descriptor, for Kryo 2.24 (Flink 1.x) and Kryo 5 (Flink 2.x).

An encoder is ``encode(value, out)`` like every other (``readers.encoders``). It takes what the
decoder returns and what pyarrow's ``to_pylist()`` gives for the column: a dict per object, a list
per collection or array, (key, value) pairs or a dict per map, an enum's constant name,
BigInteger/BigDecimal text (or int/Decimal), a Date as epoch µs or a datetime. A value of the wrong
type is refused with an ``EncodeError`` naming its place (``value.child.base``).

The layout is the ``readers.kryo`` docstring's; where the decoder reads either of two forms, the
encoder writes the one Kryo's own writer picks (Output.writeString: ASCII form for 2-63 ASCII
characters in Kryo 2, 2-32 in Kryo 5; Kryo 5 writes class names with writeAscii, any length).

References: every object Kryo tracks (all but boxed primitives, and Kryo 5's enums) takes the next
reference id, and one written again in the same value is a back-reference. "Again" is Python
identity: the decoder returns the object a back-reference refers to (and a ``KryoString`` for a
short String Python would otherwise share), so ``encode(decode(bytes)) == bytes``. An enum
constant is one object per constant, as in Java, and so is Optional.empty(). A value read through
Arrow or SQL shares no objects: after an edit, an object the stored value held in two places (a
Kryo back-reference) is written in each, an equal but separate object in Java.

What the decoded value does not record is chosen thus, and written the way Kryo writes it:

- an object is written as its declared class (a subclass instance decodes to the declared fields
  only); a field declared as the interface List or Collection is an ArrayList, Set a HashSet and
  Map a HashMap;
- None where an Optional is declared is Optional.empty(), not a null reference;
- a Kryo 5 collection of non-final elements takes the form "all of one class" (they are all
  written as the declared class).

A value of a class known only at run time (a field declared Object or an interface; JSON text) is
written only as NULL: the text does not name the class Kryo would write. A state whose whole value
is such gets no encoder; inside a value, such a field that is not NULL is refused (rows an edit does
not touch keep their stored bytes).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Hashable
from typing import Any

from statecat.readers.codecs.decoders import INT_MIN, LONG_MIN, MAX_BIG_INTEGER_BYTES
from statecat.readers.codecs.encoders import (
    INT_MAX,
    LONG_MAX,
    MICROS_PER_MILLI,
    _big_decimal_parts,
    _big_integer_value,
    _char_encoder,
    _encode_boolean,
    _field,
    _fixed_float,
    _fixed_integer,
    _write_varint,
)
from statecat.readers.codecs.kryo import NAME, NOT_NULL, NULL, VARLONG_GROUPS, is_final, is_tracked, registered_classes
from statecat.readers.codecs.values import (
    EncodeError,
    Encoder,
    _big_integer_bytes,
    _epoch_micros,
    _fields_of,
    _pairs,
    _ranged,
    _refuse,
    _sequence,
    _whole,
)
from statecat.statemeta.errors import UnsupportedError
from statecat.statemeta.java.kryo import KRYO2, KRYO5, PRIMITIVES
from statecat.statemeta.types import TypeDescriptor

# Output.writeString's ASCII form: strings of 2 up to this many ASCII characters.
ASCII_MAX = {KRYO2: 63, KRYO5: 32}
# The class written for a value declared as an interface (the decoder reads any class of COLLECTIONS / MAPS).
DEFAULT_CLASSES = {
    "java.util.Collection": "java.util.ArrayList",
    "java.util.List": "java.util.ArrayList",
    "java.util.Set": "java.util.HashSet",
    "java.util.Map": "java.util.HashMap",
}
MASK64 = (1 << 64) - 1
ASCII_END = 0x80  # set on the last character of an ASCII-form string
FLAG_BIT, MORE_BIT = 0x80, 0x40  # Kryo 5's varint with a flag (and Kryo 2's UTF-8 length)
EMPTY_COLLECTION = 1  # size + 1 with no flag: what Kryo 5 writes for an empty collection or map


class KryoWriter(bytearray):
    """The bytes of one top-level value and its write state: Kryo restarts reference ids and
    class-name ids with every value."""

    __slots__ = ("refs", "names", "held", "next_ref")

    def __init__(self) -> None:
        super().__init__()
        self.refs: dict[Hashable, int] = {}  # an object's key → its reference id
        self.names: dict[str, int] = {}  # class name → name id
        self.held: list[Any] = []  # the objects whose id() keys refs, kept alive while the value is written
        self.next_ref = 0  # the reference id the next new object takes


Write = Callable[[Any, KryoWriter], None]


def build_kryo_encoder(desc: TypeDescriptor) -> Encoder:
    """The encoder of a ``kryo`` descriptor, the inverse of ``build_kryo_decoder``."""
    top_node = desc.fields[0][1]
    inner = top_node.fields[0][1] if top_node.kind == "nullable" else top_node
    if inner.kind == "kryo_any":
        raise UnsupportedError(
            f"no encoder for Kryo-serialized {desc.attr('class')}: its value is of a class known only at run "
            f"time (declared {inner.attr('java')}), shown as JSON text, which does not name the class Kryo "
            f"writes; it is copied unchanged, it cannot be edited"
        )
    top = _Compiler(desc).class_and_object(top_node)

    def encode(value: Any, out: bytearray) -> None:
        writer = KryoWriter()
        top(value, writer)
        out += writer

    return encode


# ----------------------------------------------------------------------------- Kryo's Output


def write_varlong(number: int, out: bytearray) -> None:
    """Output.writeVarLong of an unsigned 64-bit ``number``: 7-bit groups, a ninth byte of 8 bits."""
    for _ in range(VARLONG_GROUPS):
        if number < 0x80:
            out.append(number)
            return
        out.append(number & 0x7F | 0x80)
        number >>= 7
    out.append(number)


def write_varint_flag(flag: bool, number: int, out: bytearray) -> None:
    """Output.writeVarIntFlag (Kryo 5) and writeUtf8Length (Kryo 2, flag set): the flag in bit 8,
    6 value bits, "more" in bit 7, then the rest as a varint."""
    first = number & 0x3F | (FLAG_BIT if flag else 0)
    if number < MORE_BIT:
        out.append(first)
        return
    out.append(first | MORE_BIT)
    _write_varint(number >> 6, out)


def _zigzag(number: int) -> int:
    return (number << 1) ^ (number >> 63)


def _string_writer(ascii_max: int) -> Callable[[str, bytearray], None]:
    """Output.writeString of a non-null String: 2..ascii_max ASCII characters as they are, the last
    with bit 8 set; else the UTF-16 length + 1 (flagged) and each code unit as 1-3 bytes."""

    def write(text: str, out: bytearray) -> None:
        if text.isascii():
            data = text.encode("ascii")
            if 1 < len(data) <= ascii_max:
                out += data
                out[-1] |= ASCII_END
                return
            write_varint_flag(True, len(data) + 1, out)
            out += data
            return
        try:
            data = text.encode("utf-16-be")
        except UnicodeEncodeError:  # what the decoder refuses too
            raise EncodeError("a STRING (valid Unicode: no unpaired surrogates)", text) from None
        units = struct.unpack(f">{len(data) // 2}H", data)
        write_varint_flag(True, len(units) + 1, out)
        for unit in units:
            if unit < 0x80:
                out.append(unit)
            elif unit < 0x800:
                out += bytes((0xC0 | unit >> 6, 0x80 | unit & 0x3F))
            else:
                out += bytes((0xE0 | unit >> 12, 0x80 | unit >> 6 & 0x3F, 0x80 | unit & 0x3F))

    return write


def _runtime_class(node: TypeDescriptor) -> str:
    java = node.attr("java")
    if not java:
        raise UnsupportedError(f"no Java class recorded for Kryo type {node.describe()}")
    return DEFAULT_CLASSES.get(java, java)


def _identity(value: Any) -> Hashable:
    return id(value)


def _constant(value: Any) -> Hashable:
    """An enum constant is one object per constant (a non-str is refused by the payload)."""
    return value if isinstance(value, str) else id(value)


# ----------------------------------------------------------------------------- the encoder tree


class _Compiler:
    """Compiles descriptor nodes into writers, the mirror of ``readers.kryo._Compiler``."""

    def __init__(self, desc: TypeDescriptor) -> None:
        self.version = desc.attr("version")
        if self.version not in ASCII_MAX:
            raise UnsupportedError(f"expected Kryo version {KRYO2} or {KRYO5}, got {self.version!r}")
        self.order = ">" if self.version == KRYO2 else "<"
        # A class registered twice keeps its last id, as the decoder's table does.
        self.ids = {name: i for i, name in registered_classes(desc).items()}
        self.write_string = _string_writer(ASCII_MAX[self.version])

    # -- classes

    def class_name_bytes(self, name: str) -> bytes:
        """How DefaultClassResolver.writeName writes the name: Kryo 5 with writeAscii when it is ASCII."""
        out = bytearray()
        if self.version == KRYO5 and name.isascii() and len(name) > 1:
            out += name.encode("ascii")
            out[-1] |= ASCII_END
        else:
            self.write_string(name, out)
        return bytes(out)

    def class_writer(self, name: str) -> Callable[[KryoWriter], None]:
        """writeClass: varint(registration id + 2), or NAME, the name id, the name the first time."""
        registration = self.ids.get(name)
        if registration is not None:
            tag = bytearray()
            _write_varint(registration + 2, tag)
            tag_bytes = bytes(tag)

            def registered(w: KryoWriter) -> None:
                w += tag_bytes

            return registered
        name_bytes = self.class_name_bytes(name)

        def by_name(w: KryoWriter) -> None:
            w.append(NAME)
            name_id = w.names.get(name)
            if name_id is not None:
                _write_varint(name_id, w)
                return
            name_id = w.names[name] = len(w.names)
            _write_varint(name_id, w)
            w += name_bytes

        return by_name

    # -- the three ways Kryo writes an object

    def class_and_object(self, node: TypeDescriptor) -> Write:
        """writeClassAndObject: the class (00 for null), then the marker and payload."""
        if node.kind == "kryo_any":
            return _any_class(node)
        write_class = self.class_writer(_runtime_class(node))
        own = self.marked(node, nullable=False)
        none_is_value = node.kind == "nullable"  # Optional.empty()

        def write(value: Any, w: KryoWriter) -> None:
            if value is None and not none_is_value:
                w.append(NULL)
                return
            write_class(w)
            own(value, w)

        return write

    def marked(self, node: TypeDescriptor, *, nullable: bool) -> Write:
        """writeObject (``nullable=False``) / writeObjectOrNull: the marker where Kryo writes one, then the payload."""
        payload = self.payload(node)
        if not is_tracked(node, self.version):
            if not nullable:
                return payload  # its writer refuses None: no marker says null here

            def null_marked(value: Any, w: KryoWriter) -> None:
                if value is None:
                    w.append(NULL)
                    return
                w.append(NOT_NULL)
                payload(value, w)

            return null_marked
        java = _runtime_class(node)
        none_is_value = node.kind == "nullable"
        key_of = _constant if node.kind == "enum" else _identity

        def tracked(value: Any, w: KryoWriter) -> None:
            if value is None and not none_is_value:
                if not nullable:
                    raise EncodeError(f"a {java} (Kryo writes no null marker here)", value)
                w.append(NULL)
                return
            key: Hashable | None = (java, key_of(value))
            if none_is_value:  # Optional.empty() is one object; Optional.of(x) a new one each time
                key = (java, None) if value is None else None
            if key is not None:
                ref = w.refs.get(key)
                if ref is not None:
                    _write_varint(ref + 2, w)
                    return
                w.refs[key] = w.next_ref
                w.held.append(value)
            w.next_ref += 1
            w.append(NOT_NULL)
            payload(value, w)

        return tracked

    def value(self, node: TypeDescriptor) -> Write:
        """A field or element declared as ``node``: a primitive, a final class, or any class."""
        if node.attr("java") in PRIMITIVES:
            return self.payload(node)
        if is_final(node):
            return self.marked(node, nullable=True)
        return self.class_and_object(node)

    # -- payloads

    def payload(self, node: TypeDescriptor) -> Write:
        kind = node.kind
        java = node.attr("java")
        if kind in PRIMITIVES:
            return self._primitive(kind)
        if kind == "string":
            write_string = self.write_string

            def string(value: Any, w: KryoWriter) -> None:
                if not isinstance(value, str):
                    raise _refuse("a STRING (str)", value)
                write_string(value, w)

            return string
        if kind == "enum":
            return _enum(node)
        if kind == "bigint":
            return _big_integer
        if kind == "bigdec":
            return _big_decimal
        if kind == "date":
            return _date
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
        raise UnsupportedError(f"no Kryo layout for {node.describe()}")

    def _primitive(self, kind: str) -> Write:
        if kind == "int":
            return _zigzag_int
        if kind == "long":
            return _zigzag_long
        if kind == "boolean":
            return _encode_boolean
        if kind == "byte":
            return _fixed_integer(struct.Struct("b").pack, 8, "a TINYINT (8-bit integer)")
        if kind == "short":
            return _fixed_integer(struct.Struct(self.order + "h").pack, 16, "a SMALLINT (16-bit integer)")
        if kind == "char":
            return _char_encoder(struct.Struct(self.order + "H").pack)
        fmt, expected = {"float": ("f", "a FLOAT (32-bit float)"), "double": ("d", "a DOUBLE (64-bit float)")}[kind]
        pack = struct.Struct(self.order + fmt).pack
        # Output.writeFloat/writeDouble write floatToIntBits/doubleToLongBits: one NaN.
        return _fixed_float(lambda number: pack(number if number == number else math.nan), expected)

    def _struct(self, node: TypeDescriptor) -> Write:
        # Kryo writes fields in name order; the row holds them in declaration order.
        names = [name for name, _ in node.fields]
        keyset = frozenset(names)
        writers = [(name, f".{name}", self.value(child)) for name, child in sorted(node.fields, key=lambda f: f[0])]
        expected = f"a {node.attr('java')} object (dict of {', '.join(names)})"

        def struct_(value: Any, w: KryoWriter) -> None:
            fields = _fields_of(value, names, expected, keyset)
            for name, step, write in writers:
                _field(write, fields[name], w, step)

        return struct_

    def _array(self, node: TypeDescriptor) -> Write:
        element_node = node.fields[0][1]
        java = element_node.attr("java")
        if java in PRIMITIVES:
            element = self._primitive(java)
        elif is_final(element_node):
            element = self.marked(element_node, nullable=True)
        else:
            element = self.class_and_object(element_node)
        expected = f"an ARRAY {node.attr('java')} (list)"

        def array(value: Any, w: KryoWriter) -> None:
            items = _sequence(value, expected)
            _write_varint(len(items) + 1, w)
            for i, item in enumerate(items):
                _field(element, item, w, f"[{i}]")

        return array

    def _collection(self, element_node: TypeDescriptor) -> Write:
        expected = "a LIST (list)"
        final = element_node.attr("java") not in PRIMITIVES and is_final(element_node)
        if self.version == KRYO2:
            element = self.marked(element_node, nullable=True) if final else self.class_and_object(element_node)

            def collection2(value: Any, w: KryoWriter) -> None:
                items = _sequence(value, expected)
                _write_varint(len(items), w)
                for i, item in enumerate(items):
                    _field(element, item, w, f"[{i}]")

            return collection2
        none_is_value = element_node.kind == "nullable"  # None is Optional.empty(), not a null element
        any_class = element_node.kind == "kryo_any"
        if any_class:
            or_null = not_null = _any_class(element_node)
        else:
            or_null, not_null = self.marked(element_node, nullable=True), self.marked(element_node, nullable=False)
        # Non-final elements: Kryo 5 writes the one class they all have (none: an all-null collection).
        element_class = None if final or any_class else self.class_writer(_runtime_class(element_node))

        def collection5(value: Any, w: KryoWriter) -> None:
            items = _sequence(value, expected)
            if not items:
                w.append(EMPTY_COLLECTION)
                return
            has_null = not none_is_value and any(item is None for item in items)
            write_varint_flag(has_null or not final, len(items) + 1, w)
            if not final:
                if all(item is None for item in items):
                    w.append(NULL)
                    return
                if element_class is None:  # refused, naming the first element that is not NULL
                    i = next(i for i, item in enumerate(items) if item is not None)
                    _field(or_null, items[i], w, f"[{i}]")
                    return
                element_class(w)
                w.append(1 if has_null else 0)
            write = or_null if has_null else not_null
            for i, item in enumerate(items):
                _field(write, item, w, f"[{i}]")

        return collection5

    def _map(self, key_node: TypeDescriptor, value_node: TypeDescriptor) -> Write:
        key, value_ = self.value(key_node), self.value(value_node)
        plus_one = 1 if self.version == KRYO5 else 0
        expected = "a MAP (list of (key, value) pairs or dict)"

        def map_(value: Any, w: KryoWriter) -> None:
            pairs = _pairs(value, expected)
            _write_varint(len(pairs) + plus_one, w)
            for i, (k, v) in enumerate(pairs):
                _field(key, k, w, f"[{i}].key")
                _field(value_, v, w, f"[{i}].value")

        return map_


def _any_class(node: TypeDescriptor) -> Write:
    """A value of a class known only at run time: written only as NULL (its JSON text names no class)."""
    note = (
        f"a value of a class known only at run time (declared {node.attr('java')}) is JSON text, which does "
        f"not name the class Kryo writes; statecat writes it only as NULL"
    )

    def any_class(value: Any, w: KryoWriter) -> None:
        if value is not None:
            raise EncodeError("NULL", value, note=note)
        w.append(NULL)

    return any_class


def _zigzag_int(value: Any, w: KryoWriter) -> None:
    _write_varint(_zigzag(_ranged(value, INT_MIN, INT_MAX, "an INT (32-bit integer)")) & MASK64, w)


def _zigzag_long(value: Any, w: KryoWriter) -> None:
    write_varlong(_zigzag(_ranged(value, LONG_MIN, LONG_MAX, "a BIGINT (64-bit integer)")) & MASK64, w)


def _enum(node: TypeDescriptor) -> Write:
    """EnumSerializer: varint(ordinal + 1)."""
    ordinals = {name: i for i, name in enumerate(node.attr("constants", ()))}
    expected = f"a constant of ENUM {node.attr('java')} ({', '.join(ordinals)})"

    def enum(value: Any, w: KryoWriter) -> None:
        ordinal = ordinals.get(value) if isinstance(value, str) else None
        if ordinal is None:
            raise _refuse(expected, value)
        _write_varint(ordinal + 1, w)

    return enum


def _write_big_integer(number: int, w: KryoWriter) -> None:
    """BigIntegerSerializer: varint(length + 1), then toByteArray()."""
    data = _big_integer_bytes(number)
    if len(data) > MAX_BIG_INTEGER_BYTES:
        raise EncodeError(f"a BigInteger of at most {MAX_BIG_INTEGER_BYTES} bytes", number)
    _write_varint(len(data) + 1, w)
    w += data


def _big_integer(value: Any, w: KryoWriter) -> None:
    if value is None:
        raise _refuse("a BigInteger (int or its decimal text)", value)
    _write_big_integer(_big_integer_value(value), w)


def _big_decimal(value: Any, w: KryoWriter) -> None:
    """BigDecimalSerializer: the unscaled value as a BigInteger, then the scale as a zigzag varint."""
    if value is None:
        raise _refuse("a BigDecimal (decimal.Decimal, int or its decimal text)", value)
    unscaled, scale = _big_decimal_parts(value)
    _write_big_integer(unscaled, w)
    _write_varint(_zigzag(scale) & MASK64, w)


def _date(value: Any, w: KryoWriter) -> None:
    """DateSerializer: getTime() (epoch ms) as a varlong, negative ones as their 64-bit pattern."""
    expected = "a DATE-TIME (java.util.Date: epoch µs or datetime, whole milliseconds)"
    if value is None:
        raise _refuse(expected, value)
    millis = _whole(_epoch_micros(value, expected, utc=True), MICROS_PER_MILLI, value, expected)
    write_varlong(millis & MASK64, w)


__all__ = ["build_kryo_encoder", "KryoWriter", "write_varlong", "write_varint_flag"]
