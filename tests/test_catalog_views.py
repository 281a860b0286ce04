"""Per-state sizes (statecat.readers.scans.state_bytes), state_meta's entries/bytes/operator_bytes, and the
catalog-wide tables statecat.states / statecat.operators.

Ground truth: entries from the fixtures' expected.json (written from the jobs' input); bytes from
the stream sizes and key-group offsets in _metadata, less the framing readers/scans/state_bytes.py documents.
"""

from __future__ import annotations

import os
import sys

import pytest

from tests.acceptance import find_operator
from tests.fixtures.expected import CASES, CASES_DIR, iter_states, load_expected, savepoint_dir

END_MARKER = 2  # bytes closing each non-empty key-group
BROADCAST_MODE = 2  # OperatorStateHandle.Mode.BROADCAST's ordinal
# Attached first, then more: the catalog-wide tables must follow without any refresh.
FIRST_CASES = ["sql_groupby_hashmap_2.3", "sql_window_2.3"]
MORE_CASES = ["sql_join_2.3", "datastream_thread_2.3", "sql_types_2.3"]


def _measured(state) -> bool:
    """Keyed states in heap-checkpoint key-groups have no per-state bytes (readers/scans/state_bytes.py)."""
    return all(getattr(loc, "layout", "canonical") == "canonical" for loc in state.locations) or not state.is_keyed


def _meta(case):
    from statecat.statemeta.model import load_state_meta

    return load_state_meta(str(savepoint_dir(case)))


def probe_state_bytes(case) -> dict[tuple[str, str], tuple[int | None, int, int]]:
    """(operator label, state name) -> (entries, bytes, operator_bytes), measured without statecat's
    readers: the fixtures' own _metadata parser (tests/fixtures/savepoint_probe.py) and a plain
    walk of the key-group framing below. Uncompressed savepoints only. StateMeta gives only the
    state names of a keyed stream's state ids."""
    import struct

    from statecat.statemeta.model import load_state_meta
    from tests.fixtures.savepoint_probe import parse_metadata

    directory = savepoint_dir(case)
    meta = {op.id: op for op in load_state_meta(str(directory), use_state_info=False).operators}
    out = {}
    for op in parse_metadata(directory / "_metadata").operators:
        label = op.uid or op.name or op.id
        total = sum(len(stream.inline) if stream.inline is not None else stream.size for stream in op.streams())
        names = {loc.state_id: s.name for s in meta[op.id].states if s.is_keyed for loc in s.locations}
        sizes: dict[str, list] = {s.name: [0, 0] for s in meta[op.id].states}
        for subtask in op.subtasks:
            for handle in subtask.keyed_state:
                data = handle.stream.read(directory)
                starts = sorted(o for o in handle.offsets if o > 0)
                for start, end in zip(starts, starts[1:] + [len(data)]):
                    (state_id,) = struct.unpack_from(">H", data, start)
                    run, pos = start, start + 2
                    while True:
                        (key_length,) = struct.unpack_from(">i", data, pos)
                        (value_length,) = struct.unpack_from(">i", data, pos + 4 + key_length)
                        metadata_follows = data[pos + 4] & 0x80
                        pos += 8 + key_length + value_length
                        sizes[names[state_id]][0] += 1
                        if metadata_follows:  # the run ends: the next state's id or 0xFFFF follows
                            sizes[names[state_id]][1] += pos - run
                            (state_id,) = struct.unpack_from(">H", data, pos)
                            run, pos = pos, pos + 2
                            if state_id == 0xFFFF:
                                break
                    assert pos == end
            for handle in subtask.operator_state:
                data_size = len(handle.stream.inline) if handle.stream.inline is not None else handle.stream.size
                firsts = sorted(min(offsets) for _, offsets in handle.states.values() if offsets)
                for name, (mode, offsets) in handle.states.items():
                    if offsets:
                        first = min(offsets)
                        # BROADCAST (mode 2): one element, an i32 entry count then the entries.
                        sizes[name][0] += (
                            struct.unpack_from(">i", handle.stream.read(directory), first)[0]
                            if mode == BROADCAST_MODE
                            else len(offsets)
                        )
                        sizes[name][1] += min((o for o in firsts if o > first), default=data_size) - first
        for name, (entries, size) in sizes.items():
            out[(label, name)] = (entries, size, total)
        if op.coordinator is not None:
            coordinator = op.coordinator
            out[(label, "_coordinator")] = (
                None,
                len(coordinator.inline) if coordinator.inline is not None else coordinator.size,
                total,
            )
    return out


