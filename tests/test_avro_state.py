"""Avro state (flink-avro's AvroSerializer): typed from the writer schema in its serializer snapshot.

The cases datastream_java_avro_* are savepoints of tests/flink_jobs/java/DataStreamAvro.java (a
GenericRecord ValueState, a SpecificRecord ValueState and ListState) on Flink 2.3 (hashmap) and
1.20 (RocksDB); their expected rows come from the job's input (tests/fixtures/avro_kinds.py).
They must decode exactly through `statecat read`, the Python API and Spark. Damaged schemas and
value bytes (hand-made: only for the error paths) fail with the place and what was expected.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from statecat.readers import SavepointReader
from statecat.readers.codecs.avro import MAX_ZERO_WIDTH_ITEMS, build_avro_decoder
from statecat.readers.codecs.decoders import DecodeError
from statecat.statemeta.binary import DataInput
from statecat.statemeta.errors import FormatError, StatecatError
from statecat.statemeta.files.snapshots import SnapshotReader
from statecat.statemeta.java.avro import AVRO_SNAPSHOT, avro_descriptor, parse_schema
from statecat.statemeta.model import load_state_meta
from tests.acceptance import canonical
from tests.fixtures.expected import CASES, iter_states, load_expected, savepoint_dir

AVRO_CASES = [c for c in CASES if c.startswith("datastream_java_avro_")]
OPERATOR = "avro-fn"
STATES = ("profile", "reading", "readings")
PROFILE_RECORD = "statecat.avro.Profile"
READING_CLASS = "DataStreamAvro$Reading"
GENERIC_RECORD_CLASS = "org.apache.avro.generic.GenericRecord"
# What the writer schemas' types become in Spark (statemeta.avro.column_type).
PROFILE_SQL = (
    "STRUCT<key: STRING, count: BIGINT, total: DOUBLE, level: STRING, names: ARRAY<STRING>, "
    "per_name: MAP<STRING, BIGINT>, last: STRUCT<v: INT, half: FLOAT, flag: BOOLEAN>, nick: STRING, "
    "updated: TIMESTAMP, day: DATE, amount: DECIMAL(9,2), id: STRING, hash: BINARY, "
    "choice: STRUCT<member0: INT, member1: STRING>, micros: TIMESTAMP, clock: STRING>"
)
READING_SQL = "STRUCT<key: STRING, seq: INT, v: BIGINT, ratio: FLOAT, name: STRING, at: TIMESTAMP, tags: ARRAY<STRING>>"


def _expected_rows(case: str, state: str) -> list[dict]:
    rows = next(s["rows"] for _, s in iter_states(load_expected(case)) if s["name"] == state)
    return sorted(rows, key=lambda r: r["key"])


def _comparable(rows: list[dict]) -> list[dict]:
    """Rows in expected.json's JSON form, by key (each key once per state)."""
    return sorted(({c: canonical(r[c]) for c in ("key", "namespace", "value")} for r in rows), key=lambda r: r["key"])


def test_the_avro_cases_are_in_the_corpus():
    assert {"datastream_java_avro_2.3", "datastream_java_avro_1.20"} <= set(AVRO_CASES)


# ----------------------------------------------------------------------------- real savepoints


@pytest.mark.parametrize("case", AVRO_CASES)
def test_snapshots_give_typed_avro_descriptors(case):
    meta = load_state_meta(str(savepoint_dir(case)))
    states = {s.name: s for s in meta.operator(OPERATOR).states}
    profile, reading, readings = (states[n] for n in STATES)
    assert profile.value.kind == "avro" and profile.decode_status == "full"
    assert profile.value.attr("class") == GENERIC_RECORD_CLASS
    assert profile.value.attr("record") == PROFILE_RECORD
    assert profile.value.sql_type() == PROFILE_SQL
    assert reading.value.attr("class") == READING_CLASS and reading.value.sql_type() == READING_SQL
    assert readings.value.kind == "list" and readings.value.child("element").attr("class") == READING_CLASS
    assert profile.value.describe() == f"AVRO {PROFILE_RECORD}"


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("case", AVRO_CASES)
def test_python_api_decodes_exactly(case, state):
    table = SavepointReader(str(savepoint_dir(case))).table(state, OPERATOR)
    expected = _expected_rows(case, state)
    got = _comparable(table.to_pylist())
    assert len(got) == len(expected) > 0
    assert got == _comparable(expected)


