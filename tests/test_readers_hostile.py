"""The readers on damaged and hostile state data: one statecat error naming file and offset, or
valid Arrow output; never a crash, a foreign exception, an unbounded allocation or a silent loss.

Every damaged savepoint is a copy of a real fixture with bytes changed (the must-reject vectors);
the pristine bytes themselves are read by the acceptance tests. Reads that could crash the
interpreter run in a child process, so a crash is a test failure and not the end of the run.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from statecat.readers import SavepointReader
from statecat.readers.scans.scan import KeyedStateScanner, scanner_for
from statecat.statemeta.errors import FormatError, StatecatError
from statecat.statemeta.files.headers import open_stream
from statecat.statemeta.model import load_state_meta
from tests.fixtures.expected import savepoint_dir

REPO = Path(__file__).resolve().parent.parent
STATECAT = [sys.executable, "-m", "statecat.catalog.cli"]
CLI_TIMEOUT = 120


def _copy(case: str, tmp_path: Path) -> Path:
    target = tmp_path / case
    shutil.copytree(savepoint_dir(case), target)
    return target


def _poke(path: Path, at: int, data: bytes) -> None:
    content = bytearray(path.read_bytes())
    content[at : at + len(data)] = data
    path.write_bytes(bytes(content))


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([*STATECAT, *args], capture_output=True, text=True, timeout=CLI_TIMEOUT, cwd=REPO)


def _assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("statecat: error: "), result.stderr[-2000:]
    assert "byte offset" in lines[0]
    for fragment in fragments:
        assert fragment in lines[0]


def _both_paths(meta, state: str) -> list[pa.Table]:
    """The state read column-wise (where planned) and record by record."""
    op, info = meta.find_state(state)
    tables = []
    for fast in (True, False):
        scanner = KeyedStateScanner(meta, op, info)
        if not fast:
            scanner.fast = None
        tables.append(pa.Table.from_batches(list(scanner.batches()), schema=scanner.schema))
    return tables


# ----------------------------------------------------------------------------- the reported repros


@pytest.mark.parametrize("value", [0xFF, 0x7F, 0x80])
def test_window_binary_row_size_past_its_entry_is_one_line_error_not_a_crash(tmp_path, value):
    # Byte 5741 of the window fixture's _metadata is inside the inline key-group data: the size of
    # a BinaryRow key, which the column-wise path used to read the namespace at before checking.
    savepoint = _copy("sql_window_2.3", tmp_path)
    _poke(savepoint / "_metadata", 5741, bytes([value]))
    result = _cli("read", str(savepoint), "--state", "window-aggs")
    _assert_one_line_error(result, "_metadata", "window-aggs", "key-group")


def test_state_id_beyond_the_header_is_an_error_not_a_lost_row(tmp_path):
    # Bytes 11708-11709 are the u16 state id between two state runs of one key-group; 0x20 in the
    # low byte makes it name a state the stream header does not have. That run's row used to be
    # dropped silently.
    savepoint = _copy("sql_groupby_hashmap_2.0", tmp_path)
    pristine = SavepointReader(savepoint).table("accState").num_rows
    assert pristine == 300
    _poke(savepoint / "_metadata", 11709, b"\x20")
    with pytest.raises(FormatError, match="state id below the stream header's state count") as error:
        SavepointReader(load_state_meta(savepoint, use_state_info=False)).table("accState")
    assert error.value.file.endswith("_metadata") and error.value.offset == 11708
    assert "(32)" in str(error.value)
    _assert_one_line_error(_cli("read", str(savepoint), "--state", "accState"), "state id")


def test_big_decimal_with_a_huge_scale_renders_in_java_scientific_notation(tmp_path):
    # Bytes 13077.. hold the scale of one BigDecimal value (an i32 after its unscaled BigInteger).
    savepoint = _copy("datastream_types_thread_2.3", tmp_path)
    metadata = savepoint / "_metadata"
    pristine = {row["key"]: row["value"] for row in SavepointReader(savepoint).table("v_big_dec").to_pylist()}
    _poke(metadata, 13077, b"\x40\x00\x00\x00")
    damaged = {row["key"]: row["value"] for row in SavepointReader(savepoint).table("v_big_dec").to_pylist()}
    changed = {key: value for key, value in damaged.items() if value != pristine[key]}
    assert len(changed) == 1
    ((key, text),) = changed.items()
    # Java's BigDecimal(unscaled, 2^30).toString(): the unscaled digits, then the exponent.
    unscaled = pristine[key].replace(".", "").lstrip("-0") or "0"
    assert len(text) < 64 and text.endswith(f"E-{(1 << 30) - (len(unscaled) - 1)}")


# ----------------------------------------------------------------------------- key-group offsets


def _offsets_at(metadata: bytes, offsets: tuple[int, ...]) -> int:
    """Where a handle's key-group offsets (i64 each, big-endian) sit in _metadata."""
    packed = struct.pack(f">{len(offsets)}q", *offsets)
    assert metadata.count(packed) == 1
    return metadata.index(packed)