def _expected_entries(state: dict, parallelism: int) -> int:
    """Stored entries the job's input implies: one per row, MapState one per map entry, broadcast
    state once per subtask (each holds a copy; expected.json lists each entry once)."""
    rows = state["rows"]
    if state["kind"] == "keyed" and state["state_type"] == "MAP":
        return sum(len(r["value"]) for r in rows)
    if state["kind"] == "broadcast":
        return len(rows) * parallelism
    return len(rows)


# ----------------------------------------------------------------------------- sizes (no Spark)


@pytest.mark.parametrize("case", CASES)
def test_state_bytes_add_up_to_the_streams_less_headers_and_end_markers(case):
    from statecat.readers.scans.state_bytes import savepoint_bytes

    meta = _meta(case)
    sizes = savepoint_bytes(meta)
    for op in meta.operators:
        size = sizes[op.id]
        assert size.state_bytes + size.framing_bytes + size.unattributed_bytes == size.operator_bytes, op.label
        keyed_streams, operator_streams = {}, {}
        native = {loc.native for s in op.states if s.is_keyed for loc in s.locations if loc.native is not None}
        if native:
            # Each SST file holds one state's column family: the states' bytes are the SST files'
            # (from _metadata's file list), everything else of the instances is framing.
            assert sum(size.states[s.name].bytes for s in op.states if s.is_keyed) == sum(
                f.stream.size for handle in native for f in handle.sst_files
            ), op.label
            continue
        for state in op.states:
            for loc in state.locations:
                if state.is_keyed and not _measured(state):
                    continue
                if state.is_keyed:
                    keyed_streams[(loc.subtask, loc.stream)] = loc
                elif state.kind != "coordinator":
                    operator_streams.setdefault((loc.subtask, loc.stream), []).extend(loc.offsets)
        # Computed from _metadata alone: stream sizes, where the first key-group / element starts,
        # and how many key-groups hold data.
        keyed_total = sum(
            loc.stream.size - min((o for o in loc.offsets if o > 0), default=loc.stream.size)
            for loc in keyed_streams.values()
        )
        markers = sum(END_MARKER * sum(1 for o in loc.offsets if o > 0) for loc in keyed_streams.values())
        keyed_bytes = sum(size.states[s.name].bytes or 0 for s in op.states if s.is_keyed)
        if any(loc.compressed for loc in keyed_streams.values()):
            # Compressed key-groups are shared out in proportion: the end markers' share is not 2 bytes.
            assert keyed_bytes < keyed_total
            assert keyed_bytes > keyed_total - 4 * markers
        else:
            assert keyed_bytes == keyed_total - markers, op.label
        operator_total = sum(
            stream.size - min(offsets, default=stream.size) for (_, stream), offsets in operator_streams.items()
        )
        assert (
            sum(size.states[s.name].bytes for s in op.states if not s.is_keyed and s.kind != "coordinator")
            == operator_total
        ), op.label
        if op.coordinator_bytes:
            assert size.states["_coordinator"].bytes == op.coordinator_bytes
        for state in op.states:  # a state with entries takes bytes, one without takes none
            got = size.states[state.name]
            if not _measured(state):
                assert got.bytes is None and got.entries is None and size.unattributed_bytes > 0
                continue
            assert (got.bytes > 0) == bool(got.entries) or state.kind == "coordinator", (op.label, state.name)


def _plain_savepoint(case) -> bool:
    """Uncompressed, canonical and fully readable: what the probe walks."""
    meta = _meta(case)
    return not any(op.unsupported for op in meta.operators) and all(
        _measured(s) and not getattr(loc, "compressed", False) for _, s in meta.states() for loc in s.locations
    )


@pytest.mark.parametrize("case", [c for c in CASES if _plain_savepoint(c)])
def test_state_bytes_match_an_independent_walk_of_the_key_groups(case):
    from statecat.readers.scans.state_bytes import savepoint_bytes

    meta = _meta(case)
    sizes = savepoint_bytes(meta)
    got = {}
    for op in meta.operators:
        for name, size in sizes[op.id].states.items():
            got[(op.label, name)] = (size.entries, size.bytes, sizes[op.id].operator_bytes)
    assert got == probe_state_bytes(case)


