"""When a savepoint was taken (``statemeta.taken_at``): the time and the source of the time.

Real fixture savepoints copied into tmp, laid out as Flink leaves them (``<job>/chk-N`` next to
``shared`` and ``taskowned``) or as a copy; ``statecat savepoint`` against the fake JobManager of
tests/test_savepoint_rest.py records the times it observes.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import time
from pathlib import Path

from statecat.catalog.cli import main as cli_main
from statecat.catalog.lake.materialize import identify
from statecat.catalog.spark.registry import read_record
from statecat.statemeta.snapshotter.stateinfo import STATE_INFO_FILE, snapshot
from statecat.statemeta.snapshotter.taken_at import (
    SOURCE_CHECKPOINT,
    SOURCE_FILE,
    SOURCE_REST,
    SOURCE_SNAPSHOTTER,
    savepoint_time,
)
from tests.fixtures.expected import savepoint_dir
from tests.test_savepoint_rest import JOB, FakeJobManager

CASE = "sql_groupby_hashmap_2.3"
CHECKPOINT_CASE = "sql_groupby_checkpoint_hashmap_2.3"
UTC = dt.UTC
COMPLETED = dt.datetime(2026, 3, 4, 5, 6, 7, 250000, tzinfo=UTC)


def _copy(case: str, dest: Path, *, keep_times: bool = True) -> Path:
    """A copy of the case's savepoint; ``keep_times=False`` gives every file the copy time, like ``cp -r``."""
    shutil.copytree(savepoint_dir(case), dest, copy_function=shutil.copy2 if keep_times else shutil.copy)
    (dest / STATE_INFO_FILE).unlink(missing_ok=True)
    return dest


def _set_mtime(path: Path, moment: dt.datetime) -> None:
    os.utime(path, (moment.timestamp(), moment.timestamp()))


def test_checkpoint_in_flinks_layout_is_timed_by_its_metadata_mtime(tmp_path):
    job = tmp_path / "checkpoints" / ("ab" * 16)
    chk = _copy(CHECKPOINT_CASE, job / "chk-7")
    (job / "shared").mkdir()
    (job / "taskowned").mkdir()
    _set_mtime(chk / "_metadata", COMPLETED)
    assert savepoint_time(str(chk)) == (COMPLETED, SOURCE_CHECKPOINT)
    record = read_record(str(chk), "db", dt.datetime.now(UTC))
    assert (record.time, record.time_source) == (COMPLETED, SOURCE_CHECKPOINT)


def test_a_lone_chk_directory_or_a_copied_savepoint_is_labelled_file_mtime(tmp_path):
    lone = _copy(CHECKPOINT_CASE, tmp_path / "lone" / "chk-7")  # no shared/taskowned: copied out of the job
    _set_mtime(lone / "_metadata", COMPLETED)
    assert savepoint_time(str(lone)) == (COMPLETED, SOURCE_FILE)
    before = dt.datetime.now(UTC).replace(microsecond=0)
    copied = _copy(CASE, tmp_path / "copied", keep_times=False)
    moment, source = savepoint_time(str(copied))
    assert source == SOURCE_FILE == "file_mtime: may be the copy time"
    assert moment >= before  # the copy's time, not the savepoint's: hence the label


