"""Kryo-serialized state, typed from the job's own class files (never loaded, never run).

Flink serializes a type that is neither a Flink type nor a POJO with Kryo's ``FieldSerializer``,
which writes no schema: the values of the class's fields, by name order. The job's class files
name every field and its type, so with the job's JAR (``--classpath``) ``apply_classpath`` turns
each ``raw`` Kryo descriptor (from the ``KryoSerializerSnapshot``) into a ``kryo`` descriptor: a
struct of the class's fields whose nodes keep the Java facts Kryo's layout depends on (declared
class, final or not, registration ids). ``readers.kryo`` compiles its decoder tree from that.

Which Kryo: 2.24 for Flink 1.x, 5 for Flink 2.x; the snapshot does not say, the ``_metadata``
version does (see ``kryo_version``). Layout notes, checked on real Flink bytes: the
``readers.kryo`` docstring.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from statecat.statemeta.errors import StatecatError
from statecat.statemeta.java.classfile import ACC_ENUM, JavaClass, JavaType
from statecat.statemeta.java.classpath import ClassPath
from statecat.statemeta.types import TypeDescriptor, has_kryo

if TYPE_CHECKING:
    from statecat.statemeta.model import StateMeta

KRYO2, KRYO5 = 2, 5
# _metadata version 5 is Flink 2.0, the first release with Kryo 5 (see metadata.METADATA_VERSION_RELEASES).
FIRST_KRYO5_METADATA_VERSION = 5
# Flink's registrations: Kryo's own (0-8; Kryo 2 also 9 = void), chill's Java classes (73-84), the
# job's from 85 on in the snapshot's order (KryoSerializer: FlinkChillPackageRegistrar).
KRYO_BUILTIN_IDS = {
    "int": 0,
    "java.lang.String": 1,
    "float": 2,
    "boolean": 3,
    "byte": 4,
    "char": 5,
    "short": 6,
    "long": 7,
    "double": 8,
}
CHILL_IDS = {
    "java.util.Arrays$ArrayList": 73,
    "java.util.BitSet": 74,
    "java.util.PriorityQueue": 75,
    "java.util.regex.Pattern": 76,
    "java.sql.Date": 77,
    "java.sql.Time": 78,
    "java.sql.Timestamp": 79,
    "java.net.URI": 80,
    "java.net.InetSocketAddress": 81,
    "java.util.UUID": 82,
    "java.util.Locale": 83,
    "java.text.SimpleDateFormat": 84,
}
FIRST_USER_REGISTRATION_ID = 85
BOXED = {
    "java.lang.Integer": "int",
    "java.lang.Long": "long",
    "java.lang.Short": "short",
    "java.lang.Byte": "byte",
    "java.lang.Character": "char",
    "java.lang.Float": "float",
    "java.lang.Double": "double",
    "java.lang.Boolean": "boolean",
}
PRIMITIVES = frozenset(BOXED.values())
# Classes Kryo already registered: registering them again takes no id (KryoUtils.applyRegistrations).
ALREADY_REGISTERED = frozenset({*BOXED, "java.lang.String", *KRYO_BUILTIN_IDS, *CHILL_IDS})
# JDK collections and maps Kryo writes with its CollectionSerializer / MapSerializer (the ones
# with a comparator or other header are left out: their layout differs).
COLLECTIONS = frozenset(
    {
        "java.util.Collection",
        "java.util.List",
        "java.util.Set",
        "java.util.ArrayList",
        "java.util.LinkedList",
        "java.util.HashSet",
        "java.util.LinkedHashSet",
        "java.util.Vector",
        "java.util.ArrayDeque",
        "java.util.concurrent.CopyOnWriteArrayList",
    }
)
MAPS = frozenset(
    {
        "java.util.Map",
        "java.util.HashMap",
        "java.util.LinkedHashMap",
        "java.util.Hashtable",
        "java.util.concurrent.ConcurrentHashMap",
    }
)
# JDK value classes with a dedicated Kryo serializer statecat reads (descriptor kind → Kryo layout in readers.kryo).
JDK_VALUES = {"java.math.BigInteger": "bigint", "java.math.BigDecimal": "bigdec", "java.util.Date": "date"}
ANY = "java.lang.Object"
# Nested classes deeper than this become JSON text (a deep or self-referencing class graph).
MAX_STRUCT_DEPTH = 16
CLASSPATH_HINT = "pass the job's jar with --classpath"
JAVA_NAME = re.compile(r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*")
# The JVM's limit on array dimensions (an array class name of more is damage).
MAX_ARRAY_DIMENSIONS = 255


def kryo_version(metadata_version: int) -> int:
    """Kryo 2.24 wrote the state of a Flink 1.x savepoint, Kryo 5 that of Flink 2.x."""
    return KRYO5 if metadata_version >= FIRST_KRYO5_METADATA_VERSION else KRYO2


def registration_ids(registrations: Iterable[tuple[str, str]]) -> dict[int, tuple[str, str]]:
    """Kryo registration id → (class, custom serializer or ""), from the snapshot's registrations
    in order: ids count from 85, skipping classes Kryo had registered itself (which take no id)."""
    ids: dict[int, tuple[str, str]] = {}
    next_id = FIRST_USER_REGISTRATION_ID
    for name, serializer in registrations:
        if not serializer and name in ALREADY_REGISTERED:
            continue
        ids[next_id] = (name, serializer)
        next_id += 1
    return ids


class NotKryoDecodable(StatecatError):
    """A Kryo class statecat cannot type: it stays bytes, with this reason."""


class KryoTypes:
    """Descriptors of Kryo-serialized Java types, from a classpath. One per savepoint read."""

    def __init__(self, classpath: ClassPath, version: int, custom: dict[str, str] | None = None) -> None:
        self.classpath = classpath
        self.version = version
        self.custom = custom or {}  # class → its custom serializer (or default serializer) in the job
        self._classes: dict[str, JavaClass] = {}

    def scoped(self, custom: dict[str, str]) -> KryoTypes:
        """The same classpath (and parsed classes) for a state whose job registered ``custom`` serializers."""
        types = KryoTypes(self.classpath, self.version, custom)
        types._classes = self._classes  # one parse per class file for the whole savepoint
        return types

    def load(self, name: str) -> JavaClass:
        if not JAVA_NAME.fullmatch(name):  # names come from the savepoint's bytes: never a path
            raise NotKryoDecodable(f"expected a Java class name, got {name[:80]!r}")
        if name not in self._classes:
            found = self.classpath.find(name)
            if found is None:
                raise NotKryoDecodable(f"class {name} is not on the classpath; {CLASSPATH_HINT}")
            self._classes[name] = found
        return self._classes[name]

    def is_final(self, name: str) -> bool:
        """Kryo's ``isFinal``: whether a value of this declared class is written without its class."""
        if name in PRIMITIVES or name in BOXED or name == "java.lang.String" or name.startswith("["):
            return True
        if name.startswith("java."):
            return False  # JDK classes here (collections, BigDecimal, Date, Optional aside) are not final
        cls = self.load(name)
        return cls.is_final

    def serialized_fields(self, cls: JavaClass) -> list[tuple[JavaClass, list]]:
        """The class chain from the top superclass down, each with its serialized fields in declaration order."""
        chain = []
        current: JavaClass | None = cls
        while current is not None:
            fields = [f for f in current.fields if not f.is_static and not f.is_transient and not f.is_synthetic]
            chain.append((current, fields))
            parent = current.superclass
            if parent is None or parent == ANY:
                break
            if parent.startswith("java."):
                raise NotKryoDecodable(
                    f"{cls.name} extends the JDK class {parent}, whose fields statecat does not read"
                )
            current = self.load(parent)
        return list(reversed(chain))

    def of_class(self, name: str, path: tuple[str, ...] = ()) -> TypeDescriptor:
        """The descriptor of a value whose runtime class is ``name`` (what follows its class and reference marker)."""
        if name in self.custom:
            raise NotKryoDecodable(f"{name} has the custom Kryo serializer {self.custom[name]} in the job")
        if name in BOXED:
            return TypeDescriptor.of(BOXED[name], java=name)
        if name == "java.lang.String":
            return TypeDescriptor.of("string", java=name)
        if name in JDK_VALUES:
            return TypeDescriptor.of(JDK_VALUES[name], java=name)
        if name in COLLECTIONS:
            return TypeDescriptor.of("list", [("element", self._any())], java=name)
        if name in MAPS:
            return TypeDescriptor.of("map", [("key", self._any()), ("value", self._any())], java=name)
        if name == "java.util.Optional":
            return TypeDescriptor.of("nullable", [("value", self._any())], java=name)
        if name.startswith("["):
            if len(name) - len(name.lstrip("[")) > MAX_ARRAY_DIMENSIONS:
                raise NotKryoDecodable(f"an array class of more than {MAX_ARRAY_DIMENSIONS} dimensions")
            return self._array(name, None, path)
        if name.startswith("java.") or name.startswith("javax.") or name.startswith("scala."):
            raise NotKryoDecodable(f"{name} has a Kryo serializer statecat does not read")
        if name in path or len(path) >= MAX_STRUCT_DEPTH:
            return self._any(name)
        cls = self.load(name)
        if cls.is_enum:
            # The constants are the ACC_ENUM fields, in ordinal order.
            constants = tuple(f.name for f in cls.fields if f.access & ACC_ENUM)
            return TypeDescriptor.of("enum", (), java=name, constants=constants, final=cls.is_final, **{"class": name})
        if cls.is_interface or cls.is_abstract:
            return self._any(name)
        if name in self.custom:
            raise NotKryoDecodable(f"{name} has the custom Kryo serializer {self.custom[name]} in the job")
        fields: list[tuple[str, TypeDescriptor]] = []
        seen: set[str] = set()
        for _, declared in self.serialized_fields(cls):
            for fld in declared:
                if fld.name in seen:
                    raise NotKryoDecodable(
                        f"{name} has two fields named {fld.name} (a subclass hides its superclass's)"
                    )
                seen.add(fld.name)
                jt = fld.generic or fld.type
                fields.append((fld.name, self.of_declared(jt, (*path, name))))
        return TypeDescriptor.of("pojo", fields, java=name, final=cls.is_final, **{"class": name})

    def of_declared(self, jt: JavaType, path: tuple[str, ...], hinted: bool = True) -> TypeDescriptor:
        """The descriptor of a field (or element) declared as ``jt``. ``hinted``: whether Kryo knows
        the declared type's generic arguments here (Kryo 2 passes them one level deep only)."""
        if jt.kind == "primitive":
            return TypeDescriptor.of(jt.name, java=jt.name)
        if jt.kind == "array":
            return self._array(None, jt, path)
        if jt.kind != "class":  # a type variable or wildcard: any class, written with the value
            return self._any()
        name = jt.name
        args = jt.args if hinted else ()
        if name in COLLECTIONS:
            element = self._element(args[0] if args else None, path)
            return TypeDescriptor.of("list", [("element", element)], java=name)
        if name in MAPS:
            key = self._element(args[0] if len(args) == 2 else None, path)
            value = self._element(args[1] if len(args) == 2 else None, path)
            return TypeDescriptor.of("map", [("key", key), ("value", value)], java=name)
        if name == "java.util.Optional":
            inner = self.of_declared(args[0], path, hinted=False) if args else self._any()
            return TypeDescriptor.of("nullable", [("value", inner)], java=name)
        if name == ANY:
            return self._any()
        return self.of_class(name, path)

    def _element(self, jt: JavaType | None, path: tuple[str, ...]) -> TypeDescriptor:
        """A collection's element (or a map's key or value): typed by the generic argument; Kryo
        omits the element's class only when that argument is a final class."""
        if jt is None or jt.kind not in ("class", "array"):
            return self._any()
        # Kryo 5 passes generics down nested collections; Kryo 2 only one level (FieldSerializer's).
        return self.of_declared(jt, path, hinted=self.version == KRYO5)

    def _array(self, name: str | None, jt: JavaType | None, path: tuple[str, ...]) -> TypeDescriptor:
        component = jt.component if jt is not None else _component_of(name or "")
        element = self.of_declared(component, path, hinted=False)
        java = name or _array_name(jt)  # type: ignore[arg-type]
        return TypeDescriptor.of("list", [("element", element)], java=java)

    def _any(self, declared: str = ANY) -> TypeDescriptor:
        """A value of a class known only at run time: decoded by the class the bytes name, shown as JSON text."""
        return TypeDescriptor.of("kryo_any", java=declared)


