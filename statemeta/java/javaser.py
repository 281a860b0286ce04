"""A parser of Java Object Serialization streams (``AC ED 00 05``) into plain Python values.

Flink puts Java-serialized objects in a few places statecat must read past or understand: the
CheckpointProperties trailer of ``_metadata`` and the LogicalType objects inside RowData serializer
snapshots. This parser only walks the grammar of the stream protocol; it never loads, instantiates
or runs a Java class, so hostile bytes can at worst produce an error.

Results: an object becomes a dict ``{"@class": name, field: value, ..., "@annotations": [...]}``
(annotations are what a class's ``writeObject`` wrote), an enum constant its name, a string a
``str``, an array a list, block data ``bytes``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from statecat.statemeta.binary import TRUNCATED_HINT, decode_modified_utf8, encode_modified_utf8
from statecat.statemeta.errors import FormatError

STREAM_MAGIC = 0xACED
STREAM_VERSION = 5

TC_NULL = 0x70
TC_REFERENCE = 0x71
TC_CLASSDESC = 0x72
TC_OBJECT = 0x73
TC_STRING = 0x74
TC_ARRAY = 0x75
TC_CLASS = 0x76
TC_BLOCKDATA = 0x77
TC_ENDBLOCKDATA = 0x78
TC_RESET = 0x79
TC_BLOCKDATALONG = 0x7A
TC_LONGSTRING = 0x7C
TC_PROXYCLASSDESC = 0x7D
TC_ENUM = 0x7E
BASE_WIRE_HANDLE = 0x7E0000

SC_WRITE_METHOD = 0x01
SC_SERIALIZABLE = 0x02
SC_EXTERNALIZABLE = 0x04
SC_BLOCK_DATA = 0x08
SC_ENUM = 0x10

MAX_ARRAY_LENGTH = 1 << 24
MAX_DEPTH = 200

_PRIMITIVES = {
    "B": struct.Struct(">b"),
    "C": struct.Struct(">H"),
    "D": struct.Struct(">d"),
    "F": struct.Struct(">f"),
    "I": struct.Struct(">i"),
    "J": struct.Struct(">q"),
    "S": struct.Struct(">h"),
    "Z": struct.Struct(">?"),
}


class _ClassDesc:
    __slots__ = ("name", "flags", "fields", "superclass")

    def __init__(self, name: str, flags: int, fields: list[tuple[str, str]], superclass: _ClassDesc | None) -> None:
        self.name = name
        self.flags = flags
        self.fields = fields
        self.superclass = superclass

    def hierarchy(self) -> list[_ClassDesc]:
        chain: list[_ClassDesc]
        desc: _ClassDesc | None
        chain, desc = [], self
        while desc is not None:
            if len(chain) > MAX_DEPTH:  # a back-reference can make a class its own ancestor
                raise FormatError(
                    f"expected a class hierarchy at most {MAX_DEPTH} deep in a Java serialization "
                    f"stream, got a deeper or cyclic one at class {self.name}"
                )
            chain.append(desc)
            desc = desc.superclass
        return chain[::-1]


class _Parser:
    def __init__(self, data: bytes, file: str) -> None:
        self.data = data
        self.pos = 0
        self.file = file
        self.handles: list[object] = []
        self.depth = 0

    def fail(self, expected: str, got: object, at: int | None = None) -> FormatError:
        return FormatError(
            f"expected {expected} in a Java serialization stream, got {got}",
            file=self.file,
            offset=self.pos if at is None else at,
        )

    def take(self, n: int) -> bytes:
        if n < 0:
            raise self.fail("a non-negative length", n)
        if self.pos + n > len(self.data):
            raise FormatError(
                f"truncated or corrupt: expected {n} more bytes in a Java serialization stream, "
                f"got {len(self.data) - self.pos} left",
                file=self.file,
                offset=self.pos,
                hint=TRUNCATED_HINT,
            )
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def u8(self) -> int:
        return self.take(1)[0]

    def unpack(self, code: str) -> int | float:
        fmt = _PRIMITIVES[code]
        return fmt.unpack(self.take(fmt.size))[0]

    def utf(self) -> str:
        at = self.pos
        n = struct.unpack(">H", self.take(2))[0]
        return decode_modified_utf8(self.take(n), self.file, at)

    def new_handle(self, value: object) -> int:
        self.handles.append(value)
        return len(self.handles) - 1

    def set_handle(self, slot: int, value: object) -> None:
        """Fills a handle reserved before its content was read (a reset inside it would have dropped it)."""
        if slot >= len(self.handles):
            raise self.fail("no reset inside an enum constant or proxy class", "a reset that dropped its handle")
        self.handles[slot] = value

    def reference(self) -> object:
        at = self.pos
        handle = struct.unpack(">i", self.take(4))[0] - BASE_WIRE_HANDLE
        if not 0 <= handle < len(self.handles):
            raise self.fail("a back-reference to an earlier object", f"handle {handle}", at)
        return self.handles[handle]

    def content(self) -> object:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"objects nested at most {MAX_DEPTH} deep", "deeper nesting")
        try:
            return self._content()
        finally:
            self.depth -= 1

    def _content(self) -> object:
        at = self.pos
        tc = self.u8()
        if tc == TC_NULL:
            return None
        if tc == TC_REFERENCE:
            return self.reference()
        if tc == TC_STRING:
            value: object = self.utf()
            self.new_handle(value)
            return value
        if tc == TC_LONGSTRING:
            n = struct.unpack(">q", self.take(8))[0]
            value = decode_modified_utf8(self.take(n), self.file, at)
            self.new_handle(value)
            return value
        if tc == TC_CLASSDESC or tc == TC_PROXYCLASSDESC:
            self.pos = at
            return self.class_desc()
        if tc == TC_CLASS:
            desc = self.class_desc()
            value = {"@class": "java.lang.Class", "name": desc.name if desc else None}
            self.new_handle(value)
            return value
        if tc == TC_OBJECT:
            return self.object()
        if tc == TC_ENUM:
            self.class_desc()
            slot = self.new_handle(None)
            constant = self.content()
            self.set_handle(slot, constant)
            return constant
        if tc == TC_ARRAY:
            return self.array()
        if tc == TC_BLOCKDATA:
            return self.take(self.u8())
        if tc == TC_BLOCKDATALONG:
            return self.take(struct.unpack(">i", self.take(4))[0])
        if tc == TC_RESET:
            # A run of resets is legal; skip it in a loop, not by recursion.
            while self.pos < len(self.data) and self.data[self.pos] == TC_RESET:
                self.pos += 1
            self.handles.clear()
            return self._content()
        raise self.fail("a type code 0x70..0x7E", f"0x{tc:02X}", at)

    def class_desc(self) -> _ClassDesc | None:
        # Superclass descriptors nest: count them like objects so a long chain is an error, not a RecursionError.
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"class descriptors nested at most {MAX_DEPTH} deep", "deeper nesting")
        try:
            return self._class_desc()
        finally:
            self.depth -= 1

    def _class_desc(self) -> _ClassDesc | None:
        at = self.pos
        tc = self.u8()
        if tc == TC_NULL:
            return None
        if tc == TC_REFERENCE:
            desc = self.reference()
            if not isinstance(desc, _ClassDesc):
                raise self.fail("a reference to a class descriptor", type(desc).__name__, at)
            return desc
        if tc == TC_PROXYCLASSDESC:
            slot = self.new_handle(None)
            for _ in range(struct.unpack(">i", self.take(4))[0]):
                self.utf()
            self.annotations()
            desc = _ClassDesc("<proxy>", SC_SERIALIZABLE, [], self.class_desc())
            self.set_handle(slot, desc)
            return desc
        if tc != TC_CLASSDESC:
            raise self.fail("a class descriptor", f"0x{tc:02X}", at)
        name = self.utf()
        self.take(8)  # serialVersionUID
        desc = _ClassDesc(name, 0, [], None)
        self.new_handle(desc)
        desc.flags = self.u8()
        for _ in range(struct.unpack(">h", self.take(2))[0]):
            code = chr(self.u8())
            field_name = self.utf()
            if code in "[L":
                self.content()  # the field's type signature as a string
            elif code not in _PRIMITIVES:
                raise self.fail("a field type code", repr(code))
            desc.fields.append((code, field_name))
        self.annotations()
        desc.superclass = self.class_desc()
        desc.hierarchy()  # refuses a cycle (a superclass that refers back to this class) here
        return desc

    def annotations(self) -> list[object]:
        items: list[object] = []
        while True:
            if self.pos < len(self.data) and self.data[self.pos] == TC_ENDBLOCKDATA:
                self.pos += 1
                return items
            items.append(self.content())

    def object(self) -> dict:
        desc = self.class_desc()
        if desc is None:
            raise self.fail("a class descriptor for an object", "null")
        value: dict = {"@class": desc.name}
        self.new_handle(value)
        annotations = []
        for cls in desc.hierarchy():
            if cls.flags & SC_EXTERNALIZABLE:
                if not cls.flags & SC_BLOCK_DATA:
                    raise self.fail("externalizable data in block-data mode", f"class {cls.name} in protocol 1")
                annotations.extend(self.annotations())
                continue
            for code, name in cls.fields:
                value[name] = self.content() if code in "[L" else self.unpack(code)
            if cls.flags & SC_WRITE_METHOD:
                annotations.extend(self.annotations())
        if annotations:
            value["@annotations"] = annotations
        return value

    def array(self) -> list:
        desc = self.class_desc()
        if desc is None or len(desc.name) < 2 or not desc.name.startswith("["):
            raise self.fail("an array class descriptor", desc.name if desc else "null")
        items: list = []
        self.new_handle(items)
        at = self.pos
        n = struct.unpack(">i", self.take(4))[0]
        if not 0 <= n <= MAX_ARRAY_LENGTH:
            raise self.fail(f"an array length between 0 and {MAX_ARRAY_LENGTH}", n, at)
        code = desc.name[1]
        if code in "[L":
            items.extend(self.content() for _ in range(n))
        elif code == "B":
            items.append(self.take(n))  # byte[] kept as one bytes value
        elif code in _PRIMITIVES:
            items.extend(self.unpack(code) for _ in range(n))
        else:
            raise self.fail("an array component type", repr(code), at)
        return items


def parse_java_object(data: bytes, file: str = "<java serialization stream>") -> tuple[object, int]:
    """Parses one serialized object from the start of ``data``; returns it and the bytes consumed."""
    parser = _Parser(data, file)
    magic, version = struct.unpack(">HH", parser.take(4))
    if magic != STREAM_MAGIC or version != STREAM_VERSION:
        raise parser.fail(
            f"stream header 0x{STREAM_MAGIC:04X} 0x{STREAM_VERSION:04X}", f"0x{magic:04X} 0x{version:04X}", 0
        )
    value = parser.content()
    return value, parser.pos


def java_list(value: object, depth: int = 0) -> list:
    """The elements of a serialized java.util.List (ArrayList, unmodifiable or singleton wrappers)."""
    if isinstance(value, list):
        return value
    if not isinstance(value, dict):
        raise TypeError(f"not a serialized list: {type(value).__name__}")
    if depth > MAX_DEPTH:  # back-references can make a wrapper wrap itself
        raise TypeError("not a serialized list: wrappers nested too deep or cyclic")
    for wrapped in ("list", "c"):
        if isinstance(value.get(wrapped), (dict, list)):
            return java_list(value[wrapped], depth + 1)
    if "element" in value:  # Collections$SingletonList
        return [value["element"]]
    annotations = value.get("@annotations", [])
    # ArrayList/LinkedList write their capacity or size as block data, then the elements.
    return [item for item in annotations if not isinstance(item, (bytes, bytearray))]


# ----------------------------------------------------------------------------- writing

SERIALIZABLE_ENUM_FLAGS = SC_ENUM | SC_SERIALIZABLE


@dataclass(frozen=True)
class JavaClass:
    """A class as the stream describes it: fields in stream order (primitives first, each group by
    name, as ``ObjectStreamClass`` sorts them), each with its JVM type signature."""

    name: str
    serial_version_uid: int
    fields: tuple[tuple[str, str], ...] = ()
    flags: int = SC_SERIALIZABLE
    superclass: JavaClass | None = None


@dataclass(frozen=True)
class JavaObject:
    cls: JavaClass
    values: tuple[object, ...]  # one per field, in the class's field order


@dataclass(frozen=True)
class JavaEnum:
    cls: JavaClass
    constant: str


JAVA_LANG_ENUM = JavaClass("java.lang.Enum", 0, flags=SERIALIZABLE_ENUM_FLAGS)


def enum_class(name: str) -> JavaClass:
    """An enum's descriptor: serialVersionUID 0, no fields, ``java.lang.Enum`` above it."""
    return JavaClass(name, 0, flags=SERIALIZABLE_ENUM_FLAGS, superclass=JAVA_LANG_ENUM)


