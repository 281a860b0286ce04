"""State TTL's last-access timestamps (readers/codecs/ttl.py) as the ``ttl_timestamp`` column: read through
every layout, the Python API, the key view, diffs, ``statecat write`` and Spark's ``flinkstate`` source.

Ground truth for a ValueState: the successive DataStream job (tests/flink_jobs/datastream_successive.py)
writes its TTL state ``last_tag`` (processing time, OnCreateAndWrite) on every ``add`` record, so its
input says which keys each phase wrote, and a phase's writes come after every write of the phases
before it. ListState and MapState: the same job's ``items`` and ``per_tag``, their real bytes stamped
by this test as TtlSerializer lays out list elements and map values, read back as TTL-wrapped types.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import io
import json
import os
import struct
import subprocess
import sys
import time

import pytest

from statecat.catalog.spark.edits import ChangesEditor
from statecat.readers import SavepointReader, diff_savepoints
from statecat.readers.codecs.decoders import LIST_ELEMENT_DELIMITER, build_decoder
from statecat.readers.codecs.encoders import TtlValue, encode
from statecat.readers.codecs.ttl import heap_value_decoder, split
from statecat.statemeta.model import StateMeta, load_state_meta
from statecat.statemeta.types import TypeDescriptor
from statecat.writers.savepoint_writer import write_savepoint as write_canonical
from tests.fixtures.edits import RowChanges, write_savepoint
from tests.fixtures.expected import CASES, case_dir, is_successive, phases
from tests.test_write_sql import _stored_value

# The successive DataStream job's cases: Flink 1.20, 2.0 and 2.3
SUCCESSIVE = [case for case in CASES if is_successive(case) and case.startswith("datastream_successive_")]
CASE = "datastream_successive_2.3"
OPERATOR = "keyed-fn"
EARLIEST = int(dt.datetime(2020, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)
STAMP_BASE = 1_600_000_000_000  # the stamps this test writes into items and per_tag


def _ttl_rows(path) -> dict[str, tuple[str, int]]:
    rows = SavepointReader(str(path)).table("last_tag", OPERATOR).to_pylist()
    return {r["key"]: (r["value"], r["ttl_timestamp"]) for r in rows}


def _added_keys(case: str, phase: str) -> set[str]:
    """The keys an ``add`` line of the phase's input writes (each one rewrites last_tag)."""
    keys = set()
    for name in sorted(os.listdir(case_dir(case) / "input" / phase)):
        for line in (case_dir(case) / "input" / phase / name).read_text().splitlines():
            key, _, _, op = line.split(",")
            if op == "add":
                keys.add(key)
    return keys


# ----------------------------------------------------------------------------- reading


def test_only_states_with_ttl_get_the_column():
    assert len(SUCCESSIVE) >= 3
    reader = SavepointReader(str(phases(CASE)[-1]["savepoint"]))
    assert reader.schema("last_tag", OPERATOR).names == ["key", "namespace", "value", "ttl_timestamp"]
    assert str(reader.schema("last_tag", OPERATOR).field("ttl_timestamp").type) == "int64"
    for name in ("count", "items", "per_tag", "max_v"):
        assert reader.schema(name, OPERATOR).names == ["key", "namespace", "value"]


@pytest.mark.parametrize("case", SUCCESSIVE)
def test_timestamps_are_the_jobs_writes_in_savepoints_and_checkpoints(case):
    previous: dict[str, tuple[str, int]] | None = None
    for phase in phases(case):
        rows = _ttl_rows(phase["savepoint"])
        assert rows
        # The incremental RocksDB checkpoint of the same moment (native SST reader) agrees exactly.
        assert _ttl_rows(phase["checkpoint"]) == rows
        written_by = os.path.getmtime(phase["savepoint"] / "_metadata") * 1000
        stamps = [stamp for _, stamp in rows.values()]
        assert EARLIEST <= min(stamps) and max(stamps) <= written_by
        if previous is not None:
            added = _added_keys(case, phase["phase"])
            for key, (_, stamp) in rows.items():
                if key in added:  # written in this phase: after every write before it
                    assert stamp > max(s for _, s in previous.values()), key
                elif key in previous:  # untouched: the same timestamp
                    assert stamp == previous[key][1], key
            assert added & rows.keys() and (rows.keys() - added) & previous.keys()
        previous = rows