def test_operator_bytes_are_the_operators_streams_as_inspect_counts_them():
    from statecat.catalog.cli.inspect import describe
    from statecat.readers.scans.state_bytes import savepoint_bytes

    for case in CASES:
        meta = _meta(case)
        sizes = savepoint_bytes(meta)
        for op in describe(meta)["operators"]:
            assert sizes[op["id"]].operator_bytes == op["state_bytes"] + op["coordinator_bytes"], (case, op["id"])


def test_unreadable_handles_are_counted_apart():
    import dataclasses

    from statecat.readers.scans.state_bytes import savepoint_bytes
    from statecat.statemeta.files.metadata import NativeRocksDBHandle, UnsupportedKeyedHandle
    from statecat.statemeta.model import StateMeta, _operator_meta

    # No fixture has a handle statecat does not read (changelog backend): a real RocksDB
    # instance's handle is swapped for one, keeping its key-groups and size.
    real = _meta("sql_groupby_native_rocksdb_2.3")

    def unreadable(subtask):
        handle = subtask.managed_keyed
        if not isinstance(handle, NativeRocksDBHandle):
            return subtask
        return dataclasses.replace(
            subtask,
            managed_keyed=UnsupportedKeyedHandle(
                "changelog", handle.start_key_group, handle.num_key_groups, handle.size, "changelog handle"
            ),
        )

    metadata = dataclasses.replace(
        real.metadata,
        operators=tuple(
            dataclasses.replace(op, subtasks=tuple(unreadable(s) for s in op.subtasks))
            for op in real.metadata.operators
        ),
    )
    meta = StateMeta(real.storage, metadata, tuple(_operator_meta(real.storage, op) for op in metadata.operators))
    sizes = savepoint_bytes(meta)
    unsupported = [op for op in meta.operators if op.unsupported]
    assert unsupported
    for op in unsupported:
        assert sizes[op.id].unattributed_bytes > 0 and sizes[op.id].state_bytes == 0


@pytest.mark.parametrize("case", CASES)
def test_entries_are_what_the_jobs_input_implies(case):
    from statecat.readers.scans.state_bytes import savepoint_bytes

    meta = _meta(case)
    sizes = savepoint_bytes(meta)
    checked = 0
    for expected_op, state in iter_states(load_expected(case)):
        if state["rows"] is None:
            continue
        op = find_operator(meta, expected_op)
        if not _measured(op.state(state["name"])):
            continue
        assert sizes[op.id].states[state["name"]].entries == _expected_entries(state, op.parallelism), (
            op.label,
            state["name"],
        )
        checked += 1
    assert checked or any(not _measured(s) for op in meta.operators for s in op.states)


def test_compressed_savepoint_measures_the_same_entries_as_the_plain_one():
    from statecat.readers.scans.state_bytes import savepoint_bytes

    plain = _meta("sql_groupby_hashmap_2.3")
    packed = _meta("sql_groupby_compressed_2.3")
    plain_acc = savepoint_bytes(plain)[plain.find_state("accState")[0].id].states["accState"]
    packed_acc = savepoint_bytes(packed)[packed.find_state("accState")[0].id].states["accState"]
    assert plain_acc.entries == packed_acc.entries == 2000
    assert packed_acc.bytes < plain_acc.bytes  # stored bytes: what snappy left of them


def test_key_group_sizes_sum_to_the_state_sizes():
    from statecat.readers.scans.state_bytes import key_group_bytes, operator_bytes

    meta = _meta("sql_join_2.3")
    op, _ = meta.find_state("left-records")
    totals: dict[str, list[int]] = {}
    for group in key_group_bytes(meta, op):
        totals.setdefault(group.state, [0, 0])
        totals[group.state][0] += group.entries
        totals[group.state][1] += group.bytes
    sizes = operator_bytes(meta, op)
    assert {name: (s.entries, s.bytes) for name, s in sizes.states.items() if s.entries} == {
        name: tuple(t) for name, t in totals.items()
    }


