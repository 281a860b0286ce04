"""Encoders (readers/codecs/encoders.py) held to real Flink bytes.

Ground truth is bytes Flink wrote, never statecat's own encoding:

* every canonical savepoint of the fixture corpus (tests/fixtures/cases): for each keyed and
  operator state whose type statecat decodes, the stored key, namespace, map user key, map value,
  list element, whole list value, value and timer element bytes, and every operator state element,
  must come back byte for byte from ``encode(decode(bytes))`` and from the Arrow form of the decoded
  values (``to_pylist()`` of the column the reader builds); heap checkpoints and native RocksDB
  instances hold the same serializer bytes in other layouts and are not walked here;
* the FLIP-27 split and enumerator bytes of tests/fixtures/source_positions;
* ``FLINK_VECTORS``: values of the types the corpus lacks, serialized with Flink 2.3.0's own
  serializer classes (the flink-dist and flink-table-runtime 2.3.0 jars of PyPI's apache-flink
  2.3.0, a JVM in time zone UTC); ``VECTOR_VALUES`` gives each value, with the Java value where
  it is not obvious;
* ``PYFLINK_VECTORS``: PyFlink 2.3.0's own coders (``coder_impl_fast``), what process-mode state holds.

Two decoded forms keep less than the bytes hold, so their round trip is checked as noted:
TIMESTAMP(7..9) nanoseconds below the microsecond (statecat keeps microseconds: the expected bytes
are Flink's with those digits zeroed) and a BigDecimal of negative scale (shown as plain digits:
its value must round-trip, its bytes cannot).
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import pickle
import struct
from decimal import Decimal
from types import MappingProxyType

import pyarrow as pa
import pytest

from statecat.readers import SavepointReader
from statecat.readers.codecs.arrow_types import arrow_type
from statecat.readers.codecs.decoders import (
    build_decoder,
)
from statecat.readers.codecs.encoders import (
    TtlValue,
    build_encoder,
    build_key_encoder,
    build_list_state_encoder,
    build_timer_encoder,
    encode,
    ttl_timestamp,
    write_utf,
)
from statecat.readers.codecs.pyflink import coder_decoder, coder_encoder
from statecat.readers.codecs.source_splits import split_element_decoder
from statecat.readers.codecs.values import EncodeError
from statecat.statemeta.descriptors import parse_type
from statecat.statemeta.errors import StatecatError, UnsupportedError
from statecat.statemeta.source_splits import ENUMERATOR_TYPE, SPLIT_TYPE
from statecat.statemeta.types import TypeDescriptor
from tests.fixtures.expected import CASES, CASES_DIR, iter_states, load_expected, savepoint_dir
from tests.round_trip import (
    CANONICAL,
    Part,
    assert_parts_round_trip,
    encoded,
    operator_elements,
    refused,
    round_trip,
    stored_parts,
)

T = TypeDescriptor.of
UTC = dt.UTC
SOURCE_POSITIONS = CASES_DIR.parent / "source_positions"


# ----------------------------------------------------------------------------- the corpus's bytes


def _descriptor_doc(expected: dict) -> dict:
    """The descriptor file of a PyFlink process-mode case, from expected.json's declared types
    (as tests/test_stateinfo.py builds it)."""
    ops: dict = {}
    for op, st in iter_states(expected):
        if st.get("declared_type") and st["name"].startswith("python-state-"):
            spec = st["declared_type"]
            if st.get("declared_state"):
                spec = {"type": spec, "state": st["declared_state"]}
            ops.setdefault(op.get("uid") or op.get("name"), {})[st["declared_name"]] = spec
    return {"format": "statecat.descriptors", "version": 1, "operators": ops}


@functools.cache
def _reader(case: str) -> SavepointReader:
    return SavepointReader(str(savepoint_dir(case)), descriptors=_descriptor_doc(load_expected(case)))


@functools.cache
def _checks(case: str, operator: str, name: str) -> list[Part]:
    """(what, type, stored bytes) of every part of one state: each part's bytes hold one value."""
    reader = _reader(case)
    op, state = reader.find(name, operator)
    return stored_parts(reader, op, state)


def _corpus_states() -> list:
    params = []
    for case in CASES:
        for op in _reader(case).meta.operators:
            for state in op.states:
                keyed_here = state.is_keyed and any(loc.layout == CANONICAL for loc in state.keyed_locations)
                if keyed_here or not state.is_keyed:
                    params.append(pytest.param(case, op.id, state.name, id=f"{case}/{op.label}/{state.name}"))
    return params


CORPUS_STATES = _corpus_states()


@pytest.mark.parametrize(("case", "operator", "state"), CORPUS_STATES)
def test_corpus_values_round_trip_byte_for_byte(case, operator, state):
    assert_parts_round_trip(state, _checks(case, operator, state))