def _damaged_offsets(location, damage: str) -> tuple[int, int]:
    """(index, new offset) of the second non-empty key-group, damaged as named."""
    non_empty = [i for i, o in enumerate(location.offsets) if o > 0]
    first, second = non_empty[0], non_empty[1]
    return {
        "negative": (second, -location.offsets[second]),
        "before_previous": (second, location.offsets[first] - 1),
        "past_the_end": (second, location.stream.size + 10),
    }[damage]


DAMAGED_OFFSETS = ["negative", "before_previous", "past_the_end"]


@pytest.mark.parametrize("damage", DAMAGED_OFFSETS)
def test_damaged_key_group_offsets_in_metadata_are_format_errors(tmp_path, damage):
    savepoint = _copy("sql_groupby_hashmap_2.3", tmp_path)
    _, state = load_state_meta(savepoint).find_state("accState")
    location = state.locations[0]
    index, offset = _damaged_offsets(location, damage)
    at = _offsets_at((savepoint / "_metadata").read_bytes(), location.offsets)
    _poke(savepoint / "_metadata", at + 8 * index, struct.pack(">q", offset))
    with pytest.raises(FormatError) as error:  # from the _metadata parser, or else the reader
        SavepointReader(load_state_meta(savepoint, use_state_info=False)).table("accState")
    assert error.value.file is not None and error.value.offset is not None


@pytest.mark.parametrize("damage", DAMAGED_OFFSETS)
def test_reader_checks_key_group_offsets_it_is_given(damage):
    # Locations can come from a stateInfo as well as from _metadata: the reader checks the offsets
    # itself before seeking, instead of failing in the storage layer or dropping a key-group.
    meta = load_state_meta(savepoint_dir("sql_groupby_hashmap_2.3"), use_state_info=False)
    op, state = meta.find_state("accState")
    location = state.locations[0]
    index, offset = _damaged_offsets(location, damage)
    offsets = list(location.offsets)
    offsets[index] = offset
    damaged = dataclasses.replace(location, offsets=tuple(offsets))
    scanner = KeyedStateScanner(meta, op, state)
    with pytest.raises(FormatError, match=f"key-group {location.start_key_group + index} to start at") as error:
        list(scanner.batches([damaged]))
    assert Path(location.stream.path).name in error.value.file and error.value.offset is not None


@pytest.mark.parametrize("offsets,end", [((700,), 634), ((352,), 700), ((-4,), 634), ((352,), 352)])
def test_reader_checks_operator_state_offsets_it_is_given(offsets, end):
    meta = load_state_meta(savepoint_dir("datastream_broadcast_filesource_2.3"), use_state_info=False)
    op, state = meta.find_state("python-state-rules")
    location = dataclasses.replace(state.locations[0], offsets=offsets, end=end)
    with pytest.raises(FormatError, match="expected operator state elements within the stream") as error:
        list(scanner_for(meta, op, state).batches([location]))
    assert error.value.file.endswith("_metadata") and error.value.offset is not None


