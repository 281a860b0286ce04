"""Java class files read as data (JVMS §4), never loaded or run: what a serializer that walks a
class's fields (Kryo's ``FieldSerializer``) needs to know about it.

A class file names its class, superclass and interfaces, its access flags, and each field's name,
modifiers, erased type (the descriptor) and generic type (the ``Signature`` attribute), which is
all a field-by-field layout depends on. Methods and code are skipped by their lengths. Every count
and length is checked against the bytes that are left before anything is allocated, like every
other parser here, so a hostile class file costs at most its own size.

Types are ``JavaType`` trees in the format's own words: a primitive, a class with type arguments
(``java.util.List<java.lang.String>``), an array, a type variable (``T``) or a wildcard.
"""

from __future__ import annotations

from dataclasses import dataclass

from statecat.statemeta.binary import DataInput, decode_modified_utf8
from statecat.statemeta.errors import FormatError, UnsupportedError

CLASS_MAGIC = 0xCAFEBABE
# Class file major versions: 45 (JDK 1.0) to 69 (Java 25). A newer one may carry constant kinds
# this reader does not know, so it is refused with the range rather than misread.
OLDEST_MAJOR = 45
NEWEST_MAJOR = 69
# A class file is bounded by its u2 counts; anything much larger than this is not one.
MAX_CLASS_BYTES = 64 << 20

# Access flags (JVMS tables 4.1-B and 4.5-A).
ACC_PUBLIC = 0x0001
ACC_STATIC = 0x0008
ACC_FINAL = 0x0010
ACC_VOLATILE = 0x0040
ACC_TRANSIENT = 0x0080
ACC_INTERFACE = 0x0200
ACC_ABSTRACT = 0x0400
ACC_SYNTHETIC = 0x1000
ACC_ANNOTATION = 0x2000
ACC_ENUM = 0x4000

# Constant pool tags (JVMS table 4.4-B) and the bytes each entry takes after its tag.
CONSTANT_UTF8 = 1
CONSTANT_CLASS = 7
_CONSTANT_SIZES = {
    3: 4,  # Integer
    4: 4,  # Float
    5: 8,  # Long (two slots)
    6: 8,  # Double (two slots)
    7: 2,  # Class
    8: 2,  # String
    9: 4,  # Fieldref
    10: 4,  # Methodref
    11: 4,  # InterfaceMethodref
    12: 4,  # NameAndType
    15: 3,  # MethodHandle
    16: 2,  # MethodType
    17: 4,  # Dynamic
    18: 4,  # InvokeDynamic
    19: 2,  # Module
    20: 2,  # Package
}
_TWO_SLOT_TAGS = {5, 6}

PRIMITIVES = {
    "B": "byte",
    "C": "char",
    "D": "double",
    "F": "float",
    "I": "int",
    "J": "long",
    "S": "short",
    "Z": "boolean",
}


@dataclass(frozen=True)
class JavaType:
    """A field's type. ``kind`` is ``primitive`` (``name`` ``int``…), ``class`` (``name`` the binary
    name with dots, ``java.util.Map$Entry``; ``args`` its type arguments), ``array`` (``args`` =
    (component,)), ``typevar`` (``name`` ``T``) or ``wildcard`` (``name`` ``?``, ``? extends`` or
    ``? super``; ``args`` = (bound,) unless unbounded)."""

    kind: str
    name: str
    args: tuple[JavaType, ...] = ()

    @property
    def component(self) -> JavaType:
        return self.args[0]

    def __str__(self) -> str:
        if self.kind == "array":
            return f"{self.component}[]"
        if self.kind == "wildcard":
            return self.name if not self.args else f"{self.name} {self.args[0]}"
        if self.args:
            return f"{self.name}<{', '.join(map(str, self.args))}>"
        return self.name


@dataclass(frozen=True)
class JavaField:
    name: str
    access: int
    type: JavaType  # the erased type, from the descriptor
    generic: JavaType | None  # from the Signature attribute, when the field's type is generic

    @property
    def is_static(self) -> bool:
        return bool(self.access & ACC_STATIC)

    @property
    def is_transient(self) -> bool:
        return bool(self.access & ACC_TRANSIENT)

    @property
    def is_synthetic(self) -> bool:
        return bool(self.access & ACC_SYNTHETIC)