def test_rest_trigger_time_is_recorded_in_state_info_and_survives_a_copy(tmp_path, capsys):
    sp = _copy(CASE, tmp_path / "savepoints" / "savepoint-aaaaaa-111111111111")
    _set_mtime(sp / "_metadata", COMPLETED)  # an old mtime: the REST record must win over it
    before = dt.datetime.now(UTC)
    with FakeJobManager("ok", location=f"file:{sp}") as jm:
        assert cli_main(["savepoint", "--rest", jm.url, "--job", JOB]) == 0
    after = dt.datetime.now(UTC)
    capsys.readouterr()
    taken = json.loads((sp / STATE_INFO_FILE).read_text())["taken"]
    assert taken["source"] == SOURCE_REST
    triggered = dt.datetime.fromisoformat(taken["triggered_at"].replace("Z", "+00:00"))
    completed = dt.datetime.fromisoformat(taken["completed_at"].replace("Z", "+00:00"))
    slack = dt.timedelta(milliseconds=1)  # stored to the millisecond
    assert before - slack <= triggered <= completed <= after + slack
    assert savepoint_time(str(sp)) == (completed, SOURCE_REST)
    # The snapshotter run again (watch) keeps the trigger record.
    assert not snapshot(str(sp)).written
    assert savepoint_time(str(sp)) == (completed, SOURCE_REST)
    # A plain copy carries the stateInfo along, so the time survives it.
    copy = tmp_path / "elsewhere"
    shutil.copytree(sp, copy, copy_function=shutil.copy)
    assert savepoint_time(str(copy)) == (completed, SOURCE_REST)
    record = read_record(str(copy), "db", after)
    assert (record.time, record.time_source) == (completed, SOURCE_REST)
    candidate = identify(str(copy))  # the lake's taken_at
    assert (candidate.taken_at, candidate.taken_at_source) == (completed, SOURCE_REST)


def test_snapshotter_record_counts_only_when_it_ran_as_the_savepoint_completed(tmp_path):
    fresh = _copy(CASE, tmp_path / "fresh")
    written = dt.datetime.fromtimestamp(int(time.time()) - 5, UTC)  # Flink wrote _metadata 5 s ago
    _set_mtime(fresh / "_metadata", written)
    snapshot(str(fresh))
    assert savepoint_time(str(fresh)) == (written, SOURCE_SNAPSHOTTER)
    copy = tmp_path / "copy"
    shutil.copytree(fresh, copy, copy_function=shutil.copy)
    assert savepoint_time(str(copy)) == (written, SOURCE_SNAPSHOTTER)  # the record travels with the copy

    late = _copy(CASE, tmp_path / "late")
    _set_mtime(late / "_metadata", COMPLETED)  # months before the snapshotter saw it: maybe a copy
    snapshot(str(late))
    assert json.loads((late / STATE_INFO_FILE).read_text()).get("taken") is None  # nothing vouched for
    assert savepoint_time(str(late)) == (COMPLETED, SOURCE_FILE)


def test_a_state_info_of_other_metadata_says_nothing_about_the_time(tmp_path):
    fresh = _copy(CASE, tmp_path / "fresh")
    _set_mtime(fresh / "_metadata", dt.datetime.fromtimestamp(int(time.time()) - 5, UTC))
    snapshot(str(fresh))
    other = _copy(CHECKPOINT_CASE, tmp_path / "other")
    _set_mtime(other / "_metadata", COMPLETED)
    shutil.copy(fresh / STATE_INFO_FILE, other / STATE_INFO_FILE)  # stale: another _metadata's hash
    assert savepoint_time(str(other)) == (COMPLETED, SOURCE_FILE)


def test_a_state_info_without_a_time_record_still_reads(tmp_path):
    """stateInfo stays format version 1: documents written before ``taken`` existed keep working."""
    from statecat.statemeta.model import load_state_meta
    from statecat.statemeta.snapshotter.stateinfo import read_state_info

    sp = _copy(CASE, tmp_path / "sp")
    _set_mtime(sp / "_metadata", dt.datetime.fromtimestamp(int(time.time()) - 5, UTC))  # as Flink just wrote it
    snapshot(str(sp))
    doc = json.loads((sp / STATE_INFO_FILE).read_text())
    del doc["taken"]
    (sp / STATE_INFO_FILE).write_text(json.dumps(doc))
    _set_mtime(sp / "_metadata", COMPLETED)
    assert savepoint_time(str(sp)) == (COMPLETED, SOURCE_FILE)
    from_doc = read_state_info(savepoint=str(sp))  # raises when the document does not describe the savepoint
    derived = load_state_meta(str(sp), use_state_info=False)
    assert [(op.id, [s.name for s in op.states]) for op in from_doc.operators] == [
        (op.id, [s.name for s in op.states]) for op in derived.operators
    ]
