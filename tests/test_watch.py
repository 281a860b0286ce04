"""`statecat watch`: every complete savepoint gets exactly one stateInfo; bad ones are skipped."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statecat.statemeta.model import load_state_meta
from statecat.statemeta.snapshotter.stateinfo import STATE_INFO_FILE, read_state_info
from statecat.statemeta.snapshotter.watcher import Watcher
from tests.fixtures.expected import savepoint_dir

GOOD = ("sql_groupby_hashmap_2.3", "sql_join_2.3", "sql_window_2.3", "sql_groupby_rocksdb_1.20")


def _place(case: str, dest: Path, *, metadata_bytes: int | None = None) -> Path:
    """Copies a fixture savepoint to dest; with metadata_bytes, _metadata is cut there (being written)."""
    shutil.copytree(savepoint_dir(case), dest)
    (dest / STATE_INFO_FILE).unlink(missing_ok=True)
    if metadata_bytes is not None:
        data = (dest / "_metadata").read_bytes()
        (dest / "_metadata").write_bytes(data[:metadata_bytes])
    return dest


def _finish_metadata(case: str, dest: Path) -> None:
    # Appends the rest, as a writer would: same file, growing.
    full = (savepoint_dir(case) / "_metadata").read_bytes()
    have = (dest / "_metadata").stat().st_size
    with open(dest / "_metadata", "ab") as f:
        f.write(full[have:])


def _state_files(savepoint: Path) -> list[Path]:
    return sorted(p for p in savepoint.iterdir() if p.name not in ("_metadata", STATE_INFO_FILE))


def _kinds(events):
    return {(e.kind, Path(e.path).name) for e in events}


def _until(watcher: Watcher, done, limit: int = 10):
    """Polls until done(all events so far) holds; a bounded number of polls, no sleeping."""
    events = []
    for _ in range(limit):
        events += watcher.poll()
        if done(events):
            return events
    raise AssertionError(f"condition not reached in {limit} polls: {[(e.kind, e.path) for e in events]}")


def test_each_savepoint_gets_exactly_one_state_info(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    _place(GOOD[0], root / "savepoint-aaaaaa-000000000001")
    # half-written when the watcher starts
    half = _place(GOOD[1], root / "job1" / "chk-7", metadata_bytes=3000)
    (root / "job1" / "chk-8").mkdir()  # in progress: no _metadata yet
    (root / "job1" / "shared").mkdir()
    watcher = Watcher([str(root)])
    events = _until(watcher, lambda ev: ("snapshot", "savepoint-aaaaaa-000000000001") in _kinds(ev))
    assert not (half / STATE_INFO_FILE).exists()
    # a new savepoint appears; the half-written one completes
    _place(GOOD[2], root / "savepoint-bbbbbb-000000000002")
    _finish_metadata(GOOD[1], half)
    events += _until(
        watcher, lambda ev: {("snapshot", "chk-7"), ("snapshot", "savepoint-bbbbbb-000000000002")} <= _kinds(ev)
    )
    writes = [e for e in events if e.kind == "snapshot"]
    assert sorted(Path(e.path).name for e in writes) == [
        "chk-7",
        "savepoint-aaaaaa-000000000001",
        "savepoint-bbbbbb-000000000002",
    ]
    stamps = {p: p.stat().st_mtime_ns for p in root.rglob(STATE_INFO_FILE)}
    assert len(stamps) == 3
    # quiet polls write nothing
    for _ in range(3):
        assert not [e for e in watcher.poll() if e.kind == "snapshot"]
    assert {p: p.stat().st_mtime_ns for p in root.rglob(STATE_INFO_FILE)} == stamps
    for sp in stamps:
        assert read_state_info(savepoint=str(sp.parent)) == load_state_meta(str(sp.parent), use_state_info=False)
    # a restarted watcher finds them done and writes nothing
    again = Watcher([str(root)]).poll() + []
    assert {e.kind for e in again} == {"done"} and len(again) == 3
    assert {p: p.stat().st_mtime_ns for p in root.rglob(STATE_INFO_FILE)} == stamps


def test_corrupt_and_unreadable_savepoints_are_skipped_and_partial_ones_waited_for(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="statecat.watch")
    root = tmp_path / "root"
    root.mkdir()
    good = _place(GOOD[0], root / "savepoint-good")
    corrupt = root / "savepoint-corrupt"
    corrupt.mkdir()
    (corrupt / "_metadata").write_bytes(b"garbage, not a _metadata file" * 10)
    # partial: a state file the _metadata refers to is missing (still being copied)
    partial = _place(GOOD[0], root / "savepoint-partial")
    state_files = _state_files(partial)
    assert state_files
    held_back = state_files[0].read_bytes()
    state_files[0].unlink()
    # unreadable: a state file that is a directory (root ignores file modes, so chmod would not do)
    unreadable = _place(GOOD[0], root / "savepoint-unreadable")
    victim = _state_files(unreadable)[0]
    victim.unlink()
    victim.mkdir()
    watcher = Watcher([str(root)])
    events = _until(
        watcher, lambda ev: len({e.path for e in ev if e.kind in ("snapshot", "skipped", "incomplete")}) == 4
    )
    kinds = {Path(e.path).name: e.kind for e in events if e.kind in ("snapshot", "skipped", "incomplete")}
    assert kinds == {
        "savepoint-good": "snapshot",
        "savepoint-corrupt": "skipped",
        "savepoint-partial": "incomplete",
        "savepoint-unreadable": "skipped",
    }
    assert (good / STATE_INFO_FILE).is_file()
    for bad in (corrupt, partial, unreadable):
        assert not (bad / STATE_INFO_FILE).exists()
    logged = caplog.text
    assert "savepoint-corrupt" in logged and "magic" in logged
    assert "not a regular file" in logged
    assert f"waiting for {partial}" in logged and "missing" in logged
    # skipped ones are not retried (nor re-logged) while their _metadata stays the same; the
    # partial one is looked at again (a stat per state file) but logged once
    caplog.clear()
    again = watcher.poll() + watcher.poll()
    assert [(e.kind, Path(e.path).name) for e in again] == [("incomplete", "savepoint-partial")] * 2
    assert caplog.text == ""
    # the missing file arrives: the partial savepoint is processed, once
    state_files[0].write_bytes(held_back)
    events = _until(watcher, lambda ev: ("snapshot", "savepoint-partial") in _kinds(ev))
    assert read_state_info(savepoint=str(partial)) == load_state_meta(str(partial), use_state_info=False)
    # a repaired one is picked up
    shutil.rmtree(corrupt)
    _place(GOOD[3], corrupt)
    events = _until(watcher, lambda ev: ("snapshot", "savepoint-corrupt") in _kinds(ev))
    assert (corrupt / STATE_INFO_FILE).is_file()
    assert [e.kind for e in watcher.poll() + watcher.poll()] == []  # unreadable stays skipped, silently


# Savepoints copied into a watched directory file by file, in the orders a copy tool or a store may
# use. Fixture cases with state files next to _metadata, in two _metadata versions.
COPIED = ("sql_groupby_hashmap_2.3", "sql_groupby_rocksdb_1.20")


def _quiet_polls(watcher: Watcher, savepoint: Path, polls: int = 3) -> list[str]:
    """Polls a few times; the savepoint must get no stateInfo. Returns its event kinds."""
    kinds = [e.kind for _ in range(polls) for e in watcher.poll() if e.path == str(savepoint)]
    assert not (savepoint / STATE_INFO_FILE).exists()
    assert "snapshot" not in kinds and "unchanged" not in kinds
    return kinds


def _processed_once(watcher: Watcher, savepoint: Path, case: str) -> None:
    """The savepoint gets its stateInfo within a few polls, exactly once, with the right content."""
    events = _until(watcher, lambda ev: any(e.kind == "snapshot" for e in ev))
    events += watcher.poll() + watcher.poll() + watcher.poll()
    assert [e.kind for e in events if e.path == str(savepoint) and e.kind in ("snapshot", "unchanged")] == ["snapshot"]
    stamp = (savepoint / STATE_INFO_FILE).stat().st_mtime_ns
    assert not [e for e in watcher.poll() + watcher.poll() if e.path == str(savepoint)]
    assert (savepoint / STATE_INFO_FILE).stat().st_mtime_ns == stamp
    assert read_state_info(savepoint=str(savepoint)) == load_state_meta(str(savepoint), use_state_info=False)
    assert sorted(p.name for p in _state_files(savepoint)) == sorted(p.name for p in _state_files(savepoint_dir(case)))


@pytest.mark.parametrize("case", COPIED)
def test_metadata_copied_first_waits_for_every_state_file(tmp_path, case):
    source, savepoint = savepoint_dir(case), tmp_path / "root" / "savepoint-copy"
    savepoint.mkdir(parents=True)
    shutil.copyfile(source / "_metadata", savepoint / "_metadata")
    watcher = Watcher([str(tmp_path / "root")])
    files = _state_files(source)
    assert len(files) >= 2
    for f in files:
        assert "incomplete" in _quiet_polls(watcher, savepoint)
        shutil.copyfile(f, savepoint / f.name)
    _processed_once(watcher, savepoint, case)


@pytest.mark.parametrize("case", COPIED)
def test_metadata_copied_last_is_processed_once_it_arrives(tmp_path, case):
    source, savepoint = savepoint_dir(case), tmp_path / "root" / "savepoint-copy"
    savepoint.mkdir(parents=True)
    watcher = Watcher([str(tmp_path / "root")])
    for f in _state_files(source):
        assert _quiet_polls(watcher, savepoint) == []  # no _metadata: not a savepoint yet
        shutil.copyfile(f, savepoint / f.name)
    shutil.copyfile(source / "_metadata", savepoint / "_metadata")
    _processed_once(watcher, savepoint, case)


@pytest.mark.parametrize("case", COPIED)
def test_metadata_written_in_pieces_is_processed_when_whole(tmp_path, case):
    source, savepoint = savepoint_dir(case), tmp_path / "root" / "savepoint-copy"
    savepoint.mkdir(parents=True)
    data = (source / "_metadata").read_bytes()
    watcher = Watcher([str(tmp_path / "root")])
    # _metadata grows in three pieces, before its state files are there, then they arrive
    for end in (len(data) // 3, 2 * len(data) // 3):
        (savepoint / "_metadata").write_bytes(data[:end])
        kinds = _quiet_polls(watcher, savepoint)
        assert kinds.count("skipped") == 1  # a cut _metadata does not parse: reported once per change
    (savepoint / "_metadata").write_bytes(data)
    assert "incomplete" in _quiet_polls(watcher, savepoint)
    for f in _state_files(source):
        shutil.copyfile(f, savepoint / f.name)
    _processed_once(watcher, savepoint, case)


@pytest.mark.parametrize("case", COPIED)
def test_truncated_state_files_are_waited_for(tmp_path, case):
    source, savepoint = savepoint_dir(case), tmp_path / "root" / "savepoint-copy"
    savepoint.mkdir(parents=True)
    files = _state_files(source)
    for f in files:
        (savepoint / f.name).write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    shutil.copyfile(source / "_metadata", savepoint / "_metadata")
    watcher = Watcher([str(tmp_path / "root")])
    for f in files:
        kinds = _quiet_polls(watcher, savepoint)
        assert "incomplete" in kinds and "skipped" not in kinds
        with open(savepoint / f.name, "ab") as out:  # the writer finishes this file
            out.write(f.read_bytes()[f.stat().st_size // 2 :])
    _processed_once(watcher, savepoint, case)


def test_a_copied_state_info_does_not_make_an_incomplete_savepoint_ready(tmp_path):
    """_metadata and a matching stateInfo arrive first: the savepoint is handed on (e.g. to
    --attach) only once its state files are there, and once."""
    source = _place(COPIED[0], tmp_path / "source" / "savepoint-copy")
    from statecat.statemeta.snapshotter.stateinfo import snapshot

    snapshot(str(source))
    savepoint = tmp_path / "root" / "savepoint-copy"
    savepoint.mkdir(parents=True)
    for name in ("_metadata", STATE_INFO_FILE):
        shutil.copyfile(source / name, savepoint / name)
    ready = []
    watcher = Watcher([str(tmp_path / "root")], on_ready=ready.append)
    kinds = [e.kind for _ in range(3) for e in watcher.poll()]
    assert "incomplete" in kinds and not {"done", "snapshot", "unchanged"} & set(kinds) and ready == []
    for f in _state_files(source):
        shutil.copyfile(f, savepoint / f.name)
    events = _until(watcher, lambda ev: bool(ready))
    events += watcher.poll() + watcher.poll()
    assert ready == [str(savepoint)]
    # processed once; rewritten, since the copied stateInfo records the source's path
    assert [e.kind for e in events if e.kind in ("snapshot", "unchanged", "done")] == ["snapshot"]
    assert json.loads((savepoint / STATE_INFO_FILE).read_text())["savepoint"]["path"] == str(savepoint)


def test_a_state_file_one_byte_short_is_incomplete(tmp_path):
    """The check is exact: every byte the handles record must be there."""
    from statecat.statemeta.files.metadata import read_metadata
    from statecat.statemeta.files.storage import open_storage
    from statecat.statemeta.snapshotter.completeness import required_sizes, shortfalls

    savepoint = _place(COPIED[0], tmp_path / "savepoint-x")
    storage = open_storage(str(savepoint))
    needed = required_sizes(read_metadata(storage))
    assert {Path(p).name for p in needed} == {p.name for p in _state_files(savepoint)}
    assert shortfalls(storage, needed) == []
    victim = next(Path(p) for p in needed)
    assert needed[str(victim)] == victim.stat().st_size  # the handles cover the whole file
    with open(victim, "r+b") as f:
        f.truncate(victim.stat().st_size - 1)
    [short] = shortfalls(storage, needed)
    assert (short.path, short.needed, short.actual) == (str(victim), needed[str(victim)], needed[str(victim)] - 1)
    victim.unlink()
    [short] = shortfalls(storage, needed)
    assert short.actual is None and "missing" in str(short)


def test_a_corrupt_savepoint_does_not_stop_the_watcher(tmp_path, caplog):
    """Damage found only when the state is read (the snapshot), after the completeness check."""
    root = tmp_path / "root"
    damaged = _place(COPIED[0], root / "savepoint-damaged")
    for f in _state_files(damaged):  # full length, wrong bytes
        f.write_bytes(b"\xff" * f.stat().st_size)
    watcher = Watcher([str(root)])
    events = _until(watcher, lambda ev: any(e.kind == "skipped" for e in ev))
    assert not (damaged / STATE_INFO_FILE).exists() and "savepoint-damaged" in caplog.text
    good = _place(COPIED[1], root / "savepoint-good")
    _processed_once(watcher, good, COPIED[1])
    assert not [e for e in events + watcher.poll() if e.path == str(damaged) and e.kind == "snapshot"]


def test_watch_once_exits_1_while_a_savepoint_is_incomplete(tmp_path):
    from statecat.catalog.cli import main

    root = tmp_path / "root"
    savepoint = _place(COPIED[0], root / "savepoint-x")
    victim = _state_files(savepoint)[0]
    data = victim.read_bytes()
    victim.write_bytes(data[:-1])
    assert main(["watch", str(root), "--once"]) == 1
    assert not (savepoint / STATE_INFO_FILE).exists()
    victim.write_bytes(data)
    assert main(["watch", str(root), "--once"]) == 0
    assert read_state_info(savepoint=str(savepoint)) == load_state_meta(str(savepoint), use_state_info=False)


def test_output_dir_mirrors_the_roots(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    _place(GOOD[0], root / "j" / "chk-1")
    out = tmp_path / "out"
    watcher = Watcher([str(root)], output=str(out))
    _until(watcher, lambda ev: any(e.kind == "snapshot" for e in ev))
    assert (out / "j" / "chk-1" / STATE_INFO_FILE).is_file()
    assert not (root / "j" / "chk-1" / STATE_INFO_FILE).exists()
    assert {e.kind for e in Watcher([str(root)], output=str(out)).poll()} == {"done"}


def test_poll_cost_is_bounded(tmp_path, monkeypatch):
    """A poll stats _metadata files and lists directories; it never opens a file it has seen."""
    root = tmp_path / "root"
    root.mkdir()
    for i in range(3):
        _place(GOOD[0], root / f"savepoint-{i}")
    watcher = Watcher([str(root)])
    _until(watcher, lambda ev: sum(e.kind == "snapshot" for e in ev) == 3)
    from statecat.statemeta.snapshotter import watcher as watcher_module

    opened = []
    for name in ("snapshot", "_read_json", "is_fresh", "open_storage"):
        real = getattr(watcher_module, name)

        def spy(*a, _real=real, _name=name, **kw):
            opened.append(_name)
            return _real(*a, **kw)

        monkeypatch.setattr(watcher_module, name, spy)
    for _ in range(3):
        watcher.poll()
    assert opened == []  # nothing read: directory listings and _metadata stats only


def test_watch_cli_while_savepoints_appear(tmp_path):
    """The real command in a subprocess: savepoints appear while it runs, one written half-way."""
    root = tmp_path / "root"
    root.mkdir()
    _place(GOOD[0], root / "savepoint-first")
    half = _place(GOOD[1], root / "savepoint-half", metadata_bytes=2000)
    log = tmp_path / "watch.log"
    exe = Path(sys.executable).with_name("statecat")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "statecat.catalog.cli"]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd + ["watch", str(root), "--interval", "0.2"], stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_for(lambda: (root / "savepoint-first" / STATE_INFO_FILE).exists(), 60, log)
        _place(GOOD[2], root / "job" / "chk-3")
        _finish_metadata(GOOD[1], half)
        _wait_for(
            lambda: (half / STATE_INFO_FILE).exists() and (root / "job" / "chk-3" / STATE_INFO_FILE).exists(), 60, log
        )
        # a few more polls: nothing is written twice
        polls_before = log.read_text().count("wrote")
        _place(GOOD[3], root / "savepoint-last")
        _wait_for(lambda: (root / "savepoint-last" / STATE_INFO_FILE).exists(), 60, log)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    text = log.read_text()
    wrote = [line.split("wrote ", 1)[1].strip() for line in text.splitlines() if " wrote " in line]
    assert polls_before == 3
    assert sorted(wrote) == sorted(str(p) for p in root.rglob(STATE_INFO_FILE)), text
    assert len(wrote) == 4 and len(set(wrote)) == 4, text
    for p in root.rglob(STATE_INFO_FILE):
        json.loads(p.read_text())


def _wait_for(cond, timeout, log: Path):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.1)  # polling a file condition written by the subprocess
    raise AssertionError(f"timed out; watcher log:\n{log.read_text()}")


@pytest.mark.parametrize("bad", ["nonexistent"])
def test_missing_root_is_not_fatal(tmp_path, bad):
    watcher = Watcher([str(tmp_path / bad)])
    assert watcher.poll() == []
    (tmp_path / bad).mkdir()
    _place(GOOD[0], tmp_path / bad / "savepoint-x")
    _until(watcher, lambda ev: any(e.kind == "snapshot" for e in ev))
    assert os.path.exists(tmp_path / bad / "savepoint-x" / STATE_INFO_FILE)


def test_watch_applies_descriptors(tmp_path):
    import base64
    import zlib

    from tests.test_stateinfo_pyflink import DESCRIPTORS, PROCESS_MODE_METADATA

    root = tmp_path / "root"
    sp = root / "job" / "chk-12"
    sp.mkdir(parents=True)
    (sp / "_metadata").write_bytes(zlib.decompress(base64.b64decode("".join(PROCESS_MODE_METADATA))))
    path = tmp_path / "descriptors.json"
    path.write_text(json.dumps(DESCRIPTORS))
    from statecat.statemeta.descriptors import load_descriptors

    watcher = Watcher([str(root)], descriptors=load_descriptors(path))
    _until(watcher, lambda ev: any(e.kind == "snapshot" for e in ev))
    doc = json.loads((sp / STATE_INFO_FILE).read_text())
    names = {s["name"] for op in doc["operators"] for s in op["states"]}
    assert {"total_amount", "items", "per_tag", "last", "info"} <= names
    assert doc["descriptors"]["operators"] == DESCRIPTORS["operators"]
