"""Native RocksDB state (NATIVE savepoints, retained RocksDB checkpoints) read through the same
readers as canonical savepoints: the handles, the states they hold, key-group pruning, and the
errors a damaged or vanished file gives. Content checks against the jobs' input are in
tests/test_fixtures_acceptance.py (every case) and tests/test_successive_checkpoints.py."""

from __future__ import annotations

import shutil

import pytest

from statecat.readers import SavepointReader
from statecat.readers.keygroups import key_group_for
from statecat.readers.scans.scan import scanner_for
from statecat.statemeta.errors import FormatError, StatecatError
from statecat.statemeta.files.metadata import InlineStream, NativeRocksDBHandle, read_metadata
from statecat.statemeta.files.storage import open_storage
from statecat.statemeta.model import NATIVE_ROCKSDB_LAYOUT, load_state_meta
from tests.fixtures.expected import iter_states, load_expected, savepoint_dir

NATIVE_CASE = "sql_groupby_native_rocksdb_2.3"


def _native_handles(path) -> list[NativeRocksDBHandle]:
    metadata = read_metadata(open_storage(str(path)))
    return [
        s.managed_keyed
        for op in metadata.operators
        for s in op.subtasks
        if isinstance(s.managed_keyed, NativeRocksDBHandle)
    ]


def _scanner(reader: SavepointReader, state: str):
    return scanner_for(reader.meta, *reader.find(state))


def _expected_rows(case: str, state: str) -> list[dict]:
    return next(s["rows"] for _, s in iter_states(load_expected(case)) if s["name"] == state)


def test_native_savepoint_handles_name_rocksdb_files_and_cover_every_key_group():
    handles = _native_handles(savepoint_dir(NATIVE_CASE))
    assert len(handles) == 2  # parallelism 2
    covered = sorted(g for h in handles for g in range(h.key_group_range[0], h.key_group_range[1] + 1))
    assert covered == list(range(128))
    for handle in handles:
        names = {f.name for f in handle.files}
        assert "CURRENT" in names and any(n.startswith("MANIFEST-") for n in names)
        assert handle.sst_files and all(f.name.endswith(".sst") for f in handle.sst_files)
        assert handle.meta_stream.size > 0


def test_native_states_have_the_native_layout_and_no_unsupported_reason():
    meta = load_state_meta(savepoint_dir(NATIVE_CASE), use_state_info=False)
    op = next(op for op in meta.operators if "GroupAggregate" in (op.name or op.label))
    assert not op.unsupported
    state = op.state("accState")
    assert {loc.layout for loc in state.locations} == {NATIVE_ROCKSDB_LAYOUT}


