"""`statecat watch`: every complete savepoint gets exactly one stateInfo; bad ones are skipped."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statecat.catalog.cmd_watch import Watcher
from statecat.statemeta.model import load_state_meta
from statecat.statemeta.stateinfo import STATE_INFO_FILE, read_state_info
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
    events += _until(watcher, lambda ev: {("snapshot", "chk-7"), ("snapshot", "savepoint-bbbbbb-000000000002")}
                     <= _kinds(ev))
    writes = [e for e in events if e.kind == "snapshot"]
    assert sorted(Path(e.path).name for e in writes) == ["chk-7", "savepoint-aaaaaa-000000000001",
                                                          "savepoint-bbbbbb-000000000002"]
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


def test_corrupt_partial_and_unreadable_savepoints_are_reported_and_skipped(tmp_path, caplog):
    root = tmp_path / "root"
    root.mkdir()
    good = _place(GOOD[0], root / "savepoint-good")
    corrupt = root / "savepoint-corrupt"
    corrupt.mkdir()
    (corrupt / "_metadata").write_bytes(b"garbage, not a _metadata file" * 10)
    # partial: a state file the _metadata refers to is missing
    partial = _place(GOOD[0], root / "savepoint-partial")
    state_files = [p for p in partial.iterdir() if p.name not in ("_metadata",)]
    assert state_files
    state_files[0].unlink()
    # unreadable: a state file that is a directory (root ignores file modes, so chmod would not do)
    unreadable = _place(GOOD[0], root / "savepoint-unreadable")
    victim = next(p for p in unreadable.iterdir() if p.name != "_metadata")
    victim.unlink()
    victim.mkdir()
    watcher = Watcher([str(root)])
    events = _until(watcher, lambda ev: len({e.path for e in ev if e.kind in ("snapshot", "skipped")}) == 4)
    kinds = {Path(e.path).name: e.kind for e in events if e.kind in ("snapshot", "skipped")}
    assert kinds == {"savepoint-good": "snapshot", "savepoint-corrupt": "skipped",
                     "savepoint-partial": "skipped", "savepoint-unreadable": "skipped"}
    assert (good / STATE_INFO_FILE).is_file()
    for bad in (corrupt, partial, unreadable):
        assert not (bad / STATE_INFO_FILE).exists()
    logged = caplog.text
    assert "savepoint-corrupt" in logged and "magic" in logged
    assert "missing" in logged
    # skipped ones are not retried (nor re-logged) while their _metadata stays the same
    caplog.clear()
    assert not [e for e in watcher.poll() + watcher.poll() if e.kind in ("skipped", "snapshot")]
    assert "skipping" not in caplog.text
    # a repaired one is picked up
    shutil.rmtree(corrupt)
    _place(GOOD[3], corrupt)
    events = _until(watcher, lambda ev: ("snapshot", "savepoint-corrupt") in _kinds(ev))
    assert (corrupt / STATE_INFO_FILE).is_file()


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
    from statecat.catalog import cmd_watch

    opened = []
    for name in ("snapshot", "_read_json", "is_fresh", "open_storage"):
        real = getattr(cmd_watch, name)

        def spy(*a, _real=real, _name=name, **kw):
            opened.append(_name)
            return _real(*a, **kw)
        monkeypatch.setattr(cmd_watch, name, spy)
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
        proc = subprocess.Popen(cmd + ["watch", str(root), "--interval", "0.2"], stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        _wait_for(lambda: (root / "savepoint-first" / STATE_INFO_FILE).exists(), 60, log)
        _place(GOOD[2], root / "job" / "chk-3")
        _finish_metadata(GOOD[1], half)
        _wait_for(lambda: (half / STATE_INFO_FILE).exists() and (root / "job" / "chk-3" / STATE_INFO_FILE).exists(),
                  60, log)
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