def test_python_api_batches_and_one_pass_reads_carry_the_column():
    reader = SavepointReader(str(phases(CASE)[-1]["savepoint"]))
    table = reader.table("last_tag", OPERATOR).to_pylist()
    from_batches = [row for batch in reader.batches("last_tag", OPERATOR, batch_rows=7) for row in batch.to_pylist()]
    assert from_batches == table
    one_pass = reader.operator_tables(OPERATOR, ["last_tag", "count"])
    assert one_pass["last_tag"].to_pylist() == table
    key = table[3]["key"]
    assert [r for b in reader.batches("last_tag", OPERATOR, keys=[key]) for r in b.to_pylist()] == [table[3]]


# ----------------------------------------------------------------------------- list and map TTL


class _Stamper:
    """Wraps every element of ``items`` and every non-null map value of ``per_tag`` as TtlSerializer
    writes them: element i of a list gets STAMP_BASE + i, a map value v (a long) STAMP_BASE + v."""

    def __init__(self, meta: StateMeta) -> None:
        op = meta.operator(OPERATOR)
        self.op_id = op.id
        self.max_parallelism = op.max_parallelism
        self.element = build_decoder(op.state("items").value.child("element"))

    def key_groups(self, operator_id):
        return frozenset(range(self.max_parallelism)) if operator_id == self.op_id else frozenset()

    def operator_states(self, operator_id):
        return frozenset()

    def edit_elements(self, operator, state, subtask, elements):
        return elements

    def edit(self, operator, key_group, entries):
        out = {}
        items = []
        for key, value in entries.get("items", []):
            parts, pos, i = [], 0, 0
            while pos < len(value):
                _, end = self.element(value, pos)
                parts.append(struct.pack(">q", STAMP_BASE + i) + value[pos:end])
                pos, i = end + 1, i + 1  # past the delimiter
            items.append((key, bytes([LIST_ELEMENT_DELIMITER]).join(parts)))
        per_tag = []
        for key, value in entries.get("per_tag", []):
            if value[:1] == b"\x00":
                (v,) = struct.unpack(">q", value[1:])
                value = b"\x00" + struct.pack(">q", STAMP_BASE + v) + value[1:]
            per_tag.append((key, value))
        out["items"], out["per_tag"] = items, per_tag
        return out


def _with_ttl(meta: StateMeta) -> StateMeta:
    """``meta`` with items and per_tag typed as a TTL ListState and MapState."""

    def ttl(desc: TypeDescriptor) -> TypeDescriptor:
        return TypeDescriptor.of("ttl", [("value", desc)])

    ops = []
    for op in meta.operators:
        states = []
        for st in op.states:
            if st.name == "items":
                st = dataclasses.replace(
                    st, value=dataclasses.replace(st.value, fields=(("element", ttl(st.value.child("element"))),))
                )
            elif st.name == "per_tag":
                fields = (("key", st.value.child("key")), ("value", ttl(st.value.child("value"))))
                st = dataclasses.replace(st, value=dataclasses.replace(st.value, fields=fields))
            states.append(st)
        ops.append(dataclasses.replace(op, states=tuple(states)))
    return dataclasses.replace(meta, operators=tuple(ops))


@pytest.fixture(scope="module")
def stamped(tmp_path_factory):
    """(plain source meta, the stamped savepoint's meta read with TTL types)."""
    source = load_state_meta(str(phases(CASE)[-1]["savepoint"]))
    out = tmp_path_factory.mktemp("ttl") / "stamped"
    write_canonical(source, str(out), editor=_Stamper(source))
    return source, _with_ttl(load_state_meta(str(out)))