def test_corpus_covers_the_types_statecat_decodes():
    """The corpus walk reaches the kinds the savepoints hold (a guard against skipping them all)."""
    kinds: set[str] = set()
    compared = 0

    def walk(desc):
        kinds.add(desc.kind)
        for _, t in desc.fields:
            walk(t)

    for param in CORPUS_STATES:
        for what, desc, blobs in _checks(*param.values):
            if what not in ("timer", "list state") and not refused(desc):
                walk(desc)
                compared += len(blobs)
    assert compared > 3000
    assert {
        "rowdata",
        "ARRAY",
        "MAP",
        "MULTISET",
        "DECIMAL",
        "TIMESTAMP_WITHOUT_TIME_ZONE",
        "TIMESTAMP_WITH_LOCAL_TIME_ZONE",
        "TIME_WITHOUT_TIME_ZONE",
        "DATE",
        "BINARY",
        "VARBINARY",
        "CHAR",
        "RAW",
        "string",
        "long",
        "bigdec",
        "map",
        "row",
        "ttl",
        "pyflink",
        "time_window",
        "count_window",
        "global_window",
        "broadcast_entry",
        "string_data",
        "generic_array",
        "boolean",
        "double",
    } <= kinds


def test_source_positions_splits_and_enumeratorsround_trip():
    """Real split and enumerator bytes: a FileSource and a NumberSequenceSource savepoint (Flink
    2.3), and the Kafka connector's own serializers (reader splits, enumerator v1-v3)."""
    reader = SavepointReader(str(SOURCE_POSITIONS / "filesource_2.3" / "savepoint"))
    parts = [(s.value, e) for _, s in reader.meta.states() if not s.is_keyed for e in operator_elements(reader, s)]
    for path in sorted((SOURCE_POSITIONS / "kafka").glob("*.bin")):
        parts.append((SPLIT_TYPE if path.name.startswith("reader_split") else ENUMERATOR_TYPE, path.read_bytes()))
    connectors = set()
    for desc, data in parts:
        round_trip(f"source state {desc.describe()}", desc, [data])
        connectors.add(build_decoder(desc)(data, 0)[0]["connector"])
    assert {"file", "number_sequence", "kafka", None} <= connectors  # None: an enumerator fitting two formats


def test_a_file_split_path_with_every_uri_part_round_trips():
    data = (SOURCE_POSITIONS / "kafka" / "reader_split_0.bin").read_bytes()
    split, _ = split_element_decoder(data, 0)
    path = "hdfs://user@namenode:8020/data/a b.txt?x=1#frag"
    file_split = {
        "split_id": "0000000001",
        "path": path,
        "offset": 0,
        "length": 10,
        "modification_time": 1,
        "file_size": 10,
        "hostnames": ["h1", "h\u00e9"],
        "reader_offset": -1,
        "records_to_skip": 5,
    }
    split = {**split, "connector": "file", "split_version": 1, "file": file_split, "kafka": None, "raw": None}
    decoded, _ = split_element_decoder(encode(SPLIT_TYPE, split), 0)
    assert decoded["connector"] == "file" and decoded["file"] == file_split


def test_an_edited_split_is_written_with_its_connectors_serializer():
    data = (SOURCE_POSITIONS / "kafka" / "reader_split_0.bin").read_bytes()
    split, _ = split_element_decoder(data, 0)
    split["kafka"] = {**split["kafka"], "starting_offset": 12345, "starting_marker": None}
    edited, _ = split_element_decoder(encode(SPLIT_TYPE, split), 0)
    assert edited["kafka"]["starting_offset"] == 12345 and edited["reason"] is None
    split["kafka"]["starting_offset"] = None
    split["kafka"]["starting_marker"] = "earliest"
    assert split_element_decoder(encode(SPLIT_TYPE, split), 0)[0]["kafka"]["starting_offset"] == -2


# ----------------------------------------------------------------------------- Flink's serializers

LONG = T("long")
STRING = T("string")
VARCHAR = T("VARCHAR", length=2147483647, nullable=True)


def _logical(kind: str, **attrs) -> TypeDescriptor:
    return T(kind, nullable=attrs.pop("nullable", True), **attrs)


RICH_ROW = T(
    "rowdata",
    [
        ("a", _logical("INTEGER", nullable=False)),
        ("b", VARCHAR),
        ("c", _logical("DECIMAL", precision=30, scale=10)),
        ("d", _logical("TIMESTAMP_WITHOUT_TIME_ZONE", precision=9)),
        ("e", T("ARRAY", [("element", _logical("DECIMAL", precision=30, scale=2))], nullable=True)),
        ("f", T("MAP", [("key", VARCHAR), ("value", T("ARRAY", [("element", _logical("INTEGER"))]))], nullable=True)),
        ("g", T("ROW", [("f0", _logical("BOOLEAN")), ("f1", _logical("BINARY", length=3))], nullable=True)),
        ("h", _logical("TIME_WITHOUT_TIME_ZONE", precision=3)),
        ("i", _logical("DATE")),
        ("j", _logical("FLOAT")),
        ("k", _logical("DOUBLE")),
        ("l", _logical("TINYINT")),
        ("m", _logical("SMALLINT")),
        ("n", _logical("VARBINARY", length=100)),
        ("o", _logical("TIMESTAMP_WITH_LOCAL_TIME_ZONE", precision=3)),
        ("p", T("ARRAY", [("element", _logical("FLOAT"))], nullable=True)),
        ("q", T("MULTISET", [("element", VARCHAR)], nullable=True)),
        ("r", T("ARRAY", [("element", VARCHAR)], nullable=True)),
        ("s", _logical("DECIMAL", precision=30, scale=10)),
        ("t", _logical("TIMESTAMP_WITHOUT_TIME_ZONE", precision=6)),
        ("u", T("ARRAY", [("element", _logical("TIMESTAMP_WITHOUT_TIME_ZONE", precision=9))], nullable=True)),
        ("v", T("ARRAY", [("element", _logical("BOOLEAN"))], nullable=True)),
    ],
)
TIME_UNIT = T(
    "enum",
    **{
        "class": "java.util.concurrent.TimeUnit",
        "constants": ["NANOSECONDS", "MICROSECONDS", "MILLISECONDS", "SECONDS", "MINUTES", "HOURS", "DAYS"],
    },
)