@dataclass(frozen=True)
class ClassSignature:
    """A generic class's ``Signature``: its type parameters and the superclass and interfaces with
    the arguments it gives them (``class Orders extends Base<String>``)."""

    type_parameters: tuple[str, ...]
    superclass: JavaType
    interfaces: tuple[JavaType, ...]


@dataclass(frozen=True)
class JavaClass:
    name: str  # binary name with dots: com.example.Order, com.example.Order$Line
    access: int
    major: int
    superclass: str | None  # None for java.lang.Object (and module-info)
    interfaces: tuple[str, ...]
    fields: tuple[JavaField, ...]
    signature: ClassSignature | None

    @property
    def is_interface(self) -> bool:
        return bool(self.access & ACC_INTERFACE)

    @property
    def is_enum(self) -> bool:
        return bool(self.access & ACC_ENUM)

    @property
    def is_final(self) -> bool:
        return bool(self.access & ACC_FINAL)

    @property
    def is_abstract(self) -> bool:
        return bool(self.access & ACC_ABSTRACT)


def read_class(data: bytes, name: str) -> JavaClass:
    """Parses one class file; ``name`` says where it came from (``job.jar!/com/x/Order.class``)."""
    if len(data) > MAX_CLASS_BYTES:
        raise FormatError(f"expected a class file of at most {MAX_CLASS_BYTES} bytes, got {len(data)}", file=name)
    data_in = DataInput.of_bytes(data, name)
    magic = data_in.read_i32() & 0xFFFFFFFF
    if magic != CLASS_MAGIC:
        raise data_in.error(f"the class file magic {CLASS_MAGIC:#x}", f"{magic:#x}", offset=0)
    data_in.read_u16()  # minor version: only the major one changes the layout
    at = data_in.offset
    major = data_in.read_u16()
    if not OLDEST_MAJOR <= major <= NEWEST_MAJOR:
        raise UnsupportedError(
            f"class file major version {major}; statecat reads {OLDEST_MAJOR} (JDK 1.0) to {NEWEST_MAJOR} "
            f"(Java {NEWEST_MAJOR - 44})",
            file=name,
            offset=at,
            hint="Compile the job's classes for an older Java release (javac --release), or upgrade statecat",
        )
    pool = _ConstantPool.read(data_in)
    access = data_in.read_u16()
    this_name = pool.class_name(data_in)
    super_at = data_in.offset
    super_index = data_in.read_u16()
    superclass = None if super_index == 0 else pool.class_at(super_index, super_at, data_in)
    interfaces = tuple(pool.class_name(data_in) for _ in range(_count(data_in, 2, "interfaces")))
    fields = tuple(_read_field(data_in, pool) for _ in range(_count(data_in, 8, "fields")))
    for _ in range(_count(data_in, 8, "methods")):
        data_in.skip(6)  # access, name, descriptor
        _skip_attributes(data_in)
    signature = None
    for attribute, body_at, body in _attributes(data_in, pool):
        if attribute == "Signature":
            text = pool.utf8_at(_u16_of(body, body_at, data_in), body_at, data_in)
            signature = _parse_class_signature(text, name, body_at)
    if not data_in.at_end():
        raise data_in.error("the end of the class file after its attributes", f"{data_in.remaining} more bytes")
    return JavaClass(this_name, access, major, superclass, interfaces, fields, signature)


def parse_descriptor(text: str, file: str = "<descriptor>", offset: int | None = None) -> JavaType:
    """A field descriptor (``I``, ``Ljava/lang/String;``, ``[[J``) as a ``JavaType``."""
    parser = _SignatureParser(text, file, offset)
    java_type = parser.field_type(generic=False)
    parser.expect_end()
    return java_type


def parse_field_signature(text: str, file: str = "<signature>", offset: int | None = None) -> JavaType:
    """A field's generic ``Signature`` (``Ljava/util/List<Ljava/lang/String;>;``, ``TT;``)."""
    parser = _SignatureParser(text, file, offset)
    java_type = parser.field_type(generic=True)
    parser.expect_end()
    return java_type