def write_java_object(value: JavaObject) -> bytes:
    """A Java serialization stream of one object graph, byte for byte what ``ObjectOutputStream``
    writes for it: handles are assigned in the same order, class descriptors and field type
    strings (interned in Java) are back-references when repeated."""
    return _Writer().stream(value)


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()
        self.handles: dict[object, int] = {}
        self.next_handle = 0

    def stream(self, value: JavaObject) -> bytes:
        self.out += struct.pack(">HH", STREAM_MAGIC, STREAM_VERSION)
        self.content(value)
        return bytes(self.out)

    def assign(self, key: object | None) -> None:
        if key is not None:
            self.handles[key] = self.next_handle
        self.next_handle += 1

    def reference(self, key: object) -> bool:
        handle = self.handles.get(key)
        if handle is None:
            return False
        self.out.append(TC_REFERENCE)
        self.out += struct.pack(">i", BASE_WIRE_HANDLE + handle)
        return True

    def utf(self, text: str) -> None:
        raw = encode_modified_utf8(text)
        self.out += struct.pack(">H", len(raw)) + raw

    def string(self, text: str, interned: bool = False) -> None:
        # Only interned strings (field type signatures) are shared; values are distinct objects.
        if interned and self.reference(("string", text)):
            return
        self.out.append(TC_STRING)
        self.assign(("string", text) if interned else None)
        self.utf(text)

    def class_desc(self, cls: JavaClass | None) -> None:
        if cls is None:
            self.out.append(TC_NULL)
            return
        if self.reference(cls):
            return
        self.out.append(TC_CLASSDESC)
        self.utf(cls.name)
        self.out += struct.pack(">q", cls.serial_version_uid)
        self.assign(cls)
        self.out.append(cls.flags)
        self.out += struct.pack(">H", len(cls.fields))
        for name, signature in cls.fields:
            self.out += signature[0].encode("ascii")
            self.utf(name)
            if signature[0] in "L[":
                self.string(signature, interned=True)
        self.out.append(TC_ENDBLOCKDATA)
        self.class_desc(cls.superclass)

    def content(self, value: object) -> None:
        if value is None:
            self.out.append(TC_NULL)
        elif isinstance(value, str):
            self.string(value)
        elif isinstance(value, JavaEnum):
            self.out.append(TC_ENUM)
            self.class_desc(value.cls)
            self.assign(None)
            self.string(value.constant)
        elif isinstance(value, JavaObject):
            self.out.append(TC_OBJECT)
            self.class_desc(value.cls)
            self.assign(None)
            for (_, signature), field in zip(value.cls.fields, value.values):
                code = signature[0]
                if code in _PRIMITIVES:
                    self.out += _PRIMITIVES[code].pack(field)
                else:
                    self.content(field)
        else:
            raise TypeError(f"cannot write {type(value).__name__} into a Java serialization stream")