def test_one_key_reads_one_key_group_and_fewer_bytes_than_the_full_scan():
    reader = SavepointReader(str(savepoint_dir(NATIVE_CASE)))
    rows = _expected_rows(NATIVE_CASE, "accState")
    wanted = rows[len(rows) // 2]
    full = _scanner(reader, "accState")
    everything = [r for b in full.batches() for r in b.to_pylist()]
    assert len(everything) == len(rows)
    one = _scanner(reader, "accState")
    got = [
        r
        for b in one.batches(
            keys=[wanted["key"]], key_groups={key_group_for(wanted["key"], one.state.key, one.operator.max_parallelism)}
        )
        for r in b.to_pylist()
    ]
    assert [r["value"] for r in got] == [wanted["value"]]
    assert one.stats.key_groups == 1
    assert 0 < one.stats.bytes_read < full.stats.bytes_read


def _corrupt_inline_sst(tmp_path, at_fraction: float):
    copy = tmp_path / "savepoint"
    shutil.copytree(savepoint_dir(NATIVE_CASE), copy)
    handle = _native_handles(copy)[0]
    sst = handle.sst_files[0].stream
    assert isinstance(sst, InlineStream)
    position = sst.offset + int(sst.length * at_fraction)
    data = bytearray((copy / "_metadata").read_bytes())
    data[position] ^= 0xFF
    (copy / "_metadata").write_bytes(bytes(data))
    return copy, handle.sst_files[0].name


def test_a_flipped_byte_in_an_sst_data_block_is_a_checksum_error_naming_file_and_block(tmp_path):
    copy, name = _corrupt_inline_sst(tmp_path, 0.02)  # the first data block starts the file
    reader = SavepointReader(str(copy))
    with pytest.raises(FormatError) as failure:
        for _ in _scanner(reader, "accState").batches():
            pass
    message = str(failure.value)
    assert "checksum" in message and name in message and "_metadata" in message
    assert failure.value.offset is not None


def test_a_checkpoint_deleted_while_it_is_read_is_an_error_naming_the_file_not_a_partial_table(tmp_path):
    """Flink subsumes a retained checkpoint and deletes its files while statecat reads it: the
    files of the subtask not read yet vanish between two batches."""
    import os

    from tests.fixtures.expected import phases

    first = phases("datastream_successive_2.3")[0]
    job = first["checkpoint"].parent
    copy = tmp_path / job.name
    shutil.copytree(job, copy)
    reader = SavepointReader(str(copy / first["checkpoint"].name))
    scanner = _scanner(reader, "count")
    later = max(scanner.state.locations, key=lambda loc: loc.subtask)
    assert later.subtask > min(loc.subtask for loc in scanner.state.locations)
    batches = scanner.batches(sorted(scanner.state.locations, key=lambda loc: loc.subtask), batch_rows=1)
    assert next(batches).num_rows > 0
    deleted = [f.stream.path for f in later.native.sst_files]
    for path in deleted:
        os.remove(path)
    with pytest.raises(StatecatError) as failure:
        for _ in batches:
            pass
    assert any(os.path.basename(path) in str(failure.value) for path in deleted), str(failure.value)


def test_a_truncated_sst_file_is_an_error_naming_it(tmp_path):
    from tests.fixtures.expected import phases

    last = phases("sql_groupby_successive_2.3")[-1]
    job = last["checkpoint"].parent
    copy = tmp_path / job.name
    shutil.copytree(job, copy)
    checkpoint = copy / last["checkpoint"].name
    victim = _native_handles(checkpoint)[0].sst_files[0].stream.path
    with open(victim, "r+b") as f:
        f.truncate(f.seek(0, 2) // 2)
    with pytest.raises(StatecatError) as failure:
        SavepointReader(str(checkpoint)).table("accState")
    assert victim.rsplit("/", 1)[-1] in str(failure.value)


def _families_without_range_deletions():
    """Column families of the RocksDB-written fixtures; those with range deletions read through
    ColumnFamilyView instead (tests/test_sst_format.py)."""
    from statecat.readers.backends.sst.format import RANGE_DEL_BLOCK
    from tests.test_sst_format import family, family_cases

    cases = []
    for case in family_cases():
        _, files = family(*case.values)
        if not any(RANGE_DEL_BLOCK in f.metaindex for f in files):
            cases.append(case)
    return cases


@pytest.mark.parametrize(("version", "name"), _families_without_range_deletions())
def test_the_compiled_merge_is_rocksdbs_iteration(version, name):
    """readers/backends/native_merge.py (one sort, or files in order when their ranges do not meet, then the
    newest version of each key) against what RocksDB itself iterated over files it wrote."""
    from statecat.readers.backends.native_merge import Runs
    from tests.test_sst_format import family

    cf, files = family(version, name)
    runs = Runs([[span] if (span := f.data_span()) is not None else [] for f in files])
    runs.restrict(b"", None)
    buffer, key_at, key_len, value_at, value_len = runs.resolved()
    data = bytes(buffer)
    got = [[data[k : k + n].hex(), data[v : v + m].hex()] for k, n, v, m in zip(key_at, key_len, value_at, value_len)]
    assert got == cf["entries"]


def test_watch_counts_a_checkpoint_complete_only_when_every_rocksdb_file_is_there(tmp_path):
    """A chk-N still being copied (an SST short, another missing) is incomplete; watch waits."""
    import os

    from statecat.statemeta.snapshotter.completeness import required_sizes, shortfalls
    from tests.fixtures.expected import phases

    last = phases("datastream_successive_2.3")[-1]
    job = last["checkpoint"].parent
    copy = tmp_path / job.name
    shutil.copytree(job, copy)
    storage = open_storage(str(copy / last["checkpoint"].name))
    needed = required_sizes(read_metadata(storage))
    files = [f for h in _native_handles(copy / last["checkpoint"].name) for f in h.files]
    assert {f.stream.path for f in files} <= set(needed)  # SSTs, MANIFEST, OPTIONS, CURRENT
    assert shortfalls(storage, needed) == []
    short, missing = files[0].stream.path, files[1].stream.path
    with open(short, "r+b") as f:
        f.truncate(1)
    os.remove(missing)
    assert {s.path: s.actual for s in shortfalls(storage, needed)} == {short: 1, missing: None}


def test_key_group_statistics_of_a_checkpoint_count_its_entries():
    """The report's skew and rescale preview (readers/scans/skew.py) on native RocksDB state."""
    from statecat.readers.scans.skew import key_group_stats
    from tests.fixtures.expected import phases

    last = phases("sql_groupby_successive_2.3")[-1]
    rows = next(s["rows"] for _, s in iter_states(last["expected"]) if s["name"] == "accState")
    groups = key_group_stats(str(last["checkpoint"]), "accState")
    assert sum(g.entries for g in groups) == len(rows) > 0
