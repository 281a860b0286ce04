"""``--descriptors FILE`` on the reading commands, on a read-only savepoint store.

A descriptor file used to reach readers only through a stateInfo written next to ``_metadata``;
read-only stores cannot hold one. ``read``, ``key``, ``diff`` and ``sql`` (with ``--attach``) now take
the file directly and apply it in memory; ``SavepointReader(path, descriptors=...)`` in Python.
The savepoint is the real PyFlink process-mode one of tests/test_stateinfo_pyflink.py, with its
ground truth (``_expected``: derived from the job's input, not from statecat).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from statecat.catalog.cli import main as cli_main
from statecat.readers import SavepointReader
from tests.fixtures.expected import iter_states, load_expected, savepoint_dir
from tests.test_stateinfo_pyflink import DESCRIPTORS, _expected, _key, process_savepoint  # noqa: F401 - fixture

BIN = Path(sys.executable).parent
TIMEOUT = 300


def _files(root: Path) -> dict:
    """Every file under ``root`` with its size and mtime: what a reader must leave as it was."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def _read_only(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


@pytest.fixture
def store(process_savepoint, tmp_path):  # noqa: F811 - the imported fixture
    """A read-only copy of the savepoint (as a store statecat may not write to), and the descriptor file."""
    copy = tmp_path / "store" / "declared_job"
    shutil.copytree(process_savepoint, copy)
    _read_only(copy.parent)
    descriptors = tmp_path / "descriptors.json"
    descriptors.write_text(json.dumps(DESCRIPTORS))
    before = _files(copy)
    yield copy, descriptors
    assert _files(copy) == before, "a reader wrote into the savepoint store"
    for p in [copy.parent, copy, *copy.rglob("*")]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)


def test_reader_takes_descriptors_directly(store):
    copy, descriptors = store
    expected = _expected()
    for given in (str(descriptors), DESCRIPTORS):
        reader = SavepointReader(str(copy), descriptors=given)
        assert not [s.name for _, s in reader.meta.states() if s.name.startswith("python-state-")]
        for name, want in expected.items():
            got = {_key(r["key"]): r["value"] for r in reader.table(name, "stateful-fn").to_pylist()}
            if name == "per_tag":
                got = {k: dict(v) for k, v in got.items()}
            assert got == want, name
    assert not (copy / "stateInfo").exists()