# name -> (type, value in the decoders' or Arrow's form); the comment is the Java value serialized.
VECTOR_VALUES = {
    "boolean_true": (T("boolean"), True),  # BooleanSerializer: true
    "byte_min": (T("byte"), -128),
    "short_min": (T("short"), -32768),
    "int_minus1": (T("int"), -1),
    "long_max": (LONG, 2**63 - 1),
    "float_pi": (T("float"), 3.14),  # 3.14f
    "double_negzero": (T("double"), -0.0),
    "char_euro": (T("char"), "\u20ac"),
    "string_empty": (STRING, ""),
    "string_null": (STRING, None),
    "string_mixed": (STRING, "h\u00e9llo\u20ac\u65e5\u0000\U0001f600"),  # NUL is one 0 byte; 😀 two UTF-16 units
    "string_long": (STRING, "".join(chr(ord("a") + i % 26) for i in range(200))),  # two-byte varint length
    "bytes": (T("bytes"), b"\x00\x01\xff"),
    "bigint_null": (T("bigint"), None),
    "bigint_zero": (T("bigint"), "0"),  # BigInteger.ZERO: short form
    "bigint_ten": (T("bigint"), 10),  # BigInteger.TEN
    "bigint_minus1": (T("bigint"), -1),
    "bigint_128": (T("bigint"), "128"),  # two bytes: 00 80
    "bigint_huge_neg": (T("bigint"), "-123456789012345678901234567890"),
    "bigdec_null": (T("bigdec"), None),
    "bigdec_zero_scale2": (T("bigdec"), "0.00"),  # new BigDecimal("0.00"): BigInteger.ZERO, scale 2
    "bigdec_neg": (T("bigdec"), Decimal("-12.345")),
    "bigdec_wide": (T("bigdec"), "123456789012345678901234567890.123"),
    "sql_date": (T("sql_date"), dt.date(2024, 1, 2)),  # java.sql.Date.valueOf("2024-01-02")
    "sql_date_null": (T("sql_date"), None),
    "sql_time": (T("sql_time"), "12:34:56"),  # java.sql.Time.valueOf("12:34:56")
    "sql_time_null": (T("sql_time"), None),
    "sql_timestamp": (T("sql_timestamp"), dt.datetime(2024, 1, 2, 3, 4, 5, 123456)),  # Timestamp.valueOf
    "sql_timestamp_pre_epoch": (T("sql_timestamp"), dt.datetime(1969, 12, 31, 23, 59, 59, 500000)),
    "sql_timestamp_null": (T("sql_timestamp"), None),
    "date": (T("date"), dt.datetime(2024, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)),  # new Date(1704164645123L)
    "date_null": (T("date"), None),
    "instant": (T("instant"), 1704164645123456),  # Instant.ofEpochSecond(1704164645, 123456000)
    "instant_pre_epoch": (T("instant"), dt.datetime(1969, 12, 31, 23, 59, 59, 500000, tzinfo=UTC)),
    "instant_null": (T("instant"), None),
    "local_date": (T("local_date"), dt.date(2024, 1, 2)),
    "local_date_min": (T("local_date"), dt.date(1, 1, 1)),
    "local_date_null": (T("local_date"), None),
    "local_time": (T("local_time"), "12:34:56.123456789"),  # LocalTime.of(12, 34, 56, 123456789)
    "local_time_null": (T("local_time"), None),
    "local_datetime": (T("local_datetime"), dt.datetime(2024, 1, 2, 3, 4, 5, 123456)),
    "local_datetime_null": (T("local_datetime"), None),
    "enum": (TIME_UNIT, "SECONDS"),  # new EnumSerializer<>(TimeUnit.class): TimeUnit.SECONDS
    "void_namespace": (T("void_namespace"), None),
    "time_window": (T("time_window"), {"start": 0, "end": 1200000}),
    "global_window": (T("global_window"), None),
    "count_window": (T("count_window"), {"id": 7}),  # the table runtime's CountWindow.Serializer
    "tuple": (T("tuple", [("f0", T("int")), ("f1", STRING)]), {"f0": 10, "f1": "key-212"}),  # Tuple2.of(10, "key-212")
    "row": (T("row", [("f0", T("int")), ("f1", STRING)], row_kind=True), {"f0": 10, "f1": None}),  # Row.of(10, null)
    "row9": (  # nine LONG fields, every third NULL: a two-byte mask after the RowKind bits
        T("row", [(f"f{i}", LONG) for i in range(9)], row_kind=True),
        {f"f{i}": None if i % 3 == 0 else i for i in range(9)},
    ),
    "either_left": (T("either", [("left", T("int")), ("right", STRING)]), {"left": 5, "right": None}),
    "either_right": (T("either", [("left", T("int")), ("right", STRING)]), {"left": None, "right": "x"}),
    "nullable_padded_null": (T("nullable", [("value", LONG)], padding=8), None),  # NullableSerializer.wrap(.., true)
    "nullable_padded": (T("nullable", [("value", LONG)], padding=8), 5),
    "nullable_null": (T("nullable", [("value", STRING)], padding=0), None),
    "list": (T("list", [("element", STRING)]), ["a", "bc"]),  # ListSerializer
    "map": (T("map", [("key", STRING), ("value", LONG)]), {"a": 1, "b": None}),  # MapSerializer, a LinkedHashMap
    "int_array": (T("primitive_array", [("element", T("int"))]), [1, -2, 3]),
    "long_array": (T("primitive_array", [("element", LONG)]), [-(2**63)]),
    "boolean_array": (T("primitive_array", [("element", T("boolean"))]), [True, False]),
    "char_array": (T("primitive_array", [("element", T("char"))]), ["a", "\u20ac"]),
    "double_array": (T("primitive_array", [("element", T("double"))]), [1.5, -2.25]),
    "float_array": (T("primitive_array", [("element", T("float"))]), [1.5]),
    "short_array": (T("primitive_array", [("element", T("short"))]), [-1, 2]),
    "string_array": (T("string_array", [("element", STRING)]), ["a", None, "\u00e9"]),
    "generic_array": (T("generic_array", [("element", T("int"))], **{"class": "java.lang.Integer"}), [1, None, 3]),
    "pojo": (  # PojoSerializer of {int count; String name; Long boxed}: fields in name order
        T("pojo", [("boxed", LONG), ("count", T("int")), ("name", STRING)], **{"class": "Vectors$Pojo"}),
        {"boxed": None, "count": 10, "name": "key-212"},
    ),
    "pojo_null": (
        T("pojo", [("boxed", LONG), ("count", T("int")), ("name", STRING)], **{"class": "Vectors$Pojo"}),
        None,
    ),
    "ttl": (T("ttl", [("value", STRING)]), TtlValue("t0", 1704164645123)),  # TtlSerializer: TtlValue("t0", ..)
    "string_data": (T("string_data"), "h\u00e9llo"),  # StringDataSerializer
    "decimal_data_compact": (T("decimal_data", precision=10, scale=2), Decimal("-12.50")),
    "decimal_data_wide": (T("decimal_data", precision=30, scale=10), Decimal("-12345678901234567890.1234567890")),
    "timestamp_data_3": (T("timestamp_data", precision=3), dt.datetime(2024, 1, 2, 3, 4, 5, 123000)),
    "timestamp_data_9": (T("timestamp_data", precision=9), -1),  # TimestampData.fromEpochMillis(-1, 999000)
    "rowdata_rich": (  # RowDataSerializer of a GenericRowData (toBinaryRow): NULLs are zeroed slots
        RICH_ROW,
        {
            "a": 7,
            "b": "a string longer than seven",
            "c": Decimal("-0.5000000000"),
            "d": dt.datetime(2024, 1, 2, 3, 4, 5, 123456),  # fromEpochMillis(1704164645123L, 456000)
            "e": [Decimal("1.25"), None],
            "f": [("k", [1, None, 3]), ("empty", [])],
            "g": {"f0": True, "f1": b"\x01\x02\x03"},
            "h": "12:34:56.789",
            "i": dt.date(2024, 1, 2),
            "j": 1.5,
            "k": -2.25,
            "l": -3,
            "m": 300,
            "n": bytes(range(9, 0, -1)),
            "o": dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
            "p": [math.nan, 1.0, 2.0],  # an array's NaN is Float.NaN whatever its bits
            "q": [("x", 2), ("a longer element", 1)],
            "r": ["short", "longer than 7", None, ""],
            "s": None,
            "t": None,
            "u": [dt.datetime(1970, 1, 1, 0, 0, 0, 5006), None],
            "v": [True, False, True],
        },
    ),
    "array_data": (T("array_data", [("element", _logical("INTEGER"))]), [1, None, 3]),  # ArrayDataSerializer
    "map_data": (T("map_data", [("key", VARCHAR), ("value", _logical("BIGINT"))]), [("k", 1), ("n", None)]),
}
# Generated code (BinaryRowWriter.writeDecimal/writeTimestamp with null) keeps a NULL non-compact
# field's bytes in the variable part: written with reserve_nulls=True.
CODEGEN_ROW = T(
    "rowdata",
    [
        ("a", _logical("BIGINT")),
        ("b", _logical("DECIMAL", precision=30, scale=10)),
        ("c", _logical("TIMESTAMP_WITHOUT_TIME_ZONE", precision=9)),
        ("d", _logical("VARCHAR", length=5)),
    ],
)