def _component_of(array_name: str) -> JavaType:
    from statecat.statemeta.java.classfile import parse_descriptor

    return parse_descriptor(array_name[1:].replace(".", "/"))


def _array_name(jt: JavaType) -> str:
    """A Java array class's name as Class.getName() spells it: ``[I``, ``[Ljava.lang.String;``."""
    codes = {
        "int": "I",
        "long": "J",
        "short": "S",
        "byte": "B",
        "char": "C",
        "boolean": "Z",
        "float": "F",
        "double": "D",
    }
    component = jt.component
    if component.kind == "primitive":
        return "[" + codes[component.name]
    if component.kind == "array":
        return "[" + _array_name(component)
    return f"[L{component.name if component.kind == 'class' else ANY};"


# ----------------------------------------------------------------------------- applying to StateMeta


def kryo_reason(type_class: str) -> str:
    return f"Kryo-serialized {type_class}: Kryo writes no schema; {CLASSPATH_HINT}"


def resolve_kryo(desc: TypeDescriptor, types: KryoTypes, classpath: Sequence[str]) -> TypeDescriptor:
    """``desc`` with every raw Kryo part typed from the classpath (parts that cannot be stay raw, with why)."""
    if desc.kind == "raw" and desc.attr("kryo_class"):
        type_class = desc.attr("kryo_class")
        registrations = desc.attr("kryo_registrations", ())
        ids = registration_ids(registrations)
        custom = {name: serializer for name, serializer in registrations if serializer}
        custom.update(dict.fromkeys(desc.attr("kryo_defaults", ()), "a default serializer"))
        try:
            value = types.scoped(custom).of_class(type_class)
        except NotKryoDecodable as exc:
            return TypeDescriptor.raw(desc.attr("serializer"), f"Kryo-serialized {type_class}: {exc.message}")
        return TypeDescriptor.of(
            "kryo",
            [("value", value)],
            version=types.version,
            registrations=tuple((i, name) for i, (name, _) in sorted(ids.items())),
            custom=tuple(sorted(custom.items())),
            classpath=tuple(classpath),
            **{"class": type_class},
        )
    if desc.kind == "raw" and desc.attr("uncollapsed"):
        # A type holding Kryo parts was kept as bytes whole (nothing frames a raw part inside it).
        inner = resolve_kryo(TypeDescriptor.from_json(json.loads(desc.attr("uncollapsed"))), types, classpath)
        return desc if inner.raw_reasons() else inner
    if not desc.fields:
        return desc
    fields = tuple((name, resolve_kryo(child, types, classpath)) for name, child in desc.fields)
    return desc if fields == desc.fields else replace(desc, fields=fields)


