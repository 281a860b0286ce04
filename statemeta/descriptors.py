"""Descriptor files: the state types a job declares, for states whose bytes carry no schema.

PyFlink's default ``process`` execution mode keeps every Python state in Java as ``byte[]``
named ``python-state-<name>`` (value, list, reducing and aggregating states as a list of byte
arrays, map states as a map of byte arrays), holding PyFlink coder bytes. Nothing in the savepoint
says what those bytes encode; the job's own state descriptors do. A descriptor file records them::

    {
      "format": "statecat.descriptors",
      "version": 1,
      "operators": {
        "keyed-fn": {                                   # operator uid, name or hex id
          "count": "LONG",                              # ValueState<LONG>
          "items": "LIST<STRING>",                      # ListState<STRING>
          "per_tag": "MAP<STRING, LONG>",               # MapState<STRING, LONG>
          "max_v": "REDUCING<LONG>",                    # or {"type": "LONG", "state": "REDUCING"}
          "avg": "AGGREGATING<TUPLE<LONG, LONG>>",      # the accumulator's type
          "info": "PICKLED"                             # Types.PICKLED_BYTE_ARRAY()
        }
      }
    }

``LIST<T>`` means a ListState of T, ``MAP<K, V>`` a MapState (or a broadcast state),
``REDUCING<T>``/``AGGREGATING<T>`` those states, anything else a ValueState (``VALUE<LIST<STRING>>``
for a ValueState holding a list); ``{"type": ..., "state": ...}`` is the long form. Type grammar:
STATEINFO.md; coder byte layouts: readers/codecs/pyflink.py. ``write_descriptor_file`` writes the
file from the descriptor objects a PyFlink job already declares.

A Java job's Kryo-serialized types are typed from its classes: ``"classpath": ["job.jar",
"build/classes"]`` (paths relative to the file; ``--classpath`` on the command line adds to it)
lists the JARs and class directories ``statemeta.kryo`` reads them from; a file may hold only
that key.

PyFlink's ``thread`` mode keeps its states under their real names, with Java serializers, except
that TUPLE, ROW and PICKLED values are pickles in ``byte[]``: the same file declares those states
by their real names, and ``with_pyflink_pickles`` marks (or, on the opt-in, unpickles) such byte
arrays; STATEINFO.md, "PyFlink thread mode".

This module imports only the standard library and statecat's own light modules, so a job's
PyFlink virtualenv can import it to write the file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NoReturn, cast

from statecat.statemeta.errors import FormatError, LookupFailedError, StatecatError
from statecat.statemeta.types import TypeDescriptor, struct_field_names

if TYPE_CHECKING:
    from typing import TypeAlias

    from statecat.statemeta.model import OperatorMeta, StateInfo, StateMeta

    # What callers may give as descriptors: a DescriptorSet, a parsed descriptor document or its file.
    DescriptorSource: TypeAlias = "DescriptorSet | dict[str, Any] | str | os.PathLike[str]"

FORMAT_NAME = "statecat.descriptors"
FORMAT_VERSION = 1
PYFLINK_PREFIX = "python-state-"
STATE_TYPES = ("VALUE", "LIST", "MAP", "REDUCING", "AGGREGATING")
# The Java serializer of PyFlink map (and broadcast) state keys; values are BytePrimitiveArraySerializer.
BYTE_ARRAY_WRAPPER = "org.apache.flink.streaming.api.utils.ByteArrayWrapperSerializer"

log = logging.getLogger(__name__)

# Declared scalar type → descriptor kind of the decoded value (its Arrow/Spark type).
SCALARS = {
    "BOOLEAN": "boolean",
    "BYTE": "byte",
    "SHORT": "short",
    "INT": "int",
    "LONG": "long",
    "FLOAT": "float",
    "DOUBLE": "double",
    "STRING": "string",
    "CHAR": "char",
    # PyFlink's BIG_INT coder is its BIGINT (int64) coder: the value is a LONG in the bytes.
    "BIG_INT": "long",
    "BIG_DEC": "bigdec",
    "SQL_DATE": "sql_date",
    "SQL_TIME": "sql_time",
    "SQL_TIMESTAMP": "sql_timestamp",
    "INSTANT": "instant",
    "LOCAL_DATE": "local_date",
    "LOCAL_TIME": "local_time",
    "LOCAL_DATETIME": "local_datetime",
    "BYTES": "bytes",
    "PICKLED": "pickled",
}
ALIASES = {
    "INTEGER": "INT",
    "BIGINT": "LONG",
    "TINYINT": "BYTE",
    "SMALLINT": "SHORT",
    "VARCHAR": "STRING",
    "DATE": "SQL_DATE",
    "TIME": "SQL_TIME",
    "TIMESTAMP": "SQL_TIMESTAMP",
    "BIG_INTEGER": "BIG_INT",
    "DECIMAL": "BIG_DEC",
    "BIG_DECIMAL": "BIG_DEC",
    "PICKLED_BYTE_ARRAY": "PICKLED",
    "BINARY": "BYTES",
    "PRIMITIVE_ARRAY<BYTE>": "BYTES",
    "LOCAL_DATE_TIME": "LOCAL_DATETIME",
    "BOOL": "BOOLEAN",
}
CONTAINERS = ("LIST", "MAP", "ROW", "TUPLE", "PRIMITIVE_ARRAY", "BASIC_ARRAY", "OBJECT_ARRAY")


# ----------------------------------------------------------------------------- type grammar


@dataclass(frozen=True)
class CoderType:
    """A parsed declared type: ``name`` plus (field name, type) arguments for containers."""

    name: str
    args: tuple[tuple[str | None, CoderType], ...] = ()

    def text(self) -> str:
        if not self.args:
            return self.name
        if self.name == "ROW":
            return "ROW<" + ", ".join(f"{n} {t.text()}" if n else t.text() for n, t in self.args) + ">"
        return f"{self.name}<" + ", ".join(t.text() for _, t in self.args) + ">"

    def result_type(self) -> TypeDescriptor:
        """The descriptor of the decoded value (gives its Arrow and Spark SQL types)."""
        if self.name in SCALARS:
            return TypeDescriptor.of(SCALARS[self.name])
        if self.name in ("LIST", "PRIMITIVE_ARRAY", "BASIC_ARRAY", "OBJECT_ARRAY"):
            return TypeDescriptor.of("list", [("element", self.args[0][1].result_type())])
        if self.name == "MAP":
            return TypeDescriptor.of(
                "map", [("key", self.args[0][1].result_type()), ("value", self.args[1][1].result_type())]
            )
        names: Sequence[str | None] = [n for n, _ in self.args]
        if self.name == "TUPLE" or not all(names):
            names = struct_field_names(len(self.args))
        # Every name is set: unnamed fields got positional names above.
        return TypeDescriptor.of(
            "row" if self.name == "ROW" else "tuple",
            list(zip(cast("Sequence[str]", names), (t.result_type() for _, t in self.args))),
        )


def parse_type(text: str) -> CoderType:
    """Parses ``LONG``, ``LIST<STRING>``, ``MAP<STRING, LONG>``, ``ROW<a LONG, b STRING>``, ..."""
    parser = _TypeParser(str(text))
    parsed = parser.type()
    parser.skip_space()
    if parser.pos != len(parser.text):
        parser.fail("end of the type")
    return parsed


class _TypeParser:
    TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, expected: str) -> NoReturn:
        raise FormatError(
            f"bad type {self.text!r}: expected {expected} at character {self.pos}",
            hint="Types look like LONG, LIST<STRING>, MAP<STRING, LONG>, ROW<name STRING, n LONG>",
        )

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def word(self) -> str | None:
        self.skip_space()
        m = self.TOKEN.match(self.text, self.pos)
        if not m:
            return None
        self.pos = m.end()
        return m.group(0)

    def peek(self, char: str) -> bool:
        self.skip_space()
        return self.text.startswith(char, self.pos)

    def type(self) -> CoderType:
        word = self.word()
        if word is None:
            self.fail("a type name")
        name = word.upper()
        if self.peek("<"):
            self.pos += 1
            args = []
            while True:
                field_name = None
                if name == "ROW":
                    # "ROW<a LONG, b STRING>" names fields; "ROW<LONG, STRING>" does not.
                    save = self.pos
                    first = self.word()
                    if first is not None and not self.peek(",") and not self.peek(">") and not self.peek("<"):
                        field_name = first
                    else:
                        self.pos = save
                args.append((field_name, self.type()))
                if self.peek(","):
                    self.pos += 1
                    continue
                if self.peek(">"):
                    self.pos += 1
                    break
                self.fail("',' or '>'")
            full = f"{name}<" + ", ".join(t.text() for _, t in args) + ">"
            if full in ALIASES:
                return CoderType(ALIASES[full])
            return self._checked(CoderType(name, tuple(args)))
        return self._checked(CoderType(ALIASES.get(name, name)))

    def _checked(self, t: CoderType) -> CoderType:
        arity = {"LIST": 1, "PRIMITIVE_ARRAY": 1, "BASIC_ARRAY": 1, "OBJECT_ARRAY": 1, "MAP": 2}
        if t.name in SCALARS and not t.args:
            return t
        if t.name in arity and len(t.args) == arity[t.name]:
            return t
        if t.name in ("ROW", "TUPLE") and t.args:
            return t
        known = ", ".join(sorted(SCALARS)) + "; " + ", ".join(f"{c}<...>" for c in CONTAINERS)
        raise FormatError(f"unknown or malformed type {t.text()!r} in {self.text!r}", hint=f"Known types: {known}")


# ----------------------------------------------------------------------------- descriptor sets


@dataclass(frozen=True)
class Declared:
    type: CoderType
    state_type: str  # VALUE LIST MAP REDUCING AGGREGATING


@dataclass(frozen=True)
class DescriptorSet:
    operators: dict[str, dict[str, Declared]]  # operator uid/name/id → declared state name → Declared
    classpath: tuple[str, ...] = ()  # absolute paths of the job's JARs and class directories (Kryo types)

    def to_json(self) -> dict:
        ops = {
            op: {name: _declared_json(d) for name, d in sorted(states.items())}
            for op, states in sorted(self.operators.items())
        }
        body: dict[str, Any] = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "operators": ops}
        hashed: Any = ops
        if self.classpath:
            body["classpath"] = list(self.classpath)
            hashed = {"operators": ops, "classpath": list(self.classpath)}
        # Content hash, not a path: the same declarations give the same stateInfo wherever the file is.
        body["sha256"] = hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()
        return body

    def with_classpath(self, classpath: Sequence[str | os.PathLike[str]]) -> DescriptorSet:
        """This set with more classpath entries (made absolute), e.g. from ``--classpath``."""
        added = [os.path.abspath(os.fspath(entry)) for entry in classpath]
        return replace(self, classpath=tuple(dict.fromkeys([*self.classpath, *added])))

    @property
    def digest(self) -> str:
        return self.to_json()["sha256"]


def _declared_json(d: Declared) -> str:
    return _spec_text(d.type.text(), d.state_type)


def _spec_text(type_text: str, state_type: str) -> str:
    """The declaration as a type string: ``LONG``, ``LIST<STRING>``, ``REDUCING<LONG>``, ``VALUE<LIST<STRING>>``."""
    return type_text if state_type == _default_state_type(parse_type(type_text)) else f"{state_type}<{type_text}>"


def _default_state_type(t: CoderType) -> str:
    return {"LIST": "LIST", "MAP": "MAP"}.get(t.name, "VALUE")


def _state_and_type(text: str) -> tuple[CoderType, str]:
    """``REDUCING<LONG>`` / ``AGGREGATING<T>`` / ``VALUE<T>`` name the state kind around the type."""
    head = text.strip().split("<", 1)[0].strip().upper()
    if head in ("VALUE", "REDUCING", "AGGREGATING") and text.strip().endswith(">"):
        return parse_type(text.strip()[len(head) + 1 : -1]), head
    t = parse_type(text)
    return t, _default_state_type(t)


def parse_descriptors(doc: dict, where: str = "descriptor file", base_dir: str | None = None) -> DescriptorSet:
    """``base_dir``: what relative ``classpath`` entries are relative to (the file's directory)."""
    if isinstance(doc, dict) and "operators" not in doc and "classpath" in doc:
        doc = {**doc, "operators": {}}
    if not isinstance(doc, dict) or not isinstance(doc.get("operators"), dict):
        raise FormatError(
            'a descriptor file is a JSON object with an "operators" object (or a "classpath" list)',
            file=where,
            hint="See STATEINFO.md, section 'Descriptor files'",
        )
    classpath = doc.get("classpath", [])
    if not isinstance(classpath, list) or not all(isinstance(e, str) and e for e in classpath):
        raise FormatError('"classpath": expected a list of JAR or class directory paths', file=where)
    if doc.get("format", FORMAT_NAME) != FORMAT_NAME or doc.get("version", FORMAT_VERSION) != FORMAT_VERSION:
        raise FormatError(
            f"descriptor file format {doc.get('format')!r} version {doc.get('version')!r}; "
            f"expected {FORMAT_NAME!r} version {FORMAT_VERSION}",
            file=where,
        )
    operators: dict[str, dict[str, Declared]] = {}
    for op, states in doc["operators"].items():
        if not isinstance(states, dict):
            raise FormatError(f"operator {op!r}: expected an object of state name → type", file=where)
        out = {}
        for name, spec in states.items():
            try:
                if isinstance(spec, str):
                    t, state_type = _state_and_type(spec)
                elif isinstance(spec, dict) and isinstance(spec.get("type"), str):
                    t = parse_type(spec["type"])
                    state_type = str(spec.get("state", _default_state_type(t))).upper()
                else:
                    raise FormatError('expected a type string or {"type": ..., "state": ...}')
                if state_type not in STATE_TYPES:
                    raise FormatError(f"state kind {state_type!r}; expected one of {', '.join(STATE_TYPES)}")
                if state_type == "LIST" and t.name != "LIST":
                    raise FormatError(f"a LIST state declares LIST<element type>, got {t.text()}")
                if state_type == "MAP" and t.name != "MAP":
                    raise FormatError(f"a MAP state declares MAP<key type, value type>, got {t.text()}")
            except FormatError as exc:
                raise FormatError(
                    f"operator {op!r}, state {name!r}: {exc.message}", file=where, hint=exc.hint
                ) from None
            out[str(name)] = Declared(t, state_type)
        operators[str(op)] = out
    base = base_dir or os.getcwd()
    return DescriptorSet(operators).with_classpath([os.path.join(base, entry) for entry in classpath])


def load_descriptors(path: str | os.PathLike) -> DescriptorSet:
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise LookupFailedError("no such descriptor file", file=path) from None
    except (OSError, ValueError) as exc:
        raise FormatError(f"cannot read the descriptor file: {exc}", file=path) from None
    return parse_descriptors(doc, path, os.path.dirname(os.path.abspath(path)))


def as_descriptor_set(descriptors: DescriptorSource) -> DescriptorSet:
    if isinstance(descriptors, DescriptorSet):
        return descriptors
    if isinstance(descriptors, dict):
        return parse_descriptors(descriptors)
    return load_descriptors(descriptors)


# ----------------------------------------------------------------------------- applying to StateMeta


def apply_descriptors(meta: StateMeta, descriptors: DescriptorSource) -> StateMeta:
    """A StateMeta whose PyFlink states carry their declared names and types (process mode) or
    have their pickled byte[] parts marked (thread mode, states declared by their real names)."""
    from statecat.statemeta.model import STATE_KINDS, StateMeta

    dset = as_descriptor_set(descriptors)
    source = dset.digest
    by_op: dict[str, dict[str, Declared]] = {}
    # The name holds an operator's declarations first, then its new states.
    states: dict[str, Declared] | list[StateInfo]
    for ref, states in dset.operators.items():
        matches = [op for op in meta.operators if ref in (op.id, op.uid, op.name)]
        if not matches:
            # _metadata before Flink 2.0 keeps no uids, but Flink derives the operator id from the uid.
            from statecat.statemeta import model

            derive = getattr(model, "operator_id_for_uid", None)
            matches = [op for op in meta.operators if derive is not None and op.id == derive(ref)]
        if not matches:
            log.warning("descriptor file: no operator %r in savepoint %s", ref, meta.path)
            continue
        if len(matches) > 1:
            raise LookupFailedError(
                f"descriptor file: operator {ref!r} is ambiguous in savepoint {meta.path}",
                hint="Use the operator uid or id: " + ", ".join(op.id for op in matches),
            )
        by_op.setdefault(matches[0].id, {}).update(states)
    operators = []
    for op in meta.operators:
        declared = by_op.get(op.id)
        if not declared:
            operators.append(op)
            continue
        stored = {s.name: s for s in op.states}
        process_mode = {s.name[len(PYFLINK_PREFIX) :] for s in op.states if s.name.startswith(PYFLINK_PREFIX)}
        states = []
        used = set()
        for state in op.states:
            name = state.name[len(PYFLINK_PREFIX) :] if state.name.startswith(PYFLINK_PREFIX) else None
            if name is None and state.name in declared and state.name not in process_mode and state.kind == "keyed":
                # Thread mode: Java state under the declared name, of Java types or pickles in byte[].
                used.add(state.name)
                states.append(_declared_thread_state(op, state, declared[state.name], source))
                continue
            if name is None or name not in declared:
                states.append(state)
                continue
            used.add(name)
            # Keep the stored name if the declared one is taken by another (Java) state.
            new_name = state.name if name in stored else name
            states.append(_declared_state(op, state, new_name, declared[name], source))
        for name in sorted(set(declared) - used):
            log.warning(
                "descriptor file: operator %s has no state %r (python-state-%s) in savepoint %s; "
                "a state never written is not in the savepoint",
                op.label,
                name,
                name,
                meta.path,
            )
        states.sort(key=lambda s: (STATE_KINDS.index(s.kind), s.name))
        operators.append(replace(op, states=tuple(states)))
    meta = StateMeta(meta.storage, meta.metadata, tuple(operators))
    if dset.classpath:
        from statecat.statemeta.java.kryo import apply_classpath

        meta = apply_classpath(meta, dset.classpath)
    return meta


def with_classpath(
    descriptors: DescriptorSource | None, classpath: Sequence[str | os.PathLike[str]] | None
) -> DescriptorSource | None:
    """Descriptors with a classpath added (``--classpath``): a DescriptorSet, or ``descriptors`` itself without one."""
    if not classpath:
        return descriptors
    base = as_descriptor_set(descriptors) if descriptors is not None else DescriptorSet({})
    return base.with_classpath(classpath)


def _declared_state(op: OperatorMeta, state: StateInfo, new_name: str, declared: Declared, source: str) -> StateInfo:
    where: dict[str, Any] = dict(operator=op.label, state=state.name)
    java_value = state.serializer_classes.get("VALUE_SERIALIZER", "")
    note = f"stored as {state.name}; declared {declared.state_type} {declared.type.text()} by a descriptor file"
    attrs = dict(declared=declared.type.text(), stored_name=state.name, source=source)
    if "TTL" in java_value.upper():
        # A TTL wrapper puts a timestamp before every byte array; not decoded yet.
        reason = "PyFlink state with a TTL: the TTL-wrapped byte arrays are not decoded yet"
        value = TypeDescriptor.raw(java_value, reason)
        return replace(state, name=new_name, value=value, notes=state.notes + (note,))
    if state.kind == "broadcast":
        if declared.state_type != "MAP":
            raise FormatError(
                f"declared a {declared.state_type} state, but Flink stored a broadcast (map) state",
                **where,
                hint="Declare broadcast states as MAP<key type, value type>",
            )
        key_t, value_t = declared.type.args[0][1], declared.type.args[1][1]
        value = TypeDescriptor.of(
            "broadcast_entry",
            [
                ("key", _pyflink("plain", key_t, java_class=BYTE_ARRAY_WRAPPER, **attrs)),
                ("value", _pyflink("plain", value_t, **attrs)),
            ],
        )
        notes = tuple(n for n in state.notes if "descriptors" not in n) + (note,)
        return replace(state, name=new_name, value=value, notes=notes)
    if declared.state_type == "MAP":
        if state.state_type != "MAP":
            raise FormatError(
                f"declared a MAP state, but Flink stored a {state.state_type} state",
                **where,
                hint="Fix the descriptor file: this state is not a MapState",
            )
        key_t, value_t = declared.type.args[0][1], declared.type.args[1][1]
        user_key = _pyflink("plain", key_t, java_class=BYTE_ARRAY_WRAPPER, **attrs)
        value = TypeDescriptor.of("map", [("key", user_key), ("value", _pyflink("plain", value_t, **attrs))])
        return replace(
            state, name=new_name, state_type="MAP", user_key=user_key, value=value, notes=state.notes + (note,)
        )
    if state.state_type != "LIST":
        raise FormatError(
            f"declared a {declared.state_type} state, but Flink stored a {state.state_type} state "
            f"(PyFlink keeps value, list, reducing and aggregating states as a list of byte arrays)",
            **where,
            hint="Fix the descriptor file: this is a MapState",
        )
    if declared.state_type == "LIST":
        value = _pyflink("bag_all", declared.type.args[0][1], **attrs)
    else:
        value = _pyflink("bag_first", declared.type, **attrs)
    return replace(
        state, name=new_name, state_type=declared.state_type, value=value, user_key=None, notes=state.notes + (note,)
    )


# Declared types PyFlink's thread mode gives a Java serializer (java_utils.to_java_typeinfo);
# every other type (TUPLE, ROW, PICKLED, LIST as a value, dates, ...) it pickles into byte[].
THREAD_MODE_JAVA_TYPED = (
    "BOOLEAN",
    "BYTE",
    "SHORT",
    "INT",
    "LONG",
    "FLOAT",
    "DOUBLE",
    "STRING",
    "CHAR",
    "BIG_INT",
    "BIG_DEC",
    "INSTANT",
    "MAP",
    "PRIMITIVE_ARRAY",
    "BASIC_ARRAY",
    "OBJECT_ARRAY",
    "BYTES",
)
PICKLE_ATTR = "pyflink_pickle"  # on a `bytes` type: True = holds PyFlink pickles, False = plain bytes (declared)
PICKLE_NOTE_START = "PyFlink thread mode keeps"
THREAD_MODE_PICKLE_NOTE = (
    PICKLE_NOTE_START + " {what} as Python pickles in byte[]: they read as bytes; "
    "--unpickle (unpickle=True) decodes them (unpickling runs code: trusted savepoints only)"
)


def _declared_thread_state(op: OperatorMeta, state: StateInfo, declared: Declared, source: str) -> StateInfo:
    """A thread-mode PyFlink state declared by its real name: its byte[] parts are pickles (or, declared
    BYTES, plain bytes); parts Flink stores with Java serializers keep them."""
    if any(_is_pyflink(part) for part in (state.value, state.user_key)):
        return state  # already declared (a stateInfo written with descriptors)
    where: dict[str, Any] = dict(operator=op.label, state=state.name)
    expected_kind = {"MAP": "MAP", "LIST": "LIST"}.get(declared.state_type, "VALUE")
    if state.state_type != expected_kind:
        raise FormatError(
            f"declared a {declared.state_type} state, but Flink stored a {state.state_type} state "
            f"(PyFlink thread mode keeps value, reducing and aggregating states as VALUE state)",
            **where,
            hint="Fix the descriptor file's declaration of this state",
        )
    try:
        if declared.state_type == "LIST" and state.value.kind == "list":  # a ListState of the element type
            element = _mark_thread_type(state.value.fields[0][1], declared.type.args[0][1])
            value = TypeDescriptor(state.value.kind, ((state.value.fields[0][0], element),), state.value.attrs)
        else:
            value = _mark_thread_type(state.value, declared.type)
    except FormatError as exc:
        raise FormatError(exc.message, **where, hint="Fix the descriptor file's declaration of this state") from None
    note = f"declared {declared.state_type} {declared.type.text()} by a descriptor file ({source[:12]})"
    user_key = value.child("key") if state.user_key is not None and value.kind == "map" else state.user_key
    return replace(state, value=value, user_key=user_key, notes=state.notes + (note,))


def _is_pyflink(desc: TypeDescriptor | None) -> bool:
    return desc is not None and (desc.kind == "pyflink" or any(_is_pyflink(t) for _, t in desc.fields))


def _mark_thread_type(desc: TypeDescriptor, t: CoderType) -> TypeDescriptor:
    """``desc`` (what Java stored) with its byte[] parts marked as pickles of the declared type ``t``."""
    if desc.kind == "ttl":
        return TypeDescriptor(desc.kind, ((desc.fields[0][0], _mark_thread_type(desc.fields[0][1], t)),), desc.attrs)
    if desc.kind == "bytes":
        if t.name in THREAD_MODE_JAVA_TYPED and t.name != "BYTES":
            raise FormatError(
                f"declared {t.text()}, but Flink stored byte[] (thread mode stores {t.text()} with a "
                f"Java serializer, and pickles only other types)"
            )
        return pickle_bytes(t.name != "BYTES", t.text())
    if t.name not in THREAD_MODE_JAVA_TYPED:
        raise FormatError(
            f"declared {t.text()}, which PyFlink thread mode stores as a pickle in byte[], but Flink "
            f"stored {desc.describe()}"
        )
    if desc.kind in ("list", "generic_array") and t.name in ("LIST", "OBJECT_ARRAY", "BASIC_ARRAY") and desc.fields:
        return TypeDescriptor(
            desc.kind, ((desc.fields[0][0], _mark_thread_type(desc.fields[0][1], t.args[0][1])),), desc.attrs
        )
    if desc.kind == "map" and t.name == "MAP":
        return TypeDescriptor(
            desc.kind,
            (
                ("key", _mark_thread_type(desc.child("key"), t.args[0][1])),
                ("value", _mark_thread_type(desc.child("value"), t.args[1][1])),
            ),
            desc.attrs,
        )
    return desc  # a Java-typed part: its own serializer says how to read it


def pickle_bytes(pickled: bool, declared: str | None = None) -> TypeDescriptor:
    """A ``bytes`` type (BytePrimitiveArraySerializer) known to hold PyFlink pickles, or known not to."""
    # ignore: mypy takes the unpacked key for a possible "fields"; it is an attribute name.
    return TypeDescriptor.of("bytes", **{PICKLE_ATTR: pickled}, declared=declared)  # type: ignore[arg-type]


def is_pyflink_thread_keyed(state: StateInfo) -> bool:
    """A keyed state as PyFlink's thread mode writes it: PyFlink keys every ``key_by`` by a Java Row of
    one field (both modes), and thread mode keeps the declared name (process mode: python-state-...)."""
    key = state.key
    return (
        state.kind == "keyed"
        and key is not None
        and key.kind == "row"
        and len(key.fields) == 1
        and not state.name.startswith(PYFLINK_PREFIX)
    )


def _pickle_parts(desc: TypeDescriptor, undeclared: bool, unpickle: bool) -> TypeDescriptor:
    """``desc`` with its pickle-holding byte[] parts as ``pickled`` (unpickle) or marked (not)."""
    if desc.kind == "bytes":
        marked = desc.attr(PICKLE_ATTR)
        if marked is False or (marked is None and not undeclared):
            return desc
        if not unpickle:
            return desc if marked else pickle_bytes(True)
        return TypeDescriptor.of("pickled", pyflink_pickle=True, declared=desc.attr("declared"))
    if not desc.fields:
        return desc
    fields = tuple((n, _pickle_parts(t, undeclared, unpickle)) for n, t in desc.fields)
    return desc if fields == desc.fields else TypeDescriptor(desc.kind, fields, desc.attrs)


def _has_pickles(desc: TypeDescriptor | None) -> bool:
    if desc is None:
        return False
    if desc.kind == "bytes":
        return bool(desc.attr(PICKLE_ATTR))
    return any(_has_pickles(t) for _, t in desc.fields)


def with_pyflink_pickles(meta: StateMeta, *, unpickle: bool) -> StateMeta:
    """The StateMeta for reading PyFlink thread-mode pickles (the same object when there are none).

    Thread mode stores TUPLE, ROW and PICKLED values (and AggregatingState accumulators of those
    types) as ``pickle.dumps`` bytes in ``byte[]`` (BytePrimitiveArraySerializer), which nothing
    else in the savepoint tells from other byte arrays. A byte[] part is taken for pickles when a
    descriptor file declares the state by its name with a pickled type, or, undeclared, when the
    state is keyed the way PyFlink keys (a one-field Row); declaring it BYTES keeps it bytes.
    ``unpickle=True`` (what readers opened with ``unpickle=True`` use) makes those parts ``pickled``
    values (JSON text), and every such value must then be a pickle
    (``readers.decoders.check_pickle_header`` runs before unpickling); ``unpickle=False`` keeps them
    bytes and notes why on the state (``pickled_notes``).
    """
    from statecat.statemeta.model import StateMeta

    operators = []
    for op in meta.operators:
        states = tuple(_state_with_pickles(state, unpickle) for state in op.states)
        operators.append(op if states == op.states else replace(op, states=states))
    if all(a is b for a, b in zip(operators, meta.operators)):
        return meta
    return StateMeta(meta.storage, meta.metadata, tuple(operators))


def _state_with_pickles(state: StateInfo, unpickle: bool) -> StateInfo:
    undeclared = is_pyflink_thread_keyed(state)
    value = _pickle_parts(state.value, undeclared, unpickle)
    user_key = _pickle_parts(state.user_key, undeclared, unpickle) if state.user_key is not None else None
    if value == state.value and user_key == state.user_key and not (not unpickle and _has_pickles(value)):
        return state
    notes = tuple(n for n in state.notes if not n.startswith(PICKLE_NOTE_START))
    if not unpickle:
        what = {"MAP": "this map's byte[] values", "LIST": "this list's elements"}.get(
            state.state_type,  # type: ignore[arg-type]  # None (no state type) gets the default
            "this state's values",
        )
        notes += (THREAD_MODE_PICKLE_NOTE.format(what=what),)
    return replace(state, value=value, user_key=user_key, notes=notes)


def pickled_notes(state: StateInfo) -> list[str]:
    """Why a state's byte[] parts read as bytes: they are PyFlink pickles (read without unpickling)."""
    return [n for n in _state_with_pickles(state, False).notes if n.startswith(PICKLE_NOTE_START)]


def _pyflink(layout: str, t: CoderType, **attrs: Any) -> TypeDescriptor:
    """A ``pyflink`` descriptor: how Java frames the bytes (layout), the coder type and the result.

    layouts: ``plain`` = one byte array holding one coder value (map keys and values);
    ``bag_first``/``bag_all`` = Java's list of byte arrays, each holding one or more coder values,
    read as its first value (value, reducing, aggregating states) or all of them (list states).
    """
    result = t.result_type()
    if layout == "bag_all":
        result = TypeDescriptor.of("list", [("element", result)])
    return TypeDescriptor.of("pyflink", [("value", result)], layout=layout, coder=t.text(), **attrs)


# ----------------------------------------------------------------------------- from PyFlink objects


def type_from_pyflink(type_info: Any) -> str:
    """The declared-type text of a PyFlink ``TypeInformation`` (duck-typed: no pyflink import)."""
    cls = type(type_info).__name__
    if cls == "PickledBytesTypeInfo":
        return "PICKLED"
    if cls in ("BasicTypeInfo", "InstantTypeInfo"):
        basic = getattr(type_info, "_basic_type", None)
        name = getattr(basic, "name", None) or ("INSTANT" if cls == "InstantTypeInfo" else None)
        if name in SCALARS:
            return name
    if cls == "DateTypeInfo":
        return "SQL_DATE"
    if cls == "TimeTypeInfo":
        return "SQL_TIME"
    if cls == "TimestampTypeInfo":
        return "SQL_TIMESTAMP"
    if cls == "LocalTimeTypeInfo":
        return {"LOCAL_DATE": "LOCAL_DATE", "LOCAL_TIME": "LOCAL_TIME", "LOCAL_DATE_TIME": "LOCAL_DATETIME"}[
            type_info._time_type.name
        ]
    if cls == "PrimitiveArrayTypeInfo":
        element = type_from_pyflink(type_info._element_type)
        return "BYTES" if element == "BYTE" else f"PRIMITIVE_ARRAY<{element}>"
    if cls in ("BasicArrayTypeInfo", "ObjectArrayTypeInfo"):
        return f"OBJECT_ARRAY<{type_from_pyflink(type_info._element_type)}>"
    if cls == "ListTypeInfo":
        return f"LIST<{type_from_pyflink(type_info.elem_type)}>"
    if cls == "MapTypeInfo":
        return f"MAP<{type_from_pyflink(type_info._key_type_info)}, {type_from_pyflink(type_info._value_type_info)}>"
    if cls == "TupleTypeInfo":
        return "TUPLE<" + ", ".join(type_from_pyflink(t) for t in type_info.get_field_types()) + ">"
    if cls == "RowTypeInfo":
        fields = zip(type_info.get_field_names(), type_info.get_field_types())
        return "ROW<" + ", ".join(f"{n} {type_from_pyflink(t)}" for n, t in fields) + ">"
    if cls == "ExternalTypeInfo":
        return type_from_pyflink(type_info._type_info)
    raise StatecatError(
        f"PyFlink type {type_info!r} ({cls}) has no descriptor-file type",
        hint="Write that state's type into the descriptor file by hand, or use PICKLED",
    )


_DESCRIPTOR_STATES = {
    "ValueStateDescriptor": "VALUE",
    "ListStateDescriptor": "LIST",
    "MapStateDescriptor": "MAP",
    "ReducingStateDescriptor": "REDUCING",
    "AggregatingStateDescriptor": "AGGREGATING",
}


def descriptors_from_pyflink(operators: dict) -> dict:
    """A descriptor-file document from the PyFlink state descriptors a job declares.

    ``operators``: operator uid (or name) → iterable of ``ValueStateDescriptor``,
    ``ListStateDescriptor``, ``MapStateDescriptor``, ``ReducingStateDescriptor`` and
    ``AggregatingStateDescriptor`` objects, e.g. the ones the job's ``open()`` passes to
    ``get_state``. PyFlink's ListStateDescriptor holds ``LIST<element>`` and its
    MapStateDescriptor ``MAP<key, value>``, which is the file's notation as well.
    """
    ops: dict = {}
    for op, descriptors in operators.items():
        states = {}
        for d in descriptors:
            kind = _DESCRIPTOR_STATES.get(type(d).__name__)
            if kind is None:
                raise StatecatError(f"{type(d).__name__} is not a PyFlink keyed state descriptor")
            t = type_from_pyflink(d.type_info)
            states[d.name] = _spec_text(t, kind)
        ops[str(op)] = states
    doc = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "operators": ops}
    parse_descriptors(doc)  # fail here, in the job, rather than later in the snapshotter
    return doc


def write_descriptor_file(path: str | os.PathLike, operators: dict) -> str:
    """Writes ``descriptors_from_pyflink(operators)`` as JSON to ``path``; returns the path."""
    doc = descriptors_from_pyflink(operators)
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    return path
