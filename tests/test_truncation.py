"""A file cut short is called truncated, with the file and the byte offset, wherever the cut falls.

Every fixture's real ``_metadata`` (savepoints and retained checkpoints) is cut at every offset of
its first bytes and at spread and seeded-random offsets after, and the state files of a savepoint
and the SST files of an incremental checkpoint are cut too: each cut must give a statecat error
saying "truncated" and naming the file and an offset inside what is left.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from statecat.readers import SavepointReader
from statecat.readers.backends.sst.format import BLOCK_BASED_TABLE_MAGIC, MAGIC_LENGTH
from statecat.statemeta.errors import StatecatError
from statecat.statemeta.model import load_state_meta
from tests.fixtures.expected import CASES_DIR, savepoint_dir

METADATA_FILES = sorted(CASES_DIR.glob("*/**/_metadata"))
# Per file: every offset of the header (magic, version, counts, the first handles), then spread
# and random offsets (a seeded RNG: the same cuts on every run).
DENSE_PREFIX = 40
SPREAD_CUTS = 32
RANDOM_CUTS = 16


def _cuts(size: int, seed: str) -> list[int]:
    rng = random.Random(seed)
    spread = {size * i // SPREAD_CUTS for i in range(SPREAD_CUTS)}
    return sorted(set(range(min(DENSE_PREFIX, size))) | spread | {rng.randrange(size) for _ in range(RANDOM_CUTS)})


def _assert_named_truncation(error: StatecatError, file: str, cut: int) -> None:
    text = str(error)
    assert "truncated" in text, text
    assert file in text, text
    assert error.offset is not None and 0 <= error.offset <= cut, text
    assert f"byte offset {error.offset}" in text, text


def _read_everything(path: Path) -> None:
    meta = load_state_meta(path, use_state_info=False)
    reader = SavepointReader(meta)
    for operator in meta.operators:
        for state in operator.states:
            reader.table(state.name, operator=operator.id)


def test_fixture_metadata_files_cover_savepoints_and_checkpoints():
    names = {p.parent.name for p in METADATA_FILES}
    assert len(METADATA_FILES) > 50
    assert any(n.startswith("chk-") for n in names) and any(n.startswith("phase-") for n in names)


def test_every_truncated_metadata_says_truncated_with_file_and_offset(tmp_path):
    checked = 0
    for metadata in METADATA_FILES:
        data = metadata.read_bytes()
        # A copy of the snapshot directory, so the cut _metadata still sits next to its state files.
        work = tmp_path / str(checked)
        shutil.copytree(metadata.parent, work)
        for cut in _cuts(len(data), str(metadata.relative_to(CASES_DIR))):
            (work / "_metadata").write_bytes(data[:cut])
            with pytest.raises(StatecatError) as error:
                load_state_meta(work)
            _assert_named_truncation(error.value, "_metadata", cut)
            checked += 1
        shutil.rmtree(work)
    assert checked > 60 * len(METADATA_FILES)


def test_the_reported_inline_state_cut_says_truncated_on_the_command_line(tmp_path):
    """The issue's case: an inline state's length prefix claims more bytes than the cut file holds."""
    source = savepoint_dir("datastream_checkpoint_rocksdb_2.3")
    savepoint = tmp_path / "savepoint"
    shutil.copytree(source, savepoint)
    data = (source / "_metadata").read_bytes()
    (savepoint / "_metadata").write_bytes(data[: len(data) * 2 // 3])
    done = subprocess.run(
        [sys.executable, "-m", "statecat.catalog.cli", "inspect", str(savepoint)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert re.fullmatch(
        r"statecat: error: truncated or corrupt: expected inline state length in bytes within the \d+ bytes left, "
        rf"got \d+ \(file {re.escape(str(savepoint / '_metadata'))}, byte offset \d+\)\. [^\n]+\n",
        done.stderr,
    ), done.stderr


def test_truncated_state_files_say_truncated(tmp_path):
    source = savepoint_dir("sql_groupby_hashmap_2.3")
    files = sorted(p for p in source.iterdir() if p.name != "_metadata" and not p.name.startswith("stateInfo"))
    assert files
    for file in files:
        data = file.read_bytes()
        for cut in (0, 1, len(data) // 3, len(data) // 2, len(data) - 1):
            savepoint = tmp_path / f"{file.name}-{cut}"
            shutil.copytree(source, savepoint)
            (savepoint / file.name).write_bytes(data[:cut])
            with pytest.raises(StatecatError) as error:
                _read_everything(savepoint)
            _assert_named_truncation(error.value, file.name, len(data))
            shutil.rmtree(savepoint)


def test_truncated_sst_files_of_an_incremental_checkpoint_say_truncated(tmp_path):
    job = next((CASES_DIR / "sql_groupby_incremental_1.15" / "checkpoints").iterdir())
    latest = max(job.glob("chk-*"), key=lambda p: int(p.name.split("-")[1]))
    metadata = (latest / "_metadata").read_bytes()
    # The shared files the latest checkpoint names that are SST files (RocksDB's OPTIONS file is not read).
    ssts = [p for p in sorted((job / "shared").iterdir()) if p.name.encode() in metadata and _is_sst(p)]
    assert ssts
    for sst in ssts[:3]:
        data = sst.read_bytes()
        for cut in (0, len(data) // 2, len(data) - 1):
            # Under its job id: the checkpoint names its shared files by the job directory's path.
            copy = tmp_path / f"{sst.name}-{cut}" / job.name
            shutil.copytree(job, copy)
            (copy / "shared" / sst.name).write_bytes(data[:cut])
            with pytest.raises(StatecatError) as error:
                _read_everything(copy / latest.name)
            _assert_named_truncation(error.value, sst.name, len(data))
            shutil.rmtree(copy)


def _is_sst(path: Path) -> bool:
    """RocksDB's block-based table magic number (little-endian) ends every SST file."""
    return path.read_bytes()[-MAGIC_LENGTH:] == BLOCK_BASED_TABLE_MAGIC.to_bytes(MAGIC_LENGTH, "little")
