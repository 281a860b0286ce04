"""The Java serialization grammar walker on hostile streams: bounded, and only FormatErrors.

Hand-made streams (the error paths); real streams are parsed by every fixture's header and
CheckpointProperties trailer.
"""

from __future__ import annotations

import struct

import pytest

from statecat.statemeta.errors import FormatError
from statecat.statemeta.java.javaser import BASE_WIRE_HANDLE, parse_java_object

HEADER = b"\xac\xed\x00\x05"


def _class_desc(name: str, superclass: bytes) -> bytes:
    encoded = name.encode()
    # TC_CLASSDESC, name, serialVersionUID, flags (serializable), no fields, end of annotations, superclass
    return b"\x72" + struct.pack(">H", len(encoded)) + encoded + bytes(8) + b"\x02" + b"\x00\x00" + b"\x78" + superclass


def test_a_long_run_of_resets_is_walked_without_recursion():
    value, consumed = parse_java_object(HEADER + b"\x79" * 100_000 + b"\x70")
    assert value is None and consumed == 4 + 100_001


def test_a_deep_superclass_chain_is_a_format_error():
    chain = b"\x70"
    for i in range(5000):
        chain = _class_desc(f"C{i}", chain)
    with pytest.raises(FormatError, match="nested at most"):
        parse_java_object(HEADER + b"\x73" + chain)


def test_a_class_that_is_its_own_superclass_is_a_format_error():
    self_reference = b"\x71" + struct.pack(">i", BASE_WIRE_HANDLE)
    with pytest.raises(FormatError, match="cyclic"):
        parse_java_object(HEADER + b"\x73" + _class_desc("Loop", self_reference))


def test_an_array_class_named_only_bracket_is_a_format_error():
    with pytest.raises(FormatError, match="array class descriptor"):
        parse_java_object(HEADER + b"\x75" + _class_desc("[", b"\x70") + struct.pack(">i", 1))


def test_a_reset_inside_an_enum_constant_is_a_format_error():
    # Fuzz finding (atheris): the reset dropped the handle reserved for the enum constant.
    enum = b"\x7e" + _class_desc("E", b"\x70") + b"\x79" + b"\x74" + struct.pack(">H", 1) + b"A"
    with pytest.raises(FormatError, match="reset"):
        parse_java_object(HEADER + enum)
