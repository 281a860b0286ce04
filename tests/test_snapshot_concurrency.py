"""`statecat snapshot` run 8 times at once on one savepoint: one valid stateInfo, as one run writes it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from statecat.statemeta.model import load_state_meta
from statecat.statemeta.snapshotter.stateinfo import STATE_INFO_FILE, VOLATILE_FIELDS, read_state_info
from tests.fixtures.expected import savepoint_dir

PROCESSES = 8
CASE = "sql_window_2.3"
TIMEOUT = 300
# Each child imports statecat, then blocks on stdin until the parent releases all of them at once.
CHILD = """
import sys
from statecat.catalog.cli import main
sys.stdin.read(1)
sys.exit(main(["snapshot", sys.argv[1], "--json"]))
"""


def _content(path: Path) -> dict:
    doc = json.loads(path.read_text())
    return {k: v for k, v in doc.items() if k not in VOLATILE_FIELDS}


def test_eight_concurrent_snapshots_write_one_state_info(tmp_path):
    savepoint = tmp_path / "savepoint"
    shutil.copytree(savepoint_dir(CASE), savepoint)
    (savepoint / STATE_INFO_FILE).unlink(missing_ok=True)
    files_before = sorted(p.name for p in savepoint.iterdir())
    # What one run writes, alone.
    single = subprocess.run(
        [sys.executable, "-m", "statecat.catalog.cli", "snapshot", str(savepoint)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert single.returncode == 0, single.stderr
    expected = _content(savepoint / STATE_INFO_FILE)
    (savepoint / STATE_INFO_FILE).unlink()

    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(savepoint)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    for child in children:
        child.stdin.write("x")
        child.stdin.flush()
    results = [(*child.communicate(timeout=TIMEOUT), child.returncode) for child in children]
    for out, err, code in results:
        assert code == 0 and err == "", err
        reported = json.loads(out)
        assert reported["state_info"] == str(savepoint / STATE_INFO_FILE)
    assert any(json.loads(out)["written"] for out, _, _ in results)
    # One stateInfo, no temp files, Flink's files untouched.
    assert sorted(p.name for p in savepoint.iterdir()) == sorted(files_before + [STATE_INFO_FILE])
    for name in files_before:
        assert (savepoint / name).read_bytes() == (savepoint_dir(CASE) / name).read_bytes()
    assert _content(savepoint / STATE_INFO_FILE) == expected
    assert read_state_info(savepoint=str(savepoint)) == load_state_meta(str(savepoint), use_state_info=False)
    # Afterwards a run finds it current and leaves it as it is.
    stamp = (savepoint / STATE_INFO_FILE).stat().st_mtime_ns
    again = subprocess.run(
        [sys.executable, "-m", "statecat.catalog.cli", "snapshot", str(savepoint), "--json"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert again.returncode == 0 and json.loads(again.stdout)["written"] is False
    assert (savepoint / STATE_INFO_FILE).stat().st_mtime_ns == stamp