FLINK_VECTORS = {
    "boolean_true": "01",
    "byte_min": "80",
    "short_min": "8000",
    "int_minus1": "ffffffff",
    "long_max": "7fffffffffffffff",
    "float_pi": "4048f5c3",
    "double_negzero": "8000000000000000",
    "char_euro": "20ac",
    "string_empty": "01",
    "string_null": "00",
    "string_mixed": "0b68e9016c6c6fac41e5cb0100bdb00380bc03",
    "string_long": (
        "c9016162636465666768696a6b6c6d6e6f707172737475767778797a6162636465666768696a6b6c6d6e6f7071727374"
        "75767778797a6162636465666768696a6b6c6d6e6f707172737475767778797a6162636465666768696a6b6c6d6e6f70"
        "7172737475767778797a6162636465666768696a6b6c6d6e6f707172737475767778797a6162636465666768696a6b6c"
        "6d6e6f707172737475767778797a6162636465666768696a6b6c6d6e6f707172737475767778797a6162636465666768"
        "696a6b6c6d6e6f707172"
    ),
    "bytes": "000000030001ff",
    "bigint_null": "00000000",
    "bigint_zero": "00000001",
    "bigint_ten": "00000003",
    "bigint_minus1": "00000005ff",
    "bigint_128": "000000060080",
    "bigint_huge_neg": "00000011fe7116f0093c8c1f11b1c0f52e",
    "bigdec_null": "00000000",
    "bigdec_zero_scale2": "0000000100000002",
    "bigdec_neg": "00000006cfc700000003",
    "bigdec_wide": "0000001206163e665beb7ca6a2e1a64244cb00000003",
    "sql_date": "0000018cc7785000",
    "sql_date_null": "8000000000000000",
    "sql_time": "0000000002b32980",
    "sql_time_null": "8000000000000000",
    "sql_timestamp": "0000018cc820d903075bca00",
    "sql_timestamp_pre_epoch": "fffffffffffffe0c1dcd6500",
    "sql_timestamp_null": "800000000000000000000000",
    "date": "0000018cc820d903",
    "date_null": "8000000000000000",
    "instant": "0000000065937d25075bca00",
    "instant_pre_epoch": "ffffffffffffffff1dcd6500",
    "instant_null": "800000000000000080000000",
    "local_date": "000007e80102",
    "local_date_min": "000000010101",
    "local_date_null": "800000008000",
    "local_time": "0c2238075bcd15",
    "local_time_null": "80800080000000",
    "local_datetime": "000007e80102030405075bca00",
    "local_datetime_null": "80000000800080800080000000",
    "enum": "00000003",
    "void_namespace": "00",
    "time_window": "00000000000000000000000000124f80",
    "global_window": "00",
    "count_window": "0000000000000007",
    "tuple": "0000000a086b65792d323132",
    "row": "100000000a",
    "row9": ("2480000000000000000100000000000000020000000000000004000000000000000500000000000000070000000000000008"),
    "either_left": "0100000005",
    "either_right": "000278",
    "nullable_padded_null": "010000000000000000",
    "nullable_padded": "000000000000000005",
    "nullable_null": "01",
    "list": "000000020261036263",
    "map": "000000020261000000000000000001026201",
    "int_array": "0000000300000001fffffffe00000003",
    "long_array": "000000018000000000000000",
    "boolean_array": "000000020100",
    "char_array": "00000002006120ac",
    "double_array": "000000023ff8000000000000c002000000000000",
    "float_array": "000000013fc00000",
    "short_array": "00000002ffff0002",
    "string_array": "0000000302610002e901",
    "generic_array": "000000030100000001000100000003",
    "pojo": "0201000000000a00086b65792d323132",
    "pojo_null": "01",
    "ttl": "0000018cc820d903037430",
    "string_data": "0000000668c3a96c6c6f",
    "decimal_data_compact": "fffffffffffffb1e",
    "decimal_data_wide": "0000000dfe7116f0093c8c1f11b1c0f52e",
    "timestamp_data_3": "0000018cc820d903",
    "timestamp_data_9": "ffffffffffffffff000f3e58",
    "rowdata_rich": (
        "000002580000000c0000000007000000000000001a000000b800000005000000d800000040f50600e800000028000000"
        "f000000054000000180100001800000070010000952cb302000000000c4d0000000000000000c03f0000000000000000"
        "000002c0fd000000000000002c010000000000000900000088010000ffffffffffffffff18000000980100003c000000"
        "b001000038000000f0010000000000000000000000000000000000002000000028020000100000004802000061207374"
        "72696e67206c6f6e676572207468616e20736576656e000000000000fed5fa0e00000000000000000000000003d920c8"
        "8c0100000200000002000000010000001800000000000000000000007d00000000000000000000000000000018000000"
        "02000000000000006b00000000000081656d707479000085020000000000000018000000180000000800000030000000"
        "030000000200000001000000000000000300000000000000000000000000000000000000000000000000000001000000"
        "0000000001020300000000830908070605040302010000000000000003000000000000000000c07f0000803f00000040"
        "000000002800000002000000000000007800000000000081100000001800000061206c6f6e67657220656c656d656e74"
        "0200000000000000020000000100000000000000040000000400000073686f72740000850d0000002800000000000000"
        "0000000000000000000000806c6f6e676572207468616e20370000000200000002000000701700001800000000000000"
        "00000000050000000000000003000000000000000100010000000000"
    ),
    "rowdata_codegen_nulls": (
        "0000004000060000000000002a0000000000000000000000280000000000000038000000616200000000008200000000"
        "0000000000000000000000000000000000000000"
    ),
    "array_data": "00000018030000000200000001000000000000000300000000000000",
    "map_data": (
        "000000341800000002000000000000006b000000000000816e0000000000008102000000020000000100000000000000"
        "0000000000000000"
    ),
    "write_utf": "000e61c080c3a9e282aceda0bdedb880",
}