def statecat(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "statecat.catalog.cli", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("case", AVRO_CASES)
def test_cli_read_decodes_exactly(case):
    for state in STATES:
        result = statecat("read", str(savepoint_dir(case)), "--state", state, "--operator", OPERATOR)
        assert result.returncode == 0, result.stderr
        got = [json.loads(line) for line in result.stdout.splitlines()]
        assert sorted(got, key=lambda r: r["key"]) == _comparable(_expected_rows(case, state)), state


def test_cli_read_of_one_key():
    case = AVRO_CASES[0]
    want = _expected_rows(case, "profile")[0]
    result = statecat("read", str(savepoint_dir(case)), "--state", "profile", "--key", want["key"])
    assert result.returncode == 0, result.stderr
    assert [json.loads(line) for line in result.stdout.splitlines()] == [want]


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    from statecat.catalog.servers.sessions import session

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return session(
        str(tmp_path_factory.mktemp("statecat_home")),
        conf={"spark.sql.session.timeZone": "UTC", "spark.log.level": "ERROR", "spark.ui.showConsoleProgress": "false"},
    )


@pytest.mark.spark
def test_spark_sql_reads_avro_fields(spark):
    case = AVRO_CASES[0]
    want = _expected_rows(case, "profile")
    df = spark.read.format("flinkstate").option("path", str(savepoint_dir(case))).option("state", "profile").load()
    df.createOrReplaceTempView("avro_profile")
    rows = spark.sql(
        "SELECT key, value.level, CAST(value.amount AS STRING) AS amount, value.last.v AS last_v, "
        "value.per_name AS per_name, value.choice.member0 AS even_v FROM avro_profile"
    ).collect()
    got = sorted((r.key, r.level, r.amount, r.last_v, dict(r.per_name), r.even_v) for r in rows)
    assert got == sorted(
        (
            r["key"],
            r["value"]["level"],
            r["value"]["amount"],
            (r["value"]["last"] or {}).get("v"),
            r["value"]["per_name"],
            r["value"]["choice"]["member0"],
        )
        for r in want
    )


def _copy_with_metadata_edit(case: str, tmp_path: Path, old: bytes, new: bytes) -> Path:
    """A copy of a case's savepoint with one byte string of its _metadata replaced (same length:
    the schema text lies in an inline stream whose handle records its size)."""
    assert len(old) == len(new)
    dst = tmp_path / "savepoint"
    shutil.copytree(savepoint_dir(case), dst)
    metadata = (dst / "_metadata").read_bytes()
    assert metadata.count(old) >= 1, old
    (dst / "_metadata").write_bytes(metadata.replace(old, new))
    return dst


def test_a_damaged_schema_in_a_real_savepoint_leaves_that_state_raw_with_the_reason(tmp_path):
    # The Profile schema's enum loses its symbols list: not a schema Avro (or statecat) reads. The
    # header parser recovers past the snapshot (statemeta/files/headers.py): that state becomes bytes
    # with the reason, the other states still decode.
    case = AVRO_CASES[0]
    damaged = _copy_with_metadata_edit(
        case, tmp_path, b'"symbols":["LOW","MID","HIGH"]', b'"symbolz":["LOW","MID","HIGH"]'
    )
    states = {s.name: s for s in load_state_meta(str(damaged)).operator(OPERATOR).states}
    assert states["profile"].decode_status == "raw"
    reasons = " ".join(states["profile"].raw_reasons)
    assert "expected an Avro writer schema: a list of symbol names for enum statecat.avro.Level" in reasons
    assert states["reading"].decode_status == "full"
    got = _comparable(SavepointReader(str(damaged)).table("reading", OPERATOR).to_pylist())
    assert got == _comparable(_expected_rows(case, "reading"))


def test_damaged_value_bytes_in_a_real_savepoint_name_the_offset(tmp_path):
    # Every Profile value starts with its key string (i32 length, UTF-8); a length of 2^30 in one
    # of them leaves the value's bytes.
    case = AVRO_CASES[0]
    key = _expected_rows(case, "profile")[0]["key"].encode()
    damaged = _copy_with_metadata_edit(
        case, tmp_path, struct.pack(">i", len(key)) + key, struct.pack(">i", 1 << 30) + key
    )
    with pytest.raises(StatecatError) as info:
        SavepointReader(str(damaged)).table("profile", OPERATOR)
    message = str(info.value)
    assert "string length" in message and str(1 << 30) in message
    assert "byte offset" in message


# ----------------------------------------------------------------------------- snapshot bytes


def _varint(n: int) -> bytes:
    """7 bits a byte, low bits first (StringValue lengths and chars, Avro item counts)."""
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string_value(text: str) -> bytes:
    """Flink's StringValue.writeString (varint length + 1, each char a varint)."""
    return _varint(len(text) + 1) + b"".join(_varint(ord(c)) for c in text)


def _snapshot(version: int, payload: bytes) -> bytes:
    name = AVRO_SNAPSHOT.encode()
    return struct.pack(">H", len(name)) + name + struct.pack(">i", version) + payload


def _read_snapshot(data: bytes):
    return SnapshotReader(DataInput.of_bytes(data, "snapshot"), data, 0).versioned()


RECORD = json.dumps(
    {
        "type": "record",
        "name": "R",
        "namespace": "n",
        "fields": [
            {"name": "a", "type": "int"},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y"]}},
            {"name": "u", "type": ["null", "string", "E"]},
            {"name": "xs", "type": {"type": "array", "items": "null"}},
        ],
    }
)


def test_snapshot_versions_2_and_3_carry_class_and_schema():
    utf = _snapshot(2, struct.pack(">H", 3) + b"a.B" + struct.pack(">H", len(RECORD)) + RECORD.encode())
    string_value = _snapshot(3, _string_value("a.B") + _string_value(RECORD))
    for data in (utf, string_value):
        desc = _read_snapshot(data)
        assert (desc.kind, desc.attr("class"), desc.attr("record")) == ("avro", "a.B", "n.R")
        assert (
            desc.sql_type()
            == "STRUCT<a: INT, e: STRING, u: STRUCT<member0: STRING, member1: STRING>, xs: ARRAY<STRING>>"
        )


def test_a_schema_length_past_the_snapshot_is_refused_at_its_offset():
    data = _snapshot(3, _string_value("a.B") + b"\xff\xff\xff\x7f" + b"{}")
    with pytest.raises(FormatError) as info:
        _read_snapshot(data)
    assert info.value.offset == len(_snapshot(3, _string_value("a.B")))
    assert "the Avro schema of at most 2 characters" in info.value.message


@pytest.mark.parametrize(
    "schema, complaint",
    [
        ("{not json", "does not parse"),
        ('{"type": "record", "name": "R", "fields": [{"name": "a", "type": "nosuch"}]}', "unknown name 'nosuch'"),
        ('{"type": "enum", "name": "E"}', "symbol names"),
        ('{"type": "fixed", "name": "F", "size": -1}', "size"),
        ("[]", "at least one branch"),
        ("[" * 100 + "]" * 100, "nested"),
    ],
)
def test_a_damaged_schema_is_a_format_error_with_its_offset(schema, complaint):
    data = _snapshot(3, _string_value("a.B") + _string_value(schema))
    with pytest.raises(FormatError) as info:
        _read_snapshot(data)
    assert complaint in info.value.message and info.value.file == "snapshot"
    assert info.value.offset == len(_snapshot(3, _string_value("a.B")))


def test_a_recursive_record_is_raw_with_the_reason():
    linked = json.dumps({"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]})
    desc = _read_snapshot(_snapshot(3, _string_value("Node") + _string_value(linked)))
    assert desc.kind == "raw" and "contains itself" in desc.attr("reason")


def test_an_exponentially_expanding_schema_is_refused():
    # Each record holds two of the one before: 2^40 types once expanded.
    types: list = [{"type": "record", "name": "T0", "fields": [{"name": "x", "type": "int"}]}]
    for i in range(1, 40):
        types.append(
            {
                "type": "record",
                "name": f"T{i}",
                "fields": [{"name": "a", "type": types[-1]}, {"name": "b", "type": f"T{i - 1}"}],
            }
        )
    with pytest.raises(ValueError, match="types when expanded"):
        parse_schema(json.dumps(types[-1]))


# ----------------------------------------------------------------------------- value bytes


def _decoder(schema: str):
    return build_avro_decoder(avro_descriptor(parse_schema(schema), schema, None))


def _value(a: int, e: int, branch: int, branch_bytes: bytes, nulls: int) -> bytes:
    count = bytes([nulls]) + b"\x00" if nulls else b"\x00"
    return struct.pack(">ii", a, e) + struct.pack(">i", branch) + branch_bytes + count


def test_hand_made_value_decodes():
    value = _value(7, 1, 2, struct.pack(">i", 0), 3)
    assert _decoder(RECORD)(value, 0) == (
        {"a": 7, "e": "Y", "u": {"member0": None, "member1": "X"}, "xs": [None, None, None]},
        len(value),
    )


@pytest.mark.parametrize(
    "value, complaint",
    [
        (_value(7, 2, 0, b"", 0), "symbol index of enum n.E in 0..1, got 2"),
        (_value(7, 0, 3, b"", 0), "union branch index in 0..2, got 3"),
        (_value(7, 0, 1, struct.pack(">i", 99) + b"ab", 0), "string length between 0 and"),
        (_value(7, 0, 0, b"", 0)[:-1], "bytes of Avro value"),
        (struct.pack(">iii", 7, 0, 0) + b"\xff" * 11, "item count of at most 10 bytes"),
        # nulls take no bytes: their count is bounded by MAX_ZERO_WIDTH_ITEMS instead
        (
            struct.pack(">iii", 7, 0, 0) + _varint(MAX_ZERO_WIDTH_ITEMS + 1),
            f"at most {MAX_ZERO_WIDTH_ITEMS} Avro array items",
        ),
    ],
)
def test_damaged_value_bytes_are_decode_errors(value, complaint):
    with pytest.raises(DecodeError, match="expected") as info:
        _decoder(RECORD)(value, 0)
    assert complaint in str(info.value)


def test_an_array_count_beyond_the_bytes_left_is_refused_before_reading():
    decoder = _decoder('{"type": "array", "items": "long"}')
    with pytest.raises(DecodeError, match="at most 1 Avro array items in the bytes left, got a count of 1000"):
        decoder(bytes([0xE8, 0x07]) + struct.pack(">q", 1) + b"\x00", 0)


@pytest.mark.parametrize(
    "logical, raw, value",
    [
        ('{"type": "int", "logicalType": "date"}', struct.pack(">i", -1), -1),
        ('{"type": "int", "logicalType": "time-millis"}', struct.pack(">i", 3_723_004), "01:02:03.004"),
        ('{"type": "long", "logicalType": "time-micros"}', struct.pack(">q", 5), "00:00:00.000005"),
        ('{"type": "long", "logicalType": "local-timestamp-micros"}', struct.pack(">q", -5), -5),
        ('{"type": "long", "logicalType": "timestamp-nanos"}', struct.pack(">q", 5_999), 5),
        (
            '{"type": "fixed", "name": "U", "size": 16, "logicalType": "uuid"}',
            bytes(range(16)),
            "00010203-0405-0607-0809-0a0b0c0d0e0f",
        ),
        (
            '{"type": "fixed", "name": "D", "size": 20, "logicalType": "decimal", "precision": 40, "scale": 3}',
            (-12345).to_bytes(20, "big", signed=True),
            "-12.345",
        ),
        # an invalid decimal (scale above precision) is ignored, as Avro does: plain bytes
        ('{"type": "bytes", "logicalType": "decimal", "precision": 2, "scale": 3}', b"\x00\x00\x00\x01\x07", b"\x07"),
    ],
)
def test_logical_types(logical, raw, value):
    assert _decoder(logical)(raw, 0) == (value, len(raw))


def test_a_time_of_day_out_of_range_is_refused():
    with pytest.raises(DecodeError, match="expected a time of day"):
        _decoder('{"type": "int", "logicalType": "time-millis"}')(struct.pack(">i", -1), 0)


def test_hand_made_value_encodes_back_to_its_bytes():
    from statecat.readers.codecs.encoders import build_encoder
    from statecat.readers.codecs.values import EncodeError

    desc = avro_descriptor(parse_schema(RECORD), RECORD, None)
    value = _value(7, 1, 2, struct.pack(">i", 0), 3)
    encode = build_encoder(desc)
    out = bytearray()
    encode(_decoder(RECORD)(value, 0)[0], out)
    assert bytes(out) == value
    with pytest.raises(EncodeError, match="exactly one member set"):
        encode({"a": 1, "e": "X", "u": {"member0": "s", "member1": "X"}, "xs": []}, bytearray())
    with pytest.raises(EncodeError, match="a symbol of enum n.E"):
        encode({"a": 1, "e": "Z", "u": None, "xs": []}, bytearray())