def test_broadcast_entry_count_beyond_its_bytes_is_an_error_before_any_allocation(tmp_path):
    savepoint = _copy("datastream_broadcast_filesource_2.3", tmp_path)
    meta = load_state_meta(savepoint)
    _, state = meta.find_state("python-state-rules")
    location = state.locations[0]
    stream, name, base = open_stream(meta.storage, location.stream)
    stream.close()
    _poke(Path(name), base + location.offsets[0], struct.pack(">i", 0x7FFFFFFF))
    with pytest.raises(FormatError, match="broadcast entry count") as error:
        SavepointReader(load_state_meta(savepoint, use_state_info=False)).table("python-state-rules")
    assert error.value.offset == base + location.offsets[0]


# ----------------------------------------------------------------------------- compressed key-groups


def test_damaged_compressed_key_group_is_a_format_error(tmp_path):
    savepoint = _copy("sql_groupby_compressed_2.3", tmp_path)
    meta = load_state_meta(savepoint)
    _, state = meta.find_state("accState")
    location = state.locations[0]
    assert location.compressed
    stream, name, base = open_stream(meta.storage, location.stream)
    stream.close()
    first = min(o for o in location.offsets if o > 0)
    # The first chunk after the stream identifier: its type byte 0x00 (compressed) made 0x00 -> 0x02,
    # a reserved unskippable chunk type.
    _poke(Path(name), base + first + 10, b"\x02")
    with pytest.raises(FormatError, match="snappy") as error:
        SavepointReader(load_state_meta(savepoint, use_state_info=False)).table("accState")
    assert error.value.offset == base + first


# ----------------------------------------------------------------------------- text that is not text


def test_malformed_utf8_in_sql_strings_becomes_replacement_characters_on_both_paths(tmp_path):
    savepoint = _copy("sql_groupby_hashmap_2.3", tmp_path)
    meta = load_state_meta(savepoint)
    _, state = meta.find_state("accState")
    path = Path(state.locations[0].stream.path)
    data = path.read_bytes()
    at = data.index(b"key_")  # the first key's characters (inline or in the variable part)
    _poke(path, at + 1, b"\xff")
    fast, general = _both_paths(load_state_meta(savepoint, use_state_info=False), "accState")
    for table in (fast, general):
        table.validate(full=True)
        keys = table.column("key").to_pylist()
        assert sum("\ufffd" in key for key in keys) == 1
    assert fast.equals(general)


def test_unpaired_surrogates_in_java_strings_become_replacement_characters(tmp_path):
    # Java's StringValue writes chars as varints; replace three ASCII chars of a list element by the
    # three-byte varint of the lone surrogate 0xD800 and shorten the char count to match.
    savepoint = _copy("datastream_thread_2.3", tmp_path)
    metadata = savepoint / "_metadata"
    pristine = SavepointReader(savepoint).table("items")
    element = pristine.column("value").to_pylist()[0][0]
    encoded = bytes([len(element) + 1]) + element.encode("ascii")
    data = metadata.read_bytes()
    at = data.index(encoded)
    lone_surrogate = bytes([0x80, 0xB0, 0x03])  # 0xD800 in 7-bit groups, low group first
    _poke(metadata, at, bytes([len(element) - 1]) + element[:1].encode() + lone_surrogate + element[4:].encode())
    table = SavepointReader(load_state_meta(savepoint, use_state_info=False)).table("items")
    table.validate(full=True)
    values = [v for row in table.column("value").to_pylist() for v in row]
    assert element[:1] + "\ufffd" + element[4:] in values


# ----------------------------------------------------------------------------- values beyond what columns hold


def test_sql_timestamp_beyond_year_9999_is_an_error_naming_its_entry(tmp_path):
    # A flipped bit in a TIMESTAMP field of a join's MapState key row (found by the mutation fuzzer):
    # the value lies beyond year 9999, which Spark's TIMESTAMP and Python's datetime cannot hold.
    savepoint = _copy("sql_types_2.3", tmp_path)
    path = savepoint / "039503fc-6737-4838-9ddc-f442779ac374"
    original = path.read_bytes()[26947]
    _poke(path, 26947, bytes([original ^ 0x04]))
    with pytest.raises(FormatError, match="outside the years 1 to 9999") as error:
        SavepointReader(load_state_meta(savepoint, use_state_info=False)).table("left-records")
    assert error.value.file.endswith(path.name) and error.value.offset <= 26947