# PyFlink's own coders (pyflink 2.3.0 ``coder_impl_fast``, what process mode writes state with):
# declared type, value in the decoders' or Arrow's form, coder bytes.
PYFLINK_VECTORS = [
    ("BOOLEAN", True, "01"),
    ("BYTE", -5, "fb"),
    ("SHORT", 300, "012c"),
    ("INT", -7, "fffffff9"),
    ("LONG", 2**40, "0000010000000000"),
    ("FLOAT", 1.5, "3fc00000"),
    ("DOUBLE", -2.25, "c002000000000000"),
    ("STRING", "h\u00e9llo\U0001f600", "0000000a68c3a96c6c6ff09f9880"),
    ("BIG_DEC", "-12.3450", "000000082d31322e33343530"),  # Decimal("-12.3450")
    ("BYTES", b"\x00\xff", "0000000200ff"),
    ("SQL_DATE", dt.date(2024, 1, 2), "00004d0c"),
    ("SQL_TIME", "12:34:56.789", "02b32c95"),  # datetime.time(12, 34, 56, 789000)
    ("SQL_TIMESTAMP", dt.datetime(2024, 1, 2, 3, 4, 5, 123000), "0000018cc820d903"),
    ("INSTANT", dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC), "0000000065937d25075bca00"),
    ("LOCAL_DATE", dt.date(2024, 1, 2), "000007e80102"),
    ("LOCAL_DATE", None, "ffffffffffff"),
    ("LOCAL_TIME", "12:34:56.123456", "0c2238075bca00"),
    ("LOCAL_TIME", None, "ffffffffffffff"),
    ("LOCAL_DATETIME", dt.datetime(2024, 1, 2, 3, 4, 5, 123456), "000007e80102030405075bca00"),
    ("LIST<STRING>", ["a", None, "bc"], "000000030100000001610001000000026263"),
    ("PRIMITIVE_ARRAY<INT>", [1, -2], "0000000200000001fffffffe"),
    ("MAP<STRING, LONG>", {"a": 1, "b": None}, "000000020000000161000000000000000001000000016201"),
    ("TUPLE<LONG, STRING>", {"f0": 5, "f1": "x"}, "00000000000000050000000178"),
    (
        "ROW<name STRING, n LONG, d SQL_DATE, flag BOOLEAN, b BYTES, s SHORT, i INT, f DOUBLE>",
        {"name": "k", "n": None, "d": dt.date(2024, 1, 2), "flag": False, "b": None, "s": 3, "i": None, "f": 0.5},
        "1280000000016b00004d0c0000033fe0000000000000",
    ),
]


