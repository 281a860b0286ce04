"""statecat write with Spark tasks (`--engine spark`): each subtask's keyed stream is rebuilt by a
Spark task, the driver composes _metadata. The result must be the same savepoint the in-process
writer produces (whose restores in real Flink are tests/test_write_restore.py): the same keyed
stream bytes, subtask by subtask, and the same rows matched by each statement."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from statecat.statemeta.files.metadata import InlineStream, read_metadata
from tests.fixtures.edits import write_savepoint
from tests.fixtures.expected import savepoint_dir

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark():
    from statecat.catalog.servers.sessions import session

    return session()


def _keyed_streams(directory: Path) -> dict:
    md = read_metadata(str(directory))
    raw = (directory / "_metadata").read_bytes()
    out = {}
    for op in md.operators:
        for s in op.subtasks:
            h = s.managed_keyed
            if h is None:
                continue
            st = h.stream
            data = (
                raw[st.offset : st.offset + st.length] if isinstance(st, InlineStream) else Path(st.path).read_bytes()
            )
            out[(op.id, s.index)] = (h.start_key_group, h.offsets, hashlib.sha256(data).hexdigest())
    return out


@pytest.mark.parametrize(
    "case,statements",
    [
        ("datastream_checkpoint_rocksdb_2.3", ["UPDATE count SET value = value + 1 WHERE key = 'k_0'"]),
        ("sql_groupby_checkpoint_hashmap_2.3", []),
        ("sql_groupby_hashmap_2.3", ["UPDATE accstate SET value.f0 = 0 WHERE value.f1 > 0"]),
    ],
)
def test_spark_tasks_write_the_same_savepoint(tmp_path, spark, case, statements, monkeypatch):
    from statecat.catalog.spark import edit_changes

    # The tasks read the changes Spark's comparison stored by key-group (a few rows are otherwise
    # held in this process, and travel to the tasks with the job).
    monkeypatch.setattr(edit_changes, "HELD_ROWS", 0)
    local = write_savepoint(str(savepoint_dir(case)), str(tmp_path / "local"), sql=statements)
    parallel = write_savepoint(str(savepoint_dir(case)), str(tmp_path / "spark"), sql=statements, engine="spark")
    assert _keyed_streams(tmp_path / "spark") == _keyed_streams(tmp_path / "local")
    assert [s.matched for s in parallel.statements] == [s.matched for s in local.statements]
    assert parallel.summary.key_groups_rebuilt == local.summary.key_groups_rebuilt > 0


def test_write_command_with_the_spark_engine(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "statecat.catalog.cli",
            "write",
            str(savepoint_dir("sql_groupby_checkpoint_hashmap_2.3")),
            "--out",
            str(tmp_path / "pinned"),
            "--engine",
            "spark",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert read_metadata(str(tmp_path / "pinned")).savepoint_format == "CANONICAL"