# ----------------------------------------------------------------------------- seeded single-byte damage

MUTATION_RUNS = [  # (fixture, operator, state, mutations): keyed-state bytes of window and group-by savepoints
    ("sql_window_2.3", None, "window-aggs", 300),
    ("sql_groupby_hashmap_2.3", None, "accState", 300),
    ("sql_groupby_compressed_2.3", None, "accState", 150),
    ("datastream_windows_thread_2.3", "tumble-agg", "window-contents", 200),
    ("datastream_thread_2.3", None, "per_tag", 150),
]


def _key_group_bytes(meta, operator: str | None, state: str) -> list[tuple[str, int]]:
    """(file, file offset) of every byte of the state's key-groups."""
    _, info = meta.find_state(state, operator)
    out = []
    for location in info.locations:
        stream, name, base = open_stream(meta.storage, location.stream)
        stream.close()
        first = min(o for o in location.offsets if o > 0)
        out.extend((name, base + offset) for offset in range(first, location.stream.size))
    return out


def mutation_run(savepoint: str, operator: str | None, state: str, count: int, seed: int) -> None:
    """Child-process body: damage one byte at a time, read the state on both paths, print one JSON
    line per mutation (before reading, so a crash names its mutation)."""
    meta = load_state_meta(savepoint, use_state_info=False)
    positions = _key_group_bytes(meta, operator, state)
    rng = random.Random(seed)
    for _ in range(count):
        name, at = rng.choice(positions)
        original = Path(name).read_bytes()
        value = rng.choice([original[at] ^ (1 << rng.randrange(8)), rng.randrange(256), 0x00, 0x7F, 0x80, 0xFF])
        _poke(Path(name), at, bytes([value]))
        print(json.dumps({"file": Path(name).name, "at": at, "value": value}), flush=True)
        outcomes = _read_or_error(meta, operator, state)
        Path(name).write_bytes(original)
        print(json.dumps({"outcomes": outcomes}), flush=True)


def _read_or_error(meta, operator: str | None, state: str) -> list[str]:
    """The state's rows (as text) or what went wrong, column-wise then record by record."""
    op, info = meta.find_state(state, operator)
    results = []
    for fast in (True, False):
        try:
            scanner = KeyedStateScanner(meta, op, info)
            if not fast:
                scanner.fast = None
            table = pa.Table.from_batches(list(scanner.batches()), schema=scanner.schema)
            table.validate(full=True)
            results.append(repr(table.to_pylist()))
        except StatecatError as exc:
            results.append("statecat error" if exc.file and exc.offset is not None else f"unlocated: {exc}")
        except Exception as exc:  # noqa: BLE001 - the finding this test exists to report
            results.append(f"foreign: {type(exc).__name__}: {exc}")
    return results


@pytest.mark.parametrize("case,operator,state,count", MUTATION_RUNS, ids=[f"{c}:{s}" for c, _, s, _ in MUTATION_RUNS])
def test_single_byte_damage_gives_a_statecat_error_or_valid_rows(tmp_path, case, operator, state, count):
    savepoint = _copy(case, tmp_path)
    code = (
        f"from tests.test_readers_hostile import mutation_run; "
        f"mutation_run({str(savepoint)!r}, {operator!r}, {state!r}, {count}, 12)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=REPO)
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert result.returncode == 0, (
        f"child died ({result.returncode}) at {lines[-1] if lines else None}: {result.stderr[-3000:]}"
    )
    mutations = lines[0::2]
    outcomes = [line["outcomes"] for line in lines[1::2]]
    assert len(outcomes) == count
    errors = 0
    for mutation, (fast, general) in zip(mutations, outcomes):
        for outcome in (fast, general):
            assert not outcome.startswith(("foreign", "unlocated")), (mutation, outcome)
        # The column-wise path hands anything it cannot vouch for to the per-record path.
        assert fast == general, (mutation, fast[:300], general[:300])
        errors += fast == "statecat error"
    assert errors > 0  # the damage reached the decoder
