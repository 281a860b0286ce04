"""CEP's NFA state and shared buffer (flink-cep, MATCH_RECOGNIZE), decoded and encoded side by side.

The layouts (``NFAStateSerializer``, ``sharedbuffer/*Serializer``, ``DeweyNumber.DeweyNumberSerializer``;
the same in Flink 1.15 to 2.3), typed by statemeta/files/snapshots.py:

- EventId: i32 id (the event's number among those of its timestamp), i64 timestamp.
- NodeId: a presence byte (1; 0 for none), then the EventId and the page name (the pattern stage that
  took the event) as a StringValue.
- DeweyNumber: an i32 count, then the digits as i32s; shown as ``DeweyNumber.toString()`` writes it,
  ``"1.0.2"``.
- Lockable<V>: an i32 reference count (how many partial matches hold the value), then V.
- SharedBufferEdge: the target NodeId, then the edge's DeweyNumber.
- SharedBufferNode: an i32 count of edges, each a Lockable<SharedBufferEdge>.
- NFAState: the partial matches, then the completed ones, each an i32 count of computation states: the
  NFA state's name (StringValue), the previous shared-buffer entry (NodeId), the version (DeweyNumber),
  the start timestamp (i64), the previous event's timestamp (i64, when the snapshot says so) and the
  start event: a presence byte (1), then its EventId.

Everything but the DeweyNumber and the presence bytes is fields one after another, as a Tuple's.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import Any

from statecat.readers.codecs.decoders import INT_MIN, DecodeError, Decoder, fields_decoder, read_count
from statecat.readers.codecs.encoders import INT_MAX, fields_encoder
from statecat.readers.codecs.values import EncodeError, Encoder, _refuse
from statecat.statemeta.types import CEP_KINDS, TypeDescriptor

ABSENT, PRESENT = 0, 1  # NodeIdSerializer's and NFAStateSerializer's presence bytes
DEWEY_DIGIT_BYTES = 4
_PACK_I32 = struct.Struct(">i").pack
_DEWEY_TEXT = re.compile(r"(?:-?[0-9]+(?:\.-?[0-9]+)*)?")


def build_cep_decoder(desc: TypeDescriptor, build: Callable[[TypeDescriptor], Decoder]) -> Decoder:
    """The decoder of a CEP kind; ``build`` makes its fields' decoders (decoders.build_decoder)."""
    if desc.kind == "dewey_number":
        return _dewey_number
    pairs = [(name, build(child)) for name, child in desc.fields]
    if desc.kind == "cep_computation_state":
        pairs = [(name, _present(decode) if name == "start_event" else decode) for name, decode in pairs]
    decoder = fields_decoder(pairs)
    return _present(decoder) if desc.kind == "cep_node_id" else decoder


def build_cep_encoder(desc: TypeDescriptor, build: Callable[[TypeDescriptor], Encoder]) -> Encoder:
    """The encoder of a CEP kind, the inverse of ``build_cep_decoder``."""
    if desc.kind == "dewey_number":
        return _encode_dewey_number
    pairs = [(name, build(child)) for name, child in desc.fields]
    if desc.kind == "cep_computation_state":
        pairs = [(name, _encode_present(encode) if name == "start_event" else encode) for name, encode in pairs]
    encoder = fields_encoder(pairs, CEP_KINDS[desc.kind])
    return _encode_present(encoder) if desc.kind == "cep_node_id" else encoder


def _present(inner: Decoder) -> Decoder:
    def present(buf: bytes, pos: int) -> tuple[Any, int]:
        if pos >= len(buf):
            raise DecodeError(f"value runs past the end of its bytes (needs {pos + 1}, has {len(buf)})")
        flag = buf[pos]
        if flag == PRESENT:
            return inner(buf, pos + 1)
        if flag != ABSENT:
            raise DecodeError(f"expected a presence byte {ABSENT} or {PRESENT}, got {flag}")
        return None, pos + 1

    return present


def _encode_present(inner: Encoder) -> Encoder:
    def present(value: Any, out: bytearray) -> None:
        if value is None:
            out.append(ABSENT)
            return
        out.append(PRESENT)
        inner(value, out)

    return present


def _dewey_number(buf: bytes, pos: int) -> tuple[str, int]:
    n, pos = read_count(buf, pos, "DeweyNumber length", min_size=DEWEY_DIGIT_BYTES)
    digits = struct.unpack_from(f">{n}i", buf, pos)
    return ".".join(map(str, digits)), pos + n * DEWEY_DIGIT_BYTES


def _encode_dewey_number(value: Any, out: bytearray) -> None:
    expected = 'a DeweyNumber as text, INT digits joined by "." (e.g. "1.0.2")'
    if not isinstance(value, str):
        raise _refuse(expected, value)
    if not _DEWEY_TEXT.fullmatch(value):
        raise EncodeError(expected, value)
    digits = [int(part) for part in value.split(".")] if value else []
    if any(not INT_MIN <= digit <= INT_MAX for digit in digits):
        raise EncodeError(f"{expected} within {INT_MIN}..{INT_MAX}", value)
    out += _PACK_I32(len(digits))
    for digit in digits:
        out += _PACK_I32(digit)