@pytest.mark.parametrize(
    ("coder", "value", "hexed"), PYFLINK_VECTORS, ids=[f"{c}-{h[:8]}" for c, _, h in PYFLINK_VECTORS]
)
def test_pyflink_coder_bytes(coder, value, hexed):
    parsed = parse_type(coder)
    want = bytes.fromhex(hexed)
    encoder = coder_encoder(parsed)
    assert encoded(encoder, value) == want
    decoded, end = coder_decoder(parsed)(want, 0)
    assert end == len(want) and encoded(encoder, decoded) == want
    arrow_value = pa.array([decoded], type=arrow_type(parsed.result_type())).to_pylist()[0]
    assert encoded(encoder, arrow_value) == want
    if value is not None:  # a map key or value in its byte[] (a NULL map value is the entry's null flag)
        framed = T("pyflink", [("value", parsed.result_type())], layout="plain", coder=coder)
        assert encode(framed, value) == struct.pack(">i", len(want)) + want


def _with_ttl(desc: TypeDescriptor, value, data: bytes):
    return TtlValue(value, ttl_timestamp(data)) if desc.kind == "ttl" else value


@pytest.mark.parametrize("name", sorted(VECTOR_VALUES))
def test_flink_serializer_bytes(name):
    desc, value = VECTOR_VALUES[name]
    want = bytes.fromhex(FLINK_VECTORS[name])
    assert encode(desc, value).hex() == want.hex()
    decoded, end = build_decoder(desc)(want, 0)
    assert end == len(want)
    assert encode(desc, _with_ttl(desc, decoded, want)) == want
    arrow_value = pa.array([decoded], type=arrow_type(desc)).to_pylist()[0]
    assert encode(desc, _with_ttl(desc, arrow_value, want)) == want