def test_a_damaged_key_group_is_a_clear_error(tmp_path):
    import shutil

    from statecat.readers.scans.state_bytes import savepoint_bytes
    from statecat.statemeta.errors import FormatError
    from statecat.statemeta.files.metadata import FileStream

    copy = tmp_path / "sp"
    shutil.copytree(savepoint_dir("sql_groupby_hashmap_2.3"), copy)
    meta = _meta_at(copy)
    op, state = meta.find_state("accState")
    loc = next(loc for loc in state.locations if isinstance(loc.stream, FileStream))
    start = sorted(o for o in loc.offsets if o > 0)[3]
    path = loc.stream.path
    data = bytearray(open(path, "rb").read())
    data[start + 2 : start + 6] = b"\x7f\xff\xff\xff"  # the first entry's key length runs past the key-group
    open(path, "wb").write(bytes(data))
    with pytest.raises(FormatError) as err:
        savepoint_bytes(meta)
    assert os.path.basename(path) in str(err.value) and "key-group" in str(err.value)

    # state_meta, where damage is diagnosed, still lists every state: sizes empty, the reason given.
    from statecat.catalog.spark.tables import STATE_META_COLUMNS, state_meta_rows

    columns = [name for name, _ in STATE_META_COLUMNS]
    rows = [dict(zip(columns, row)) for row in state_meta_rows(meta)]
    damaged = [r for r in rows if r["operator_id"] == op.id]
    assert {r["state_name"] for r in damaged} == {s.name for s in op.states}
    assert all(r["bytes"] is None and os.path.basename(path) in r["raw_reasons"] for r in damaged)
    assert all(r["bytes"] is not None for r in rows if r["operator_id"] != op.id and r["kind"] != "coordinator")


def _meta_at(path):
    from statecat.statemeta.model import load_state_meta

    return load_state_meta(str(path), use_state_info=False)


# ----------------------------------------------------------------------------- Spark

_shared: dict = {}


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    from statecat.catalog import attach
    from statecat.catalog.servers.sessions import session

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    home = tmp_path_factory.mktemp("statecat_views_home")
    spark = session(
        str(home),
        conf={
            "spark.sql.session.timeZone": "UTC",
            "spark.log.level": "ERROR",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
        },
    )
    result = attach(spark, [str(CASES_DIR / case) for case in FIRST_CASES])
    assert result.failed == []
    return spark


def _db(case):
    return case.replace(".", "_")


def _expected_state_rows(cases):
    """(database, operator, state, entries, bytes) of every state of the cases, measured by the probe."""
    rows = []
    for case in cases:
        rows += [
            (_db(case), label, name, entries, size)
            for (label, name), (entries, size, _) in probe_state_bytes(case).items()
        ]
    return sorted(rows, key=repr)


@pytest.mark.spark
def test_state_meta_sizes_add_up_and_match_the_input(spark):
    rows = spark.sql(
        "SELECT operator_id, state_name, kind, entries, bytes, operator_bytes FROM sql_window_2_3.state_meta"
    ).collect()
    by_state = {r["state_name"]: r for r in rows}
    expected = {s["name"]: s for _, s in iter_states(load_expected("sql_window_2.3"))}
    assert by_state["window-aggs"]["entries"] == len(expected["window-aggs"]["rows"]) > 0
    assert by_state["_timer_state/event_window-timers"]["entries"] == len(
        expected["_timer_state/event_window-timers"]["rows"]
    )
    for operator_id in {r["operator_id"] for r in rows}:
        mine = [r for r in rows if r["operator_id"] == operator_id]
        total = {r["operator_bytes"] for r in mine}
        assert len(total) == 1  # the operator's total, the same on each of its states
        assert sum(r["bytes"] for r in mine) < total.pop() or all(r["bytes"] == 0 for r in mine)


@pytest.mark.spark
def test_every_column_has_a_description(spark):
    for table in ("sql_groupby_hashmap_2_3.state_meta", "statecat.states", "statecat.operators"):
        described = {
            r["col_name"]: r["comment"]
            for r in spark.sql(f"DESCRIBE TABLE {table}").collect()
            if r["col_name"] and not r["col_name"].startswith("#")
        }
        assert described and all(described.values()), (table, [c for c, v in described.items() if not v])
    bytes_comment = spark.sql("DESCRIBE TABLE statecat.states").where("col_name = 'operator_bytes'").first()
    assert "do not sum" in bytes_comment["comment"]