def test_list_and_map_states_give_a_timestamp_per_element_and_per_entry(stamped):
    source, meta = stamped
    plain, reader = SavepointReader(source), SavepointReader(meta)
    assert str(reader.schema("items", OPERATOR).field("ttl_timestamp").type) == "list<item: int64>"
    assert str(reader.schema("per_tag", OPERATOR).field("ttl_timestamp").type) == "map<string, int64>"
    items = reader.table("items", OPERATOR).to_pylist()
    assert [{k: r[k] for k in ("key", "namespace", "value")} for r in items] == plain.table(
        "items", OPERATOR
    ).to_pylist()
    assert items and all(r["ttl_timestamp"] == [STAMP_BASE + i for i in range(len(r["value"]))] for r in items)
    assert any(len(r["value"]) > 1 for r in items)
    per_tag = reader.table("per_tag", OPERATOR).to_pylist()
    assert [{k: r[k] for k in ("key", "namespace", "value")} for r in per_tag] == plain.table(
        "per_tag", OPERATOR
    ).to_pylist()
    assert per_tag and all(r["ttl_timestamp"] == [(t, STAMP_BASE + v) for t, v in r["value"]] for r in per_tag)


def test_heap_layout_lists_and_maps_split_into_values_and_timestamps():
    """A heap checkpoint stores a TTL ListState as ListSerializer(TtlSerializer) and a MapState as
    MapSerializer(key, TtlSerializer): bytes from statecat's encoders, as Flink writes them."""
    string, long_ = TypeDescriptor.of("string"), TypeDescriptor.of("long")
    ttl = TypeDescriptor.of("ttl", [("value", long_)])
    list_state = dataclasses.make_dataclass("S", ["kind", "state_type", "value"])
    as_list = list_state(
        "keyed", "LIST", TypeDescriptor.of("list", [("element", TypeDescriptor.of("ttl", [("value", string)]))])
    )
    data = encode(
        TypeDescriptor.of("list", [("element", as_list.value.child("element"))]), [TtlValue("a", 5), TtlValue("b", -7)]
    )
    got, end = heap_value_decoder(as_list, "list")(data, 0)
    assert end == len(data) and split("list", [got]) == ([["a", "b"]], [[5, -7]])
    as_map = list_state("keyed", "MAP", TypeDescriptor.of("map", [("key", string), ("value", ttl)]))
    data = encode(as_map.value, [("x", TtlValue(3, 1_700_000_000_123)), ("y", None)])
    got, end = heap_value_decoder(as_map, "map")(data, 0)
    assert end == len(data)
    assert split("map", [got]) == ([[("x", 3), ("y", None)]], [[("x", 1_700_000_000_123), ("y", None)]])