def test_every_flink_vector_is_checked():
    assert set(FLINK_VECTORS) == set(VECTOR_VALUES) | {"rowdata_codegen_nulls", "write_utf"}


def test_null_non_compact_fields_as_generated_code_writes_them():
    want = bytes.fromhex(FLINK_VECTORS["rowdata_codegen_nulls"])
    value = {"a": 42, "b": None, "c": None, "d": "ab"}
    encoder = build_encoder(CODEGEN_ROW, reserve_nulls=True)
    assert encoded(encoder, value) == want
    zeroed = encode(CODEGEN_ROW, value)  # the default, as RowDataSerializer writes a GenericRowData
    assert len(zeroed) < len(want) and build_decoder(CODEGEN_ROW)(zeroed, 0)[0] == value


def test_write_utf_is_javas_modified_utf8():
    out = bytearray()
    write_utf("a\u0000\u00e9\u20ac\U0001f600", out)
    assert out.hex() == FLINK_VECTORS["write_utf"]
    text = "\u007f\u0080\u07ff\u0800\uffff"  # the edges of 1-, 2- and 3-byte sequences: UTF-8's own
    out = bytearray()
    write_utf(text, out)
    assert bytes(out) == struct.pack(">H", len(text.encode())) + text.encode()


# ----------------------------------------------------------------------------- API behaviour