def apply_classpath(meta: StateMeta, classpath: Sequence[str | os.PathLike[str]]) -> StateMeta:
    """A StateMeta whose Kryo-serialized parts are typed from the job's classes (JARs or class directories)."""
    entries = [os.path.abspath(os.fspath(entry)) for entry in classpath]
    if not entries or not any(has_kryo(part) for op in meta.operators for s in op.states for part in _parts(s)):
        return meta
    with ClassPath(entries) as cp:
        types = KryoTypes(cp, kryo_version(meta.metadata.version))
        operators = []
        for op in meta.operators:
            states = tuple(
                replace(
                    s,
                    key=_resolved(s.key, types, entries),
                    namespace=_resolved(s.namespace, types, entries),
                    user_key=_resolved(s.user_key, types, entries),
                    value=resolve_kryo(s.value, types, entries),
                )
                for s in op.states
            )
            operators.append(replace(op, states=states))
    return replace(meta, operators=tuple(operators))


def _parts(state: object) -> list[TypeDescriptor | None]:
    return [getattr(state, n) for n in ("key", "namespace", "user_key", "value")]


def _resolved(desc: TypeDescriptor | None, types: KryoTypes, classpath: Sequence[str]) -> TypeDescriptor | None:
    return None if desc is None else resolve_kryo(desc, types, classpath)


def kryo_notes(state: object) -> list[str]:
    """Why a state's Kryo parts print as bytes (each once), for the CLI's stderr."""
    reasons: list[str] = []

    def walk(desc: TypeDescriptor | None) -> None:
        if desc is None:
            return
        if desc.kind == "raw" and desc.attr("uncollapsed"):
            walk(TypeDescriptor.from_json(json.loads(desc.attr("uncollapsed"))))
        if desc.kind == "raw" and desc.attr("kryo_class"):
            reason = str(desc.attr("reason"))
            if reason not in reasons:
                reasons.append(reason)
        for _, child in desc.fields:
            walk(child)

    for part in _parts(state):
        walk(part)
    return reasons
