"""Damaged or wrong input gives one clear statecat error naming the file and byte offset.

The damaged savepoints are copies of real fixtures with bytes cut, changed or removed (the
must-reject vectors); the real bytes themselves are read by the acceptance tests.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from statecat.readers import SavepointReader
from statecat.statemeta.errors import (
    FormatError,
    SavepointNotFoundError,
    StatecatError,
    StateFileError,
    UnsupportedError,
)
from statecat.statemeta.files.metadata import METADATA_MAGIC, read_metadata
from statecat.statemeta.model import load_state_meta
from tests.fixtures.expected import load_expected, savepoint_dir

FILE_CASE = "sql_groupby_hashmap_2.3"  # state in files next to _metadata, and inline
STATECAT = [sys.executable, "-m", "statecat.catalog.cli"]


@pytest.fixture
def savepoint(tmp_path) -> Path:
    target = tmp_path / "savepoint"
    shutil.copytree(savepoint_dir(FILE_CASE), target)
    return target


def _metadata(savepoint: Path) -> bytearray:
    return bytearray((savepoint / "_metadata").read_bytes())


def _write(savepoint: Path, data: bytes) -> None:
    (savepoint / "_metadata").write_bytes(bytes(data))


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([*STATECAT, *args], capture_output=True, text=True, timeout=120)


def test_truncated_metadata_names_file_and_offset_at_every_cut(savepoint):
    original = _metadata(savepoint)
    for cut in list(range(0, 200, 3)) + list(range(200, len(original), 97)):
        _write(savepoint, original[:cut])
        with pytest.raises(StatecatError) as error:
            load_state_meta(savepoint)
        assert "_metadata" in str(error.value), cut
        assert error.value.offset is not None and 0 <= error.value.offset <= len(original), cut


def test_wrong_magic(savepoint):
    data = _metadata(savepoint)
    data[0:4] = b"\x00\x01\x02\x03"
    _write(savepoint, data)
    with pytest.raises(
        FormatError, match=f"expected the _metadata magic number 0x{METADATA_MAGIC:08X}, got 0x00010203"
    ) as error:
        read_metadata(savepoint)
    assert error.value.offset == 0


def test_unknown_version_lists_supported_versions(savepoint):
    data = _metadata(savepoint)
    data[4:8] = struct.pack(">i", 99)
    _write(savepoint, data)
    with pytest.raises(
        UnsupportedError, match=r"unknown _metadata version 99; supported versions: 3 .*6 \(Flink 2.1–2.3\)"
    ) as error:
        read_metadata(savepoint)
    assert error.value.offset == 4


def test_garbled_count_fails_before_allocating(savepoint):
    data = _metadata(savepoint)
    data[16:20] = struct.pack(">i", 0x7FFFFFFF)  # number of master states
    _write(savepoint, data)
    with pytest.raises(FormatError, match="number of master states between 0 and") as error:
        read_metadata(savepoint)
    assert error.value.offset == 16


def test_missing_state_file_is_named(savepoint):
    data_files = [p for p in savepoint.iterdir() if p.name != "_metadata"]
    assert data_files
    data_files[0].unlink()
    with pytest.raises(StateFileError, match="missing") as error:
        load_state_meta(savepoint)
    assert data_files[0].name in str(error.value)


def test_relative_handle_cannot_escape_the_savepoint(savepoint):
    data = _metadata(savepoint)
    name = next(p.name for p in savepoint.iterdir() if p.name != "_metadata").encode()
    escaping = b"../../" + name[6:]
    assert data.count(name) == 1
    _write(savepoint, data.replace(name, escaping))
    with pytest.raises(StateFileError, match="outside the savepoint directory"):
        read_metadata(savepoint)


def test_damaged_state_data_names_state_file_and_offset(savepoint):
    meta = load_state_meta(savepoint)
    op, state = meta.find_state("accState")
    location = state.locations[0]
    first_group = min(o for o in location.offsets if o > 0)
    path = Path(location.stream.path)
    data = bytearray(path.read_bytes())
    # The first entry's key length: make it claim more bytes than the key-group holds.
    data[first_group + 2 : first_group + 6] = struct.pack(">i", 1 << 30)
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError) as error:
        SavepointReader(savepoint).table("accState")
    message = str(error.value)
    assert path.name in message and "accState" in message and "key-group" in message
    assert error.value.offset is not None and error.value.offset >= first_group


def test_not_a_savepoint(tmp_path):
    with pytest.raises(SavepointNotFoundError, match="expected a _metadata file in the directory"):
        load_state_meta(tmp_path)
    with pytest.raises(SavepointNotFoundError, match="no such file or directory"):
        load_state_meta(tmp_path / "nowhere")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(SavepointNotFoundError, match="expected a directory holding _metadata, got a file"):
        load_state_meta(tmp_path / "notes.txt")


def test_parent_with_one_savepoint_is_accepted(savepoint):
    parent = savepoint.parent
    savepoint.rename(parent / "savepoint-abc123-0123456789ab")
    meta = load_state_meta(parent)
    assert meta.storage.directory.endswith("savepoint-abc123-0123456789ab")


def test_parent_with_one_savepoint_of_any_name_is_accepted_by_every_command(savepoint, tmp_path):
    # The fixture cases hold their savepoint as ``savepoint/``: attach finds it, and so must the rest.
    case = savepoint.parent
    assert load_state_meta(case).storage.directory == str(savepoint)
    assert _cli("inspect", str(case)).returncode == 0
    read = _cli("read", str(case), "--state", "accState", "--key", "key_662", "--format", "jsonl")
    assert read.returncode == 0, read.stderr
    expected = [
        r["value"]
        for op in load_expected(FILE_CASE)["operators"]
        for st in op["states"]
        if st["name"] == "accState"
        for r in st["rows"]
        if r["key"] == "key_662"
    ]
    assert [json.loads(line)["value"] for line in read.stdout.splitlines()] == expected
    output = tmp_path / "state_info_out"
    assert _cli("snapshot", str(case), "--output", str(output)).returncode == 0
    (case / "other").mkdir()
    shutil.copy(savepoint / "_metadata", case / "other" / "_metadata")
    several = _cli("inspect", str(case))
    assert several.returncode == 2 and "several savepoints (other, savepoint)" in several.stderr


def test_cli_reports_errors_without_traceback(savepoint):
    data = _metadata(savepoint)
    _write(savepoint, data[:100])
    result = _cli("inspect", str(savepoint))
    assert result.returncode == 2
    assert result.stderr.startswith("statecat: error: ")
    assert "_metadata" in result.stderr and "byte offset" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_unknown_state_suggests_names(savepoint):
    result = _cli("read", str(savepoint), "--state", "accStat")
    assert result.returncode == 2
    assert "unknown state 'accStat'" in result.stderr and "Did you mean 'accState'?" in result.stderr
    assert "Traceback" not in result.stderr