def test_writing_list_and_map_states_keeps_sets_or_stamps_each_timestamp(stamped, tmp_path):
    _, meta = stamped
    reader = SavepointReader(meta)
    items = {r["key"]: r for r in reader.table("items", OPERATOR).to_pylist()}
    per_tag = {r["key"]: r for r in reader.table("per_tag", OPERATOR).to_pylist()}
    k_list = next(k for k, r in items.items() if len(r["value"]) > 1)
    n = len(items[k_list]["value"])
    k_map, k_map2 = [k for k, r in per_tag.items() if r["value"]][:2]
    kept_tag, kept_value = per_tag[k_map]["value"][0]
    before = int(time.time() * 1000)
    # The rows Spark gives for these UPDATEs (the TTL states here are typed in memory, which the
    # flinkstate source cannot see): a SET of value keeps the ttl_timestamp column as it was.
    # UPDATE items SET value = array(value[0], …, 'new:1'): the timestamps go by position, the
    # element appended has none and gets the write time.
    old_list = items[k_list]
    new_list = {**old_list, "value": old_list["value"] + ["new:1"]}
    # UPDATE per_tag SET value = map(kept, v, 'brand_new', 9): the kept key keeps its timestamp.
    old_map = per_tag[k_map]
    new_map = {**old_map, "value": [(kept_tag, kept_value), ("brand_new", 9)]}
    # UPDATE per_tag SET value = map('only', 1), ttl_timestamp = map('only', 42): given, it wins.
    old_map2 = per_tag[k_map2]
    new_map2 = {**old_map2, "value": [("only", 1)], "ttl_timestamp": [("only", 42)]}
    changes = [
        RowChanges.of(meta, OPERATOR, "items", [old_list], [new_list]),
        RowChanges.of(meta, OPERATOR, "per_tag", [old_map, old_map2], [new_map, new_map2]),
    ]
    out = tmp_path / "edited"
    write_canonical(meta, str(out), editor=ChangesEditor(meta, changes))
    after = int(time.time() * 1000)
    edited = SavepointReader(_with_ttl(load_state_meta(str(out))))
    new_items = {r["key"]: r for r in edited.table("items", OPERATOR).to_pylist()}
    new_tags = {r["key"]: r for r in edited.table("per_tag", OPERATOR).to_pylist()}
    stamps = new_items[k_list]["ttl_timestamp"]
    assert new_items[k_list]["value"] == items[k_list]["value"] + ["new:1"]
    assert stamps[:n] == items[k_list]["ttl_timestamp"] and before <= stamps[n] <= after
    stamps = dict(new_tags[k_map]["ttl_timestamp"])
    assert stamps[kept_tag] == dict(per_tag[k_map]["ttl_timestamp"])[kept_tag]
    assert before <= stamps["brand_new"] <= after
    assert new_tags[k_map2]["ttl_timestamp"] == [("only", 42)]
    untouched = [k for k in items if k != k_list]
    assert untouched and all(new_items[k] == items[k] for k in untouched)
    assert all(new_tags[k] == per_tag[k] for k in per_tag if k not in (k_map, k_map2))


# ----------------------------------------------------------------------------- writing a ValueState


