"""Decoded FLIP-27 source positions: SourceReaderState splits and the split enumerator's state.

Evidence (tests/fixtures/source_positions/README.md):
* filesource_2.3: a real Flink 2.3 savepoint taken while a FileSource was half-way through a.txt
  (b.txt still pending) and a NumberSequenceSource half-way through its range; the job's keyed
  counters say how many records each source had emitted before the barrier, and the input files
  say which line and byte offset that is;
* kafka: bytes written by the Kafka connector's own serializer classes for known inputs, with
  what the connector's own deserializers read back from them;
* every fixture case: its enumerator state holds the paths expected.json names (raw_contains).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from statecat.readers import SavepointReader
from statecat.readers.codecs.arrow_types import state_schema
from statecat.readers.codecs.source_splits import (
    decode_enumerator,
    decode_split,
    enumerator_decoder,
    split_element_decoder,
)
from statecat.statemeta.source_splits import SOURCE_READER_STATE
from tests.acceptance import find_operator
from tests.fixtures.expected import CASES, iter_states, load_expected, savepoint_dir

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "source_positions"
FILESOURCE = FIXTURES / "filesource_2.3"
KAFKA = FIXTURES / "kafka"
LONG_MIN = -(1 << 63)


@pytest.fixture(scope="module")
def filesource():
    expected = json.loads((FILESOURCE / "expected.json").read_text())
    return SavepointReader(str(FILESOURCE / "savepoint")), expected


def _value(reader, state, operator):
    rows = reader.table(state, operator).to_pylist()
    assert len(rows) == 1, rows
    return rows[0]["value"]


def _input_lines(name: str) -> list[bytes]:
    return (FILESOURCE / "input" / name).read_bytes().splitlines(keepends=True)


def test_file_split_position_is_the_lines_the_job_had_read(filesource):
    reader, expected = filesource
    names = expected["operators"]
    count = _value(reader, "count", names["file_count"])
    last = _value(reader, "last", names["file_count"])
    # Which input line the counter stopped at, from the input itself.
    where = [
        (name, i)
        for name in expected["files"]
        for i, line in enumerate(_input_lines(name))
        if line == (last + "\n").encode()
    ]
    assert len(where) == 1, last
    name, index = where[0]
    assert count == index + 1  # the job read the file in order, one line per record

    [split] = reader.table(SOURCE_READER_STATE, names["file_source"]).to_pylist()
    value = split["value"]
    assert value["connector"] == "file" and value["reason"] is None and value["split_version"] == 1
    file = value["file"]
    size = (FILESOURCE / "input" / name).stat().st_size
    assert file["path"].startswith("file:/") and file["path"].endswith(f"/input/{name}")
    assert (file["offset"], file["length"], file["file_size"], file["hostnames"]) == (0, size, size, [])
    assert value["split_id"] == file["split_id"]
    # TextLineInputFormat checkpoints no byte offset (-1, NO_OFFSET): Flink resumes at the split's
    # offset and skips records_to_skip lines, which must be exactly the lines emitted.
    assert file["reader_offset"] == -1
    assert file["records_to_skip"] == count
    lines = _input_lines(name)
    assert 0 < count < len(lines), "the savepoint must land mid-file"
    resume_at = file["offset"] + sum(len(line) for line in lines[: file["records_to_skip"]])
    assert resume_at == sum(len(line) for line in lines[: index + 1])  # the byte after the last line read
    assert 0 < resume_at < size
    # the element's bytes as stored: version + length + the split
    assert value["raw"][:8] == (1).to_bytes(4, "big") + (len(value["raw"]) - 8).to_bytes(4, "big")


def test_file_enumerator_pending_split_and_processed_paths(filesource):
    reader, expected = filesource
    value = _value(reader, "_coordinator", expected["operators"]["file_source"])
    assert (value["coordinator_version"], value["enumerator_version"], value["connector"]) == (1, 1, "file")
    assert value["reason"] is None and value["raw"][:4] == (1).to_bytes(4, "big")
    file = value["file"]
    assert file["split_version"] == 1
    [split] = reader.table(SOURCE_READER_STATE, expected["operators"]["file_source"]).to_pylist()
    reading = split["value"]["file"]["path"].rsplit("/", 1)[1]
    [pending] = file["pending_splits"]  # parallelism 1: the reader asks for one split at a time
    others = set(expected["files"]) - {reading}
    assert pending["path"].rsplit("/", 1)[1] in others
    size = expected["files"][pending["path"].rsplit("/", 1)[1]]["bytes"]
    assert (pending["offset"], pending["length"], pending["file_size"]) == (0, size, size)
    assert pending["reader_offset"] is None and pending["records_to_skip"] is None  # not started
    assert sorted(p.rsplit("/", 1)[1] for p in file["processed_paths"]) == sorted(expected["files"])
    assert all(p.startswith("file:/") for p in file["processed_paths"])


def test_number_sequence_split_is_the_next_number(filesource):
    reader, expected = filesource
    names = expected["operators"]
    count = _value(reader, "count", names["number_count"])
    largest = _value(reader, "max", names["number_count"])
    assert largest == count - 1  # numbers 0.. arrive in order on one subtask
    [split] = reader.table(SOURCE_READER_STATE, names["number_source"]).to_pylist()
    value = split["value"]
    assert value["connector"] == "number_sequence" and value["reason"] is None
    assert value["number_sequence"] == {"from_value": count, "to_value": expected["numbers"] - 1}
    assert 0 < count < expected["numbers"]
    enumerator = _value(reader, "_coordinator", names["number_source"])
    # parallelism 1: the one split is assigned, nothing remains; four bytes of "0 splits" also
    # read as an empty Kafka v1 enumerator state, which the reason says
    assert enumerator["number_sequence"] == {"remaining_splits": []}
    assert enumerator["connector"] is None and "number_sequence" in enumerator["reason"]


def _kafka_expected_split(entry: dict) -> dict:
    markers_start = {-1: "latest", -2: "earliest", -3: "committed", LONG_MIN: "migrated"}
    markers_stop = {-1: "latest", -3: "committed"}
    stop = entry["stopping_offset"]
    return {
        "topic": entry["topic"],
        "partition": entry["partition"],
        "starting_offset": entry["starting_offset"],
        "starting_marker": markers_start.get(entry["starting_offset"]),
        "stopping_offset": None if stop == LONG_MIN else stop,
        "stopping_marker": markers_stop.get(stop),
    }


def test_kafka_splits_from_the_connector_serializer():
    expected = json.loads((KAFKA / "expected.json").read_text(encoding="utf-8"))
    assert len(expected["reader_splits"]) == 4
    for entry in expected["reader_splits"]:
        element = (KAFKA / entry["file"]).read_bytes()
        value, end = split_element_decoder(element, 0)
        assert end == len(element)
        assert value["connector"] == "kafka" and value["reason"] is None, value["reason"]
        assert value["split_version"] == entry["split_version"] == 0
        assert value["kafka"] == _kafka_expected_split(entry)
        assert value["split_id"] == f"{entry['topic']}-{entry['partition']}"
        assert value["raw"] == element[4:]


def test_kafka_enumerator_states_from_the_connector_serializer():
    expected = json.loads((KAFKA / "expected.json").read_text(encoding="utf-8"))
    assert [e["enumerator_version"] for e in expected["coordinator"]] == [3, 2, 1]
    for entry in expected["coordinator"]:
        blob = (KAFKA / entry["file"]).read_bytes()
        value, end = enumerator_decoder(blob, 0)
        assert end == len(blob) and value["raw"] == blob
        assert (value["coordinator_version"], value["enumerator_version"]) == (1, entry["enumerator_version"])
        assert value["connector"] == "kafka" and value["reason"] is None, value["reason"]
        kafka = value["kafka"]
        assert kafka["initial_discovery_finished"] == entry["initial_discovery_finished"]
        assert kafka["split_version"] == (0 if entry["enumerator_version"] == 3 else None)
        want = []
        for p in entry["partitions"]:
            split = _kafka_expected_split(p)
            if entry["enumerator_version"] < 3:  # no offsets stored: the connector restores them MIGRATED
                assert p["starting_offset"] == LONG_MIN
                split.update(starting_offset=None, starting_marker=None)
            want.append({**split, "status": p["status"]})
        order = lambda p: (p["topic"], p["partition"])  # noqa: E731 - the connector keeps a HashSet
        assert sorted(kafka["partitions"], key=order) == sorted(want, key=order)
    statuses = {p["topic"] + str(p["partition"]): p["status"] for p in expected["coordinator"][0]["partitions"]}
    assert sorted(statuses.values()) == ["ASSIGNED", "ASSIGNED", "UNASSIGNED"]


def test_unknown_connectors_stay_bytes_with_the_reason(filesource):
    reader, expected = filesource
    [split] = reader.table(SOURCE_READER_STATE, expected["operators"]["file_source"]).to_pylist()
    real = split["value"]["raw"]
    # another serializer version: no known connector writes it
    other = (7).to_bytes(4, "big") + real[4:]
    value = decode_split(other)
    assert value["connector"] is None and value["raw"] == other
    assert value["file"] is None and value["kafka"] is None and value["number_sequence"] is None
    assert "version 7" in value["reason"] and "file v1" in value["reason"]
    # a damaged split of a known version: bytes kept, why it is not a FileSourceSplit said
    cut = real[:-3]
    value = decode_split(cut)
    assert value["connector"] is None and value["raw"] == cut and "file:" in value["reason"]
    # coordinator bytes that are no SourceCoordinator checkpoint
    blob = _value(reader, "_coordinator", expected["operators"]["file_source"])["raw"]
    value = decode_enumerator(blob[:-1])
    assert value["connector"] is None and value["raw"] == blob[:-1]
    assert "not a source coordinator's checkpoint" in value["reason"]
    value = decode_enumerator((1).to_bytes(4, "big") + (42).to_bytes(4, "big") + blob[8:])
    assert value["connector"] is None and "version 42" in value["reason"]


def test_fixture_enumerators_hold_their_input_paths():
    """Every case's coordinator decodes as a FileSource enumerator with the paths expected.json
    names (Flink 1.15, 1.20, 2.0, 2.3; SQL filesystem tables and DataStream FileSources)."""
    checked = 0
    for case in CASES:
        expected = load_expected(case)
        reader = SavepointReader(str(savepoint_dir(case)))
        for op_expected, state in iter_states(expected):
            if state["kind"] != "coordinator":
                continue
            op = find_operator(reader.meta, op_expected)
            value = _value(reader, "_coordinator", op.id)
            assert value["connector"] == "file", (case, value["reason"])
            paths = value["file"]["processed_paths"] + [s["path"] for s in value["file"]["pending_splits"]]
            for text in state["raw_contains"]:
                assert any(text in p for p in paths), (case, text, paths)
            splits = reader.table(SOURCE_READER_STATE, op.id).to_pylist()
            assert splits == [] or all(s["value"]["connector"] == "file" for s in splits)
            checked += 1
    assert checked >= len(CASES)


def test_schema_is_the_same_for_every_source():
    """One column type for every connector, known before any bytes are read."""
    schemas = set()
    for path in [FILESOURCE / "savepoint", savepoint_dir("sql_groupby_hashmap_1.15"), savepoint_dir("sql_join_2.3")]:
        reader = SavepointReader(str(path))
        for op in reader.meta.operators:
            for state in op.states:
                if state.name in (SOURCE_READER_STATE, "_coordinator"):
                    schemas.add((state.name, state_schema(state).field("value").type))
                    assert state.decode_status == "full"
    by_name = {}
    for name, typ in schemas:
        by_name.setdefault(name, set()).add(typ)
    assert {name: len(types) for name, types in by_name.items()} == {SOURCE_READER_STATE: 1, "_coordinator": 1}
    split_type = next(iter(by_name[SOURCE_READER_STATE]))
    assert [f.name for f in split_type] == [
        "connector",
        "split_version",
        "split_id",
        "file",
        "kafka",
        "number_sequence",
        "raw",
        "reason",
    ]
    assert split_type.field("raw").type == pa.binary()


@pytest.mark.spark
def test_positions_in_spark_sql(tmp_path_factory, filesource):
    """The same positions through the catalog: nested struct columns in Spark SQL."""
    from statecat.catalog import attach, sql
    from tests.test_catalog import attached_spark

    reader, expected = filesource
    spark = attached_spark(tmp_path_factory)
    result = attach(spark, [str(FILESOURCE / "savepoint")])
    assert result.failed == []
    [database] = result.materialised
    tables = {r.tableName for r in sql(spark, f"SHOW TABLES IN {database}").collect()}
    split_tables = sorted(t for t in tables if t.endswith("sourcereaderstate"))
    file_table = next(t for t in split_tables if "file" in t)
    [row] = sql(
        spark,
        f"SELECT subtask, value.connector, value.file.path, value.file.records_to_skip, "
        f"value.file.reader_offset, length(value.raw) FROM {database}.{file_table}",
    ).collect()
    count = _value(reader, "count", expected["operators"]["file_count"])
    assert (row[0], row[1], row[3], row[4]) == (0, "file", count, -1) and row[2].endswith(".txt") and row[5] > 8
    coordinator = next(t for t in tables if "file" in t and t.endswith("coordinator"))
    [row] = sql(
        spark,
        f"SELECT value.connector, size(value.file.pending_splits), "
        f"size(value.file.processed_paths) FROM {database}.{coordinator}",
    ).collect()
    assert tuple(row) == ("file", 1, len(expected["files"]))


def test_damaged_positions_are_kept_as_bytes_never_raise(filesource):
    """Seeded damage (flips, overwrites, cuts, insertions) of real split and enumerator bytes: the
    decoders return the bytes with a reason or a decoded value, never an exception."""
    import random

    reader, expected = filesource
    names = expected["operators"]
    seeds = [
        reader.table(SOURCE_READER_STATE, names[n]).to_pylist()[0]["value"]["raw"]
        for n in ("file_source", "number_source")
    ]
    blobs = [
        _value(reader, "_coordinator", names["file_source"])["raw"],
        (KAFKA / "coordinator_v3.bin").read_bytes(),
        (KAFKA / "coordinator_v2.bin").read_bytes(),
    ]
    rng = random.Random(11)
    outcomes = set()
    for i in range(3000):
        decode, data = (decode_split, rng.choice(seeds)) if i % 2 else (decode_enumerator, rng.choice(blobs))
        data = bytearray(data)
        at = rng.randrange(len(data))
        kind = rng.choice(("flip", "byte", "cut", "insert", "max"))
        if kind == "flip":
            data[at] ^= 1 << rng.randrange(8)
        elif kind == "byte":
            data[at] = rng.randrange(256)
        elif kind == "cut":
            del data[at:]
        elif kind == "insert":
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        else:
            data[at : at + 4] = b"\x7f\xff\xff\xff"
        value = decode(bytes(data))
        assert value["raw"] == bytes(data)
        assert (value["connector"] is not None) or value["reason"], value
        outcomes.add(value["connector"] is None)
    assert outcomes == {True, False}  # both kept-as-bytes and still-decodable damage occurred