def test_fixed_width_rows_take_one_path_whatever_the_value_form():
    """A row of fixed-width fields is packed in one call; other forms of the same value (a read-only
    mapping, int subclasses, an int for a DOUBLE) go field by field (held to Flink's bytes by the
    vectors above), to the same bytes."""

    class Ints(int):
        pass

    kinds = ("BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "FLOAT", "DOUBLE")
    desc = T("rowdata", [(f"f{i}", _logical(kind)) for i, kind in enumerate(kinds)])
    value = {"f0": True, "f1": -3, "f2": 300, "f3": -7, "f4": 2**40, "f5": 1.5, "f6": -2.25}
    fast = encode(desc, value)
    assert fast == encode(desc, MappingProxyType(value))
    assert fast == encode(desc, {**value, "f4": Ints(2**40), "f6": -2.25})
    assert fast == encode(desc, pa.array([value]).to_pylist()[0])
    two = T("rowdata", [("f0", _logical("BIGINT")), ("f1", _logical("DOUBLE"))])
    assert encode(two, {"f0": -5, "f1": 2}) == encode(two, MappingProxyType({"f0": -5, "f1": 2.0}))
    assert encode(two, {"f0": -5, "f1": 2.0}) == bytes.fromhex(
        "00000018" + "00" * 8 + "fbffffffffffffff" + "0000000000000040"
    )


def test_key_encoder_takes_the_key_column_form():
    key = T("rowdata", [("f0", VARCHAR)])
    assert encoded(build_key_encoder(key), "key_662") == encode(key, {"f0": "key_662"})
    wide = T("rowdata", [("f0", VARCHAR), ("f1", _logical("INTEGER"))])
    assert encoded(build_key_encoder(wide), {"f0": "k", "f1": 1}) == encode(wide, {"f0": "k", "f1": 1})


def test_ttl_timestamp_kept_or_set():
    desc = T("ttl", [("value", STRING)])
    stored = bytes.fromhex(FLINK_VECTORS["ttl"])
    kept = TtlValue("edited", ttl_timestamp(stored))
    assert encode(desc, kept)[:8] == stored[:8]
    assert encode(desc, "edited", ttl_timestamp=1_700_000_000_000)[:8] == struct.pack(">q", 1_700_000_000_000)
    with pytest.raises(EncodeError, match="last-access timestamp"):
        encode(desc, "edited")


def test_timer_and_list_state_encoders():
    timer = build_timer_encoder(T("rowdata", [("f0", VARCHAR)]), T("void_namespace"))
    element = encoded(timer, {"timestamp": -1, "key": "k", "namespace": None})
    assert element == bytes.fromhex("7fffffffffffffff" + "00000010" + "00" * 8 + "6b00000000000081" + "00")
    assert encoded(build_list_state_encoder(STRING), ["a", "bc"]) == bytes.fromhex("0261" + "2c" + "036263")


def test_errors_are_statecat_value_errors_that_pickle():
    with pytest.raises(EncodeError) as caught:
        encode(T("tuple", [("f0", LONG)]), {"f0": "abc"})
    error = caught.value
    assert isinstance(error, StatecatError) and isinstance(error, ValueError)
    assert str(error) == "expected a BIGINT (64-bit integer) for value.f0, got 'abc' (str)"
    assert str(pickle.loads(pickle.dumps(error))) == str(error)


REJECTED = [
    pytest.param(
        LONG, 2**63, "a BIGINT (64-bit integer) within -9223372036854775808..9223372036854775807", id="long overflow"
    ),
    pytest.param(T("int"), -(2**31) - 1, "an INT (32-bit integer) within", id="int overflow"),
    pytest.param(T("short"), 1.0, "a SMALLINT (16-bit integer) for value, got 1.0 (float)", id="float for int"),
    pytest.param(LONG, True, "got True (bool)", id="bool for int"),
    pytest.param(
        LONG,
        None,
        "a BIGINT (64-bit integer) for value, got None (NoneType): this serializer writes no NULL",
        id="null long",
    ),
    pytest.param(T("float"), 1e39, "a FLOAT (32-bit float) within its range", id="float overflow"),
    pytest.param(T("boolean"), 1, "a BOOLEAN (bool)", id="int for boolean"),
    pytest.param(T("char"), "ab", "a CHAR", id="two chars"),
    pytest.param(STRING, b"x", "a STRING (str)", id="bytes for string"),
    pytest.param(T("string_data"), "\ud800", "no unpaired surrogates", id="lone surrogate"),
    pytest.param(T("bytes"), "x", "a BYTES value (bytes)", id="str for bytes"),
    pytest.param(TIME_UNIT, "WEEKS", "a constant of ENUM java.util.concurrent.TimeUnit", id="unknown enum constant"),
    pytest.param(
        T("decimal_data", precision=10, scale=2),
        Decimal("1.234"),
        "at most 2 digits after the point",
        id="decimal scale",
    ),
    pytest.param(
        T("decimal_data", precision=10, scale=2), Decimal("123456789.5"), "at most 10 digits", id="decimal precision"
    ),
    pytest.param(T("decimal_data", precision=10, scale=2), 1.5, "a decimal.Decimal or int", id="float for decimal"),
    pytest.param(
        T("sql_timestamp"), dt.datetime(2024, 1, 1, tzinfo=UTC), "without a time zone", id="aware for wall clock"
    ),
    pytest.param(
        T("timestamp_data", precision=3),
        dt.datetime(2024, 1, 1, 0, 0, 0, 1),
        "no digits below its precision",
        id="sub-ms",
    ),
    pytest.param(T("sql_date"), dt.datetime(2024, 1, 1), "a date without a time of day", id="datetime for date"),
    pytest.param(T("sql_time"), "25:00:00", "a time of day", id="hour 25"),
    pytest.param(T("instant"), 10**18, "within", id="instant beyond year 9999"),
    pytest.param(T("time_window"), {"start": 0}, "missing end", id="missing field"),
    pytest.param(T("tuple", [("f0", LONG)]), {"f0": 1, "f1": 2}, "unknown f1", id="extra field"),
    pytest.param(T("tuple", [("f0", LONG)]), {"f0": None}, "value.f0", id="null tuple field"),
    pytest.param(
        T("either", [("left", LONG), ("right", STRING)]),
        {"left": None, "right": None},
        "exactly one",
        id="empty either",
    ),
    pytest.param(T("list", [("element", LONG)]), [1, None], "value[1]", id="null list element"),
    pytest.param(T("map", [("key", STRING), ("value", LONG)]), [("a", "x")], "for value[0].value", id="map value path"),
    pytest.param(
        RICH_ROW,
        {**VECTOR_VALUES["rowdata_rich"][1], "a": None},
        "a value of type INTEGER for value.a, got None (NoneType): the field is NOT NULL",
        id="not null",
    ),
    pytest.param(
        RICH_ROW, {**VECTOR_VALUES["rowdata_rich"][1], "f": [("k", ["x"])]}, "for value.f[0].value[0]", id="nested path"
    ),
    pytest.param(
        T("array_data", [("element", _logical("INTEGER", nullable=False))]),
        [None],
        "for value[0], got None (NoneType): the elements are NOT NULL",
        id="not null element",
    ),
    pytest.param(T("rowdata", [("f0", _logical("BIGINT"))]), {"f0": 2**63}, "for value.f0", id="fast path overflow"),
    pytest.param(
        T("rowdata", [("f0", _logical("TINYINT"))]),
        {"f0": 128},
        "a TINYINT (8-bit integer) within -128..127",
        id="tinyint",
    ),
]


@pytest.mark.parametrize(("desc", "value", "message"), REJECTED)
def test_wrong_values_are_refused_with_what_was_expected(desc, value, message):
    with pytest.raises(EncodeError, match=None) as caught:
        encode(desc, value)
    assert message in str(caught.value)


def test_errors_name_the_part_written():
    with pytest.raises(EncodeError, match="for key.f0"):
        encode(T("row", [("f0", LONG)], row_kind=True), {"f0": "x"}, what="key")


@pytest.mark.parametrize(
    "desc",
    [
        pytest.param(TypeDescriptor.raw("org.example.KryoThing", "Kryo"), id="raw"),
        pytest.param(T("pickled", pyflink_pickle=True), id="pickled"),
        pytest.param(T("list", [("element", TypeDescriptor.raw("org.example.X", "unknown"))]), id="raw element"),
        pytest.param(T("pyflink", [("value", STRING)], layout="plain", coder="PICKLED"), id="pyflink pickled"),
    ],
)
def test_bytes_only_types_have_no_encoder(desc):
    with pytest.raises(UnsupportedError, match="copied unchanged"):
        build_encoder(desc)


def test_an_empty_list_state_isrefused():
    with pytest.raises(EncodeError, match="non-empty"):
        encode(T("pyflink", [("value", T("list", [("element", STRING)]))], layout="bag_all", coder="STRING"), [])
