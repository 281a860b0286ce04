"""JavaSerializer's values (legacy ``_default_`` operator state, ``getSerializableListState``), decoded
and encoded side by side.

Each value is one Java serialization stream (``InstantiationUtil.serializeObject``: ``AC ED 00 05``
and one object, nothing around it), walked by statecat's grammar parser (statemeta/java/javaser.py): no
class is loaded and nothing is deserialized. A value reads as ``{class, value, raw}``: the top
object's class, the object graph as JSON text (fields by name, ``@class``, what a ``writeObject``
wrote as ``@annotations``, bytes as ``{"@bytes": hex}``, an object met again as ``{"@ref": class}``)
and the stored bytes.

The JSON is a reading, not a form statecat can turn back into Java's bytes (class descriptors,
serialVersionUIDs and handles are not in it): a value is written as its ``raw`` bytes, which must
hold one whole stream, and ``class`` and ``value`` must be what ``raw`` reads as, so an edit of the
reading alone is refused rather than lost. Unedited values are written back byte for byte.
"""

from __future__ import annotations

import json
import math
from typing import Any

from statecat.readers.codecs.decoders import DecodeError
from statecat.readers.codecs.values import EncodeError, _binary, _fields_of
from statecat.statemeta.errors import FormatError
from statecat.statemeta.java.javaser import parse_java_object

JAVA_STRING = "java.lang.String"
FIELDS = ("class", "value", "raw")
# A string the stream names again (five bytes a back-reference) is written out again while the
# repeats stay within this many characters plus a few per stored byte; beyond, it is a reference, so
# the text never grows far past what the bytes hold.
REPEATED_TEXT_BUDGET = 1 << 16
REPEATED_TEXT_PER_BYTE = 4


def decode_java_serialized(buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
    """One Java serialization stream from ``pos``: ``{class, value, raw}`` and where it ends."""
    value, consumed = _parse(bytes(buf[pos:]) if pos else bytes(buf))
    raw = bytes(buf[pos : pos + consumed])
    text = json.dumps(_Json(consumed).of(value), ensure_ascii=False)
    return {"class": _top_class(value), "value": text, "raw": raw}, pos + consumed


def encode_java_serialized(value: Any, out: bytearray) -> None:
    """The inverse of ``decode_java_serialized``: the ``raw`` stream, checked to be what the rest reads."""
    fields = _fields_of(value, FIELDS, "a Java-serialized value {class, value, raw}")
    raw = _binary(fields["raw"], "raw: the Java serialization stream (BINARY)")
    try:
        decoded, end = decode_java_serialized(raw, 0)
    except DecodeError as exc:
        raise EncodeError("raw holding a Java serialization stream", raw, ".raw", note=str(exc)) from None
    if end != len(raw):
        raise EncodeError(f"raw holding one Java serialization stream (it ends after {end} bytes)", raw, ".raw")
    for name in ("class", "value"):
        if fields[name] != decoded[name]:
            raise EncodeError(
                f"{name} as raw reads it (a reading of raw, which is what is written: edit raw, the Java "
                "serialization stream)",
                fields[name],
                f".{name}",
            )
    out += raw


def _parse(data: bytes) -> tuple[object, int]:
    try:
        return parse_java_object(data)
    except FormatError as exc:  # the scanner names the file and the value's offset
        at = "" if exc.offset is None else f" at byte {exc.offset} of the value"
        raise DecodeError(f"not a Java serialization stream{at}: {exc.message}") from None


def _top_class(value: object) -> str | None:
    if isinstance(value, dict):
        name = value.get("@class")
        return name if isinstance(name, str) else None
    return JAVA_STRING if isinstance(value, str) else None


class _Json:
    """The parsed graph as JSON data: every object and array once, as back-references can share or
    cycle; strings again within the budget."""

    def __init__(self, stream_bytes: int) -> None:
        self.seen: set[int] = set()
        self.budget = REPEATED_TEXT_BUDGET + REPEATED_TEXT_PER_BYTE * stream_bytes

    def of(self, value: object) -> Any:
        if value is None or isinstance(value, (bool, int)):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else str(value)  # JSON has no NaN or infinities
        if isinstance(value, (bytes, bytearray)):
            return {"@bytes": bytes(value).hex()}
        if id(value) in self.seen:
            if isinstance(value, str) and len(value) <= self.budget:
                self.budget -= len(value)
                return value
            return {"@ref": _top_class(value) or ("array" if isinstance(value, list) else "?")}
        self.seen.add(id(value))
        if isinstance(value, str):
            return value
        if isinstance(value, dict):
            return {str(key): self.of(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.of(item) for item in value]
        # A class descriptor written as a value (TC_CLASSDESC): its name is what it says.
        return {"@class": "java.io.ObjectStreamClass", "name": getattr(value, "name", None)}