@pytest.mark.spark
def test_catalog_wide_states_follow_attach_and_detach(spark):
    from statecat.catalog import attach, sql
    from statecat.catalog.spark.catalog_views import refresh_catalog_views

    query = (
        "SELECT database, operator, state_name, entries, bytes FROM statecat.states "
        "ORDER BY database, operator, state_name"
    )
    got = [tuple(r) for r in sql(spark, query).collect()]
    assert sorted(got, key=repr) == _expected_state_rows(FIRST_CASES)

    # More savepoints, registered only (no database yet): they are in the view all the same.
    result = attach(spark, [str(CASES_DIR / case) for case in MORE_CASES], eager=False)
    assert result.failed == [] and result.materialised == []
    got = [tuple(r) for r in spark.sql(query).collect()]
    assert sorted(got, key=repr) == _expected_state_rows(FIRST_CASES + MORE_CASES)
    assert not spark.catalog.databaseExists(_db(MORE_CASES[0]))

    # Entries per state per savepoint are what each job's input implies.
    entries = {(r[0], r[2]): r[3] for r in got}
    for case in FIRST_CASES + MORE_CASES:
        meta = _meta(case)
        for expected_op, state in iter_states(load_expected(case)):
            if state["rows"] is not None:
                op = find_operator(meta, expected_op)
                assert entries[(_db(case), state["name"])] == _expected_entries(state, op.parallelism)

    # A pushed database filter reads only that savepoint.
    one = spark.sql("SELECT DISTINCT database FROM statecat.states WHERE database = 'sql_join_2_3'").collect()
    assert [r[0] for r in one] == ["sql_join_2_3"]

    # Detach rewrites the registry; the tables follow once pointed at its current files.
    from statecat.catalog.spark.relocation import detach

    detach(spark, _db("sql_join_2.3"))
    refresh_catalog_views(spark)
    databases = {r[0] for r in spark.sql("SELECT DISTINCT database FROM statecat.states").collect()}
    assert databases == {_db(c) for c in FIRST_CASES + MORE_CASES if c != "sql_join_2.3"}


@pytest.mark.spark
def test_catalog_wide_operators_add_up(spark):
    from statecat.readers.scans.state_bytes import savepoint_bytes

    rows = spark.sql(
        "SELECT o.database, o.operator_id, o.states, o.state_bytes, o.framing_bytes, "
        "o.unattributed_bytes, o.operator_bytes, s.bytes "
        "FROM statecat.operators o LEFT JOIN (SELECT database, operator_id, sum(bytes) AS bytes "
        "FROM statecat.states GROUP BY database, operator_id) s USING (database, operator_id)"
    ).collect()
    assert rows
    registered = {r[0]: r[1] for r in spark.sql("SELECT database, path FROM statecat.savepoints").collect()}
    for r in rows:
        assert r["state_bytes"] + r["framing_bytes"] + r["unattributed_bytes"] == r["operator_bytes"]
        assert r["state_bytes"] == (r["bytes"] or 0)
    for database, path in registered.items():
        from statecat.statemeta.model import load_state_meta

        meta = load_state_meta(path)
        mine = {r["operator_id"]: r for r in rows if r["database"] == database}
        assert set(mine) == {op.id for op in meta.operators}  # one row per operator, stateless ones too
        sizes = savepoint_bytes(meta)
        assert all(mine[i]["operator_bytes"] == sizes[i].operator_bytes for i in mine)


@pytest.mark.spark
def test_a_vanished_savepoint_is_named_with_the_way_out(spark, tmp_path):
    import shutil

    from statecat.catalog import attach
    from statecat.catalog.spark.relocation import detach

    copy = tmp_path / "gone" / "savepoint"
    shutil.copytree(savepoint_dir("sql_window_2.3"), copy)
    database = attach(spark, [str(copy)], eager=False).registered[0].database
    shutil.rmtree(copy)
    with pytest.raises(Exception) as err:
        spark.sql("SELECT count(*) FROM statecat.operators").collect()
    message = str(err.value)
    assert "StatecatQueryError" in message and database in message and f"statecat detach {database}" in message
    # Savepoints still there answer when the vanished one is filtered out (pushed down: never opened).
    assert spark.sql("SELECT count(*) FROM statecat.operators WHERE database = 'sql_window_2_3'").first()[0] == len(
        _meta("sql_window_2.3").operators
    )
    detach(spark, database)