def test_read_with_descriptors(store, capsys):
    copy, descriptors = store
    assert cli_main(["read", str(copy), "--state", "total_amount", "--descriptors", str(descriptors)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {_key(r["key"]): r["value"] for r in rows} == _expected()["total_amount"]
    # without the file the state keeps its stored name (either name finds it) and reads as bytes, saying why
    assert cli_main(["read", str(copy), "--state", "total_amount"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == len(_expected()["total_amount"])
    assert all(set(json.loads(line)["value"]) == {"hex"} for line in captured.out.splitlines())
    assert "python-state-total_amount: shown as bytes" in captured.err and "--descriptors FILE" in captured.err


def test_key_with_descriptors(store, capsys):
    copy, descriptors = store
    assert cli_main(["key", str(copy), "k3", "--descriptors", str(descriptors), "--format", "json"]) == 0
    view = json.loads(capsys.readouterr().out)
    values = {r["state"]: r["value"] for r in view["rows"]}
    expected = _expected()
    assert values["total_amount"] == expected["total_amount"]["k3"]
    assert values["items"] == expected["items"]["k3"]
    assert values["last"] == expected["last"]["k3"]


def test_history_with_descriptors(store, capsys):
    copy, descriptors = store
    assert cli_main(["history", str(copy), "k3", "--descriptors", str(descriptors), "--format", "json"]) == 0
    snapshots = json.loads(capsys.readouterr().out)["snapshots"]
    assert len(snapshots) == 1 and snapshots[0]["error"] is None
    values = {r["state"]: r["value"] for r in snapshots[0]["rows"]}
    expected = _expected()
    assert values["total_amount"] == expected["total_amount"]["k3"] and values["items"] == expected["items"]["k3"]


def test_diff_unpickles_thread_mode_pickles_in_python_too():
    from statecat.readers import diff_savepoints

    sp = str(savepoint_dir("datastream_thread_2.3"))
    summary = diff_savepoints(sp, sp, states=["avg"], unpickle=True).summary()
    rows = {s["name"]: s["rows"] for _, s in iter_states(load_expected("datastream_thread_2.3"))}
    assert [(s.state, s.status, s.unchanged) for s in summary] == [("avg", "compared", len(rows["avg"]))]


def test_diff_with_descriptors(store, tmp_path, capsys):
    copy, descriptors = store
    assert (
        cli_main(["diff", str(copy), str(copy), "--descriptors", str(descriptors), "--format", "jsonl", "--summary"])
        == 0
    )
    summary = {e["state"]: e for e in map(json.loads, capsys.readouterr().out.splitlines())}
    for name in ("total_amount", "items", "per_tag", "last", "info"):
        assert summary[name]["status"] == "compared", summary[name]
        assert summary[name]["unchanged"] >= 20, summary[name]
        assert summary[name]["added"] == summary[name]["removed"] == summary[name]["changed"] == 0


def test_diff_unpickles_thread_mode_pickles_with_the_flag(capsys):
    """Two savepoints of the same thread-mode job and input (2.3 vs 1.20 hold other inputs: not used)."""
    sp = str(savepoint_dir("datastream_thread_2.3"))
    assert cli_main(["diff", sp, sp, "--unpickle", "--state", "avg", "--format", "jsonl", "--summary"]) == 0
    entries = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    rows = {s["name"]: s["rows"] for _, s in iter_states(load_expected("datastream_thread_2.3"))}
    assert [(e["state"], e["status"], e["unchanged"]) for e in entries] == [("avg", "compared", len(rows["avg"]))]


def test_a_bad_descriptor_file_is_one_clear_error(store, tmp_path, capsys):
    copy, _ = store
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    for command in (["read", str(copy), "--state", "x"], ["key", str(copy), "k1"], ["diff", str(copy), str(copy)]):
        assert cli_main(command + ["--descriptors", str(bad)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "bad.json" in err[0] and "cannot read the descriptor file" in err[0], err
    assert cli_main(["read", str(copy), "--state", "x", "--descriptors", str(tmp_path / "missing.json")]) == 2
    assert "no such descriptor file" in capsys.readouterr().err
    # sql applies a file to the savepoints it attaches: without --attach there are none (no Spark started)
    assert cli_main(["sql", "--descriptors", str(bad), "SELECT 1"]) == 2
    assert "--descriptors applies to the savepoints --attach ROOT names" in capsys.readouterr().err


@pytest.mark.spark
def test_sql_attach_with_descriptors_reads_declared_tables(store, tmp_path):
    """`statecat sql --attach ROOT --descriptors FILE "QUERY"`: the tables Spark's workers read apply the file."""
    copy, descriptors = store
    home = tmp_path / "home"
    query = (
        "SELECT t.key, t.value AS total, p.value AS per_tag, l.value AS last "
        "FROM declared_job.total_amount t JOIN declared_job.per_tag p ON t.key = p.key "
        "JOIN declared_job.last l ON t.key = l.key"
    )
    exe = BIN / "statecat"
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "statecat.catalog.cli"]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "STATECAT_HOME": str(home)}
    done = subprocess.run(
        command + ["sql", "--attach", str(copy), "--descriptors", str(descriptors), "--format", "json", query],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    expected = _expected()
    assert len(rows) == 20
    for row in rows:
        key = row["key"]
        assert row["total"] == expected["total_amount"][key]
        assert row["per_tag"] == expected["per_tag"][key]
        assert row["last"] == expected["last"][key]