def test_write_keeps_sets_or_stamps_the_value_states_timestamp(tmp_path):
    src = phases(CASE)[-1]["savepoint"]
    rows = _ttl_rows(src)
    edited, restamped, nulled, *_ = sorted(rows)
    threshold = sorted(stamp for _, stamp in rows.values())[len(rows) // 2]
    doomed = {k for k, (_, stamp) in rows.items() if stamp < threshold} - {edited, restamped, nulled}
    before = int(time.time() * 1000)
    result = write_savepoint(
        str(src),
        str(tmp_path / "out"),
        sql=[
            f"UPDATE last_tag SET value = 'edited' WHERE key = '{edited}'",
            f"UPDATE last_tag SET ttl_timestamp = 1234567890123 WHERE key = '{restamped}'",
            f"UPDATE last_tag SET ttl_timestamp = NULL WHERE key = '{nulled}'",
            f"DELETE FROM last_tag WHERE ttl_timestamp < {threshold} AND key NOT IN ('{edited}', '{restamped}', "
            f"'{nulled}')",
            "INSERT INTO last_tag (key, value, ttl_timestamp) VALUES ('k_given', 'g', 42)",
        ],
    )
    after = int(time.time() * 1000)
    assert result.statements[-2].matched == len(doomed) > 0
    got = _ttl_rows(tmp_path / "out")
    assert got[edited] == ("edited", rows[edited][1])  # an edited value keeps its timestamp
    assert got[restamped] == (rows[restamped][0], 1234567890123)
    assert got[nulled][0] == rows[nulled][0] and before <= got[nulled][1] <= after
    assert got["k_given"] == ("g", 42)
    assert not doomed & got.keys()
    untouched = set(rows) - doomed - {edited, restamped, nulled}
    assert untouched and all(got[k] == rows[k] for k in untouched)
    # an untouched row keeps its stored bytes, timestamp and all
    some = sorted(untouched)[0]
    assert _stored_value(tmp_path / "out", "last_tag", some) == _stored_value(src, "last_tag", some)
    diff = diff_savepoints(str(src), str(tmp_path / "out"), states=["last_tag"])
    totals = diff.totals()
    assert (totals["added"], totals["removed"], totals["changed"], totals["restamped"]) == (1, len(doomed), 1, 2)


# ----------------------------------------------------------------------------- key view and diff


def statecat(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "statecat.catalog.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_key_view_shows_the_timestamp_of_ttl_states_only():
    path = phases(CASE)[-1]["savepoint"]
    rows = _ttl_rows(path)
    key = sorted(rows)[0]
    view = SavepointReader(str(path)).key(key)
    by_state = {r.state: r for r in view.rows}
    assert by_state["last_tag"].ttl_timestamp == rows[key][1]
    assert all(r.ttl_timestamp is None for r in view.rows if r.state != "last_tag")
    assert view.to_pandas().set_index("state").loc["last_tag", "ttl_timestamp"] == rows[key][1]
    as_csv = list(csv.reader(io.StringIO(statecat("key", str(path), key, "--format", "csv").stdout)))
    assert as_csv[0] == ["operator", "state", "namespace", "value", "ttl_timestamp"]
    assert [r[-1] for r in as_csv[1:] if r[1] == "last_tag"] == [str(rows[key][1])]
    as_json = json.loads(statecat("key", str(path), key, "--format", "json").stdout)
    assert [r["ttl_timestamp"] for r in as_json["rows"] if r["state"] == "last_tag"] == [rows[key][1]]


def test_diff_shows_timestamps_and_counts_a_new_timestamp_alone_as_restamped():
    a, b = (phases(CASE)[i]["savepoint"] for i in (0, 1))
    old, new = _ttl_rows(a), _ttl_rows(b)
    diff = diff_savepoints(str(a), str(b), states=["last_tag"])
    changes = list(diff.changes())
    changed = [c for c in changes if c.change == "changed"]
    assert changed and all(
        (c.old_ttl_timestamp, c.new_ttl_timestamp) == (old[c.key][1], new[c.key][1]) for c in changed
    )
    assert all(c.new_ttl_timestamp == new[c.key][1] for c in changes if c.change == "added")
    assert all(c.old_ttl_timestamp == old[c.key][1] for c in changes if c.change == "removed")
    same_value = [k for k in old.keys() & new.keys() if old[k][0] == new[k][0]]
    (entry,) = diff.summary()
    assert entry.changed == len(old.keys() & new.keys()) - len(same_value)
    assert entry.restamped == sum(old[k][1] != new[k][1] for k in same_value) > 0
    lines = statecat("diff", str(a), str(b), "--state", "last_tag", "--format", "csv").stdout.splitlines()
    assert lines[0].endswith(",old_ttl_timestamp,new_ttl_timestamp")


# ----------------------------------------------------------------------------- Spark SQL

SPARK_QUERY = """
import json, sys
from statecat.catalog.servers.sessions import session
spark = session(sys.argv[1], quiet=True)
spark.read.format("flinkstate").option("path", sys.argv[2]).option("state", "last_tag").load() \\
    .createOrReplaceTempView("last_tag")
frame = spark.sql("SELECT key, ttl_timestamp FROM last_tag WHERE ttl_timestamp IS NOT NULL")
print(json.dumps({"type": frame.schema["ttl_timestamp"].dataType.simpleString(),
                  "rows": [[r["key"], r["ttl_timestamp"]] for r in frame.collect()]}))
spark.stop()
"""


@pytest.mark.spark
def test_flinkstate_source_answers_sql_on_the_timestamp(tmp_path):
    path = phases(CASE)[-1]["savepoint"]
    done = subprocess.run(
        [sys.executable, "-c", SPARK_QUERY, str(tmp_path / "home"), str(path)],
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["type"] == "bigint"
    assert dict(got["rows"]) == {k: stamp for k, (_, stamp) in _ttl_rows(path).items()}