class _ConstantPool:
    """Only the entries a field layout needs are kept: UTF-8 strings and class references. Strings
    are decoded when asked for: string constants may hold what no ``str`` holds (lone surrogates),
    and only names and types are ever needed."""

    __slots__ = ("utf8", "classes", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.utf8: dict[int, tuple[int, bytes]] = {}  # entry -> (offset of its bytes, modified UTF-8)
        self.classes: dict[int, int] = {}  # Class entry -> its name's UTF-8 entry

    @classmethod
    def read(cls, data_in: DataInput) -> _ConstantPool:
        size = data_in.read_u16()
        if size == 0:
            raise data_in.error("a constant pool count of at least 1", 0, offset=data_in.offset - 2)
        pool = cls(size)
        index = 1
        while index < size:
            at = data_in.offset
            tag = data_in.read_u8()
            if tag == CONSTANT_UTF8:
                length = data_in.read_u16()
                pool.utf8[index] = (data_in.offset, data_in.read(length))
            elif tag == CONSTANT_CLASS:
                pool.classes[index] = data_in.read_u16()
            elif tag in _CONSTANT_SIZES:
                data_in.skip(_CONSTANT_SIZES[tag])
            else:
                raise data_in.error(
                    f"a constant pool tag ({', '.join(map(str, sorted({1, *_CONSTANT_SIZES})))}) for entry {index}",
                    tag,
                    offset=at,
                )
            index += 2 if tag in _TWO_SLOT_TAGS else 1
        return pool

    def utf8_at(self, index: int, at: int, data_in: DataInput) -> str:
        if index not in self.utf8:
            raise data_in.error(f"a constant pool UTF-8 entry (1..{self.size - 1})", f"entry {index}", offset=at)
        offset, raw = self.utf8[index]
        return decode_modified_utf8(raw, data_in.name, offset)

    def class_at(self, index: int, at: int, data_in: DataInput) -> str:
        if index not in self.classes:
            raise data_in.error(f"a constant pool Class entry (1..{self.size - 1})", f"entry {index}", offset=at)
        return self.utf8_at(self.classes[index], at, data_in).replace("/", ".")

    def class_name(self, data_in: DataInput) -> str:
        at = data_in.offset
        return self.class_at(data_in.read_u16(), at, data_in)


def _count(data_in: DataInput, min_entry_bytes: int, what: str) -> int:
    at = data_in.offset
    count = data_in.read_u16()
    left = data_in.remaining or 0
    if count * min_entry_bytes > left:
        raise data_in.truncated(
            f"{count} {what} of at least {min_entry_bytes} bytes each", f"{left} bytes left", offset=at
        )
    return count


def _read_field(data_in: DataInput, pool: _ConstantPool) -> JavaField:
    access = data_in.read_u16()
    name = pool.utf8_at(data_in.read_u16(), data_in.offset - 2, data_in)
    descriptor_at = data_in.offset
    descriptor = pool.utf8_at(data_in.read_u16(), descriptor_at, data_in)
    java_type = parse_descriptor(descriptor, data_in.name, descriptor_at)
    generic = None
    for attribute, body_at, body in _attributes(data_in, pool):
        if attribute == "Signature":
            text = pool.utf8_at(_u16_of(body, body_at, data_in), body_at, data_in)
            generic = parse_field_signature(text, data_in.name, body_at)
    return JavaField(name, access, java_type, generic)


def _attributes(data_in: DataInput, pool: _ConstantPool) -> list[tuple[str, int, bytes]]:
    """Each attribute as (name, offset of its body, body)."""
    out = []
    for _ in range(_count(data_in, 6, "attributes")):
        attribute = pool.utf8_at(data_in.read_u16(), data_in.offset - 2, data_in)
        length = data_in.read_i32() & 0xFFFFFFFF
        at = data_in.offset
        out.append((attribute, at, data_in.read(length)))
    return out


def _skip_attributes(data_in: DataInput) -> None:
    for _ in range(_count(data_in, 6, "attributes")):
        data_in.skip(2)
        data_in.skip(data_in.read_i32() & 0xFFFFFFFF)


def _u16_of(body: bytes, at: int, data_in: DataInput) -> int:
    if len(body) != 2:
        raise data_in.error("a 2-byte Signature attribute", f"{len(body)} bytes", offset=at)
    return int.from_bytes(body, "big")


def _parse_class_signature(text: str, file: str, offset: int) -> ClassSignature:
    parser = _SignatureParser(text, file, offset)
    parameters = parser.type_parameters()
    superclass = parser.class_type()
    interfaces = []
    while not parser.at_end():
        interfaces.append(parser.class_type())
    return ClassSignature(parameters, superclass, tuple(interfaces))


class _SignatureParser:
    """Descriptors and generic signatures (JVMS §4.3.2, §4.7.9.1), one character at a time."""

    __slots__ = ("text", "pos", "file", "offset")

    def __init__(self, text: str, file: str, offset: int | None) -> None:
        self.text = text
        self.pos = 0
        self.file = file
        self.offset = offset

    def fail(self, expected: str) -> FormatError:
        got = repr(self.text[self.pos]) if self.pos < len(self.text) else "its end"
        return FormatError(
            f"expected {expected} at character {self.pos} of the type {self.text!r}, got {got}",
            file=self.file,
            offset=self.offset,
        )

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def expect_end(self) -> None:
        if not self.at_end():
            raise self.fail("the end of the type")

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def take(self, char: str) -> None:
        if self.peek() != char:
            raise self.fail(repr(char))
        self.pos += 1

    def identifier(self, stops: str) -> str:
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in stops:
            self.pos += 1
        if self.pos == start:
            raise self.fail("a name")
        return self.text[start : self.pos]

    def field_type(self, *, generic: bool) -> JavaType:
        char = self.peek()
        if char in PRIMITIVES and char:
            self.pos += 1
            return JavaType("primitive", PRIMITIVES[char])
        if char == "[":
            self.pos += 1
            return JavaType("array", "[]", (self.field_type(generic=generic),))
        if char == "L":
            return self.class_type() if generic else self._erased_class()
        if char == "T" and generic:
            self.pos += 1
            name = self.identifier(";")
            self.take(";")
            return JavaType("typevar", name)
        raise self.fail(
            "a type (B C D F I J S Z, L…; or [)" if not generic else "a type (B C D F I J S Z, L…;, T…; or [)"
        )

    def _erased_class(self) -> JavaType:
        self.take("L")
        name = self.identifier(";<")
        self.take(";")
        return JavaType("class", name.replace("/", "."))

    def class_type(self) -> JavaType:
        """``L pkg/Outer<args>.Inner<args>;``: the binary name joins nested parts with ``$``; the
        arguments kept are the innermost class's (a field layout never needs an outer class's)."""
        self.take("L")
        name = self.identifier(";<.")
        args = self.type_arguments()
        while self.peek() == ".":
            self.pos += 1
            name += "$" + self.identifier(";<.")
            args = self.type_arguments()
        self.take(";")
        return JavaType("class", name.replace("/", "."), args)

    def type_arguments(self) -> tuple[JavaType, ...]:
        if self.peek() != "<":
            return ()
        self.pos += 1
        args = []
        while self.peek() != ">":
            char = self.peek()
            if char == "*":
                self.pos += 1
                args.append(JavaType("wildcard", "?"))
            elif char in "+-" and char:
                self.pos += 1
                bound = self.field_type(generic=True)
                args.append(JavaType("wildcard", "? extends" if char == "+" else "? super", (bound,)))
            else:
                args.append(self.field_type(generic=True))
        self.pos += 1
        if not args:
            raise self.fail("at least one type argument")
        return tuple(args)

    def type_parameters(self) -> tuple[str, ...]:
        if self.peek() != "<":
            return ()
        self.pos += 1
        names = []
        while self.peek() != ">":
            names.append(self.identifier(":"))
            self.take(":")
            if self.peek() not in (":", ""):  # the class bound may be empty (an interface bound follows)
                self.field_type(generic=True)
            while self.peek() == ":":
                self.pos += 1
                self.field_type(generic=True)
        self.pos += 1
        return tuple(names)


__all__ = [
    "CLASS_MAGIC",
    "ClassSignature",
    "JavaClass",
    "JavaField",
    "JavaType",
    "parse_descriptor",
    "parse_field_signature",
    "read_class",
]
