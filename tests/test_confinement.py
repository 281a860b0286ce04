"""What a snapshot may make statecat read: its own job directory and the roots the user allows.

Every savepoint here is a copy of a real fixture whose handles were rewritten: a relative handle
(tag 6) becomes an absolute one (tag 2) naming a copy of the same state file elsewhere, a file
outside every allowed root (/etc/passwd), another filesystem's URI, or a symbolic link. Rows are
checked against the fixture's ground truth (expected.json) when a read is allowed.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from statecat.statemeta.errors import StateFileError
from statecat.statemeta.files.headers import read_keyed_header
from statecat.statemeta.files.metadata import read_metadata
from statecat.statemeta.files.storage import (
    ALLOWED_ROOTS_ENV,
    ALLOWED_ROOTS_OPTION,
    allow_roots_for_process,
    open_storage,
    split_roots,
)
from statecat.statemeta.model import load_state_meta
from statecat.statemeta.snapshotter.stateinfo import STATE_INFO_FILE, read_state_info, snapshot
from tests.acceptance import check_state_rows
from tests.fixtures.expected import case_dir, iter_states, load_expected

CASE = "sql_groupby_hashmap_2.3"  # keyed state in two relative state files, operator state inline
KEYED_STATE = "accState"


@pytest.fixture(autouse=True)
def _no_roots_from_the_environment(monkeypatch):
    # setenv first, so teardown restores the variable's absence even after allow_roots_for_process set it.
    monkeypatch.setenv(ALLOWED_ROOTS_ENV, "")
    monkeypatch.delenv(ALLOWED_ROOTS_ENV)


@pytest.fixture
def case(tmp_path) -> Path:
    """A copy of the fixture case (savepoint + expected.json), so rows can be checked after edits."""
    target = tmp_path / "case"
    shutil.copytree(case_dir(CASE), target)
    return target


def _relative_handles(metadata: bytes) -> list[tuple[int, str, int]]:
    """(position of the tag byte, relative path, size) of each tag-6 handle in ``metadata``."""
    found = []
    at = metadata.find(b"\x06")
    while at != -1:
        n = int.from_bytes(metadata[at + 1 : at + 3], "big")
        name = metadata[at + 3 : at + 3 + n]
        if n == 36 and name.count(b"-") == 4 and all(c in b"0123456789abcdef-" for c in name):
            size = struct.unpack(">q", metadata[at + 3 + n : at + 11 + n])[0]
            found.append((at, name.decode(), size))
        at = metadata.find(b"\x06", at + 1)
    return found


def _as_absolute_handle(savepoint: Path, index: int, uri: str) -> str:
    """Rewrites the ``index``-th relative handle of ``_metadata`` as an absolute one naming ``uri``."""
    metadata = (savepoint / "_metadata").read_bytes()
    at, name, size = _relative_handles(metadata)[index]
    encoded = uri.encode()
    absolute = b"\x02" + struct.pack(">q", size) + len(encoded).to_bytes(2, "big") + encoded
    (savepoint / "_metadata").write_bytes(metadata[:at] + absolute + metadata[at + 3 + len(name) + 8 :])
    return name


def _check_keyed_rows(case: Path) -> None:
    expected = load_expected(case)
    checked = 0
    for op, state in iter_states(expected):
        if state["name"] == KEYED_STATE:
            check_state_rows(case, op, state)
            checked += 1
    assert checked


def test_fixture_has_the_relative_handles_the_tests_rewrite(case):
    handles = _relative_handles((case / "savepoint" / "_metadata").read_bytes())
    assert len(handles) == 2
    assert all((case / "savepoint" / name).stat().st_size == size for _, name, size in handles)


def test_absolute_handle_to_a_system_file_is_refused_and_names_the_option(case):
    _as_absolute_handle(case / "savepoint", 0, "file:/etc/passwd")
    with pytest.raises(StateFileError) as error:
        load_state_meta(case / "savepoint", use_state_info=False)
    message = str(error.value)
    assert "/etc/passwd" in message and "outside the snapshot's directory" in message
    assert ALLOWED_ROOTS_ENV in message and ALLOWED_ROOTS_OPTION in message


def test_proc_environ_is_refused_even_through_dot_segments(case):
    _as_absolute_handle(case / "savepoint", 0, "file:/tmp/../proc/self/environ")
    with pytest.raises(StateFileError, match="outside the snapshot's directory"):
        load_state_meta(case / "savepoint", use_state_info=False)


def test_absolute_handle_elsewhere_reads_only_under_an_allowed_root(case, tmp_path, monkeypatch):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    name = _relative_handles((case / "savepoint" / "_metadata").read_bytes())[0][1]
    shutil.move(case / "savepoint" / name, outside / name)
    _as_absolute_handle(case / "savepoint", 0, f"file:{outside / name}")

    with pytest.raises(StateFileError, match=ALLOWED_ROOTS_ENV):
        load_state_meta(case / "savepoint", use_state_info=False)

    meta = load_state_meta(case / "savepoint", use_state_info=False, allowed_roots=[str(outside)])
    assert any(loc.stream.path == str(outside / name) for _, s in meta.states() for loc in s.locations)

    monkeypatch.setenv(ALLOWED_ROOTS_ENV, os.pathsep.join(["/nonexistent-root", str(outside)]))
    _check_keyed_rows(case)  # the readers open the savepoint themselves: the variable reaches them


def test_an_allowed_root_is_a_directory_boundary_not_a_string_prefix(case, tmp_path):
    outside = tmp_path / "elsewhere-2"
    outside.mkdir()
    name = _relative_handles((case / "savepoint" / "_metadata").read_bytes())[0][1]
    shutil.copy(case / "savepoint" / name, outside / name)
    _as_absolute_handle(case / "savepoint", 0, f"file:{outside / name}")
    with pytest.raises(StateFileError):
        load_state_meta(case / "savepoint", use_state_info=False, allowed_roots=[str(tmp_path / "elsewhere")])


def test_absolute_handle_inside_the_savepoint_needs_no_option(case):
    savepoint = case / "savepoint"
    name = _relative_handles((savepoint / "_metadata").read_bytes())[1][1]
    _as_absolute_handle(savepoint, 1, f"file://{savepoint.resolve() / name}")
    meta = load_state_meta(savepoint, use_state_info=False)
    kinds = {loc.stream.kind for _, s in meta.states() if s.name == KEYED_STATE for loc in s.locations}
    assert kinds == {"file", "relative"}
    _check_keyed_rows(case)


def test_other_filesystem_handle_in_a_local_savepoint_is_refused_not_read_from_the_cwd(case, tmp_path, monkeypatch):
    savepoint = case / "savepoint"
    name = _relative_handles((savepoint / "_metadata").read_bytes())[0][1]
    # The old behaviour read s3://bucket/NAME as ./bucket/NAME: put a real state file there.
    cwd = tmp_path / "cwd"
    (cwd / "bucket").mkdir(parents=True)
    shutil.copy(savepoint / name, cwd / "bucket" / name)
    monkeypatch.chdir(cwd)
    _as_absolute_handle(savepoint, 0, f"s3://bucket/{name}")
    with pytest.raises(StateFileError, match=r"another filesystem \(s3://\)") as error:
        load_state_meta(savepoint, use_state_info=False)
    assert ALLOWED_ROOTS_ENV in str(error.value)


def test_symlink_leaving_the_savepoint_is_refused_unless_allowed(case, tmp_path):
    savepoint = case / "savepoint"
    name = _relative_handles((savepoint / "_metadata").read_bytes())[0][1]
    outside = tmp_path / "linked"
    outside.mkdir()
    shutil.move(savepoint / name, outside / name)
    (savepoint / name).symlink_to(outside / name)
    with pytest.raises(StateFileError, match="outside the snapshot's directory"):
        load_state_meta(savepoint, use_state_info=False)
    load_state_meta(savepoint, use_state_info=False, allowed_roots=[str(outside)])


def test_symlink_to_a_system_file_is_refused(case):
    savepoint = case / "savepoint"
    name = _relative_handles((savepoint / "_metadata").read_bytes())[0][1]
    (savepoint / name).unlink()
    (savepoint / name).symlink_to("/etc/passwd")
    with pytest.raises(StateFileError, match="/etc/passwd|outside"):
        load_state_meta(savepoint, use_state_info=False)


def test_symlink_within_the_savepoint_is_followed(case):
    savepoint = case / "savepoint"
    name = _relative_handles((savepoint / "_metadata").read_bytes())[0][1]
    (savepoint / name).rename(savepoint / "renamed.bin")
    (savepoint / name).symlink_to("renamed.bin")
    _check_keyed_rows(case)


def test_savepoint_given_through_a_symlinked_path_reads(case, tmp_path):
    link = tmp_path / "link-to-savepoint"
    link.symlink_to(case / "savepoint", target_is_directory=True)
    meta = load_state_meta(link, use_state_info=False)
    assert {s.name for _, s in meta.states()} >= {KEYED_STATE}


def test_metadata_symlink_leaving_the_savepoint_is_refused(case, tmp_path):
    savepoint = case / "savepoint"
    shutil.move(savepoint / "_metadata", tmp_path / "real_metadata")
    (savepoint / "_metadata").symlink_to(tmp_path / "real_metadata")
    with pytest.raises(StateFileError, match="outside the snapshot's directory"):
        read_metadata(savepoint)


def test_edited_state_info_cannot_redirect_a_handle(case, tmp_path, monkeypatch):
    savepoint = case / "savepoint"
    snapshot(savepoint)
    outside = tmp_path / "redirected"
    outside.mkdir()
    doc = json.loads((savepoint / STATE_INFO_FILE).read_text())
    redirected = 0
    for op in doc["operators"]:
        for subtask in op["handles"]:
            keyed = subtask["managed_keyed"]
            if keyed and keyed["stream"]["kind"] == "relative":
                name = keyed["stream"]["path"]
                shutil.copy(savepoint / name, outside / name)
                keyed["stream"] = {**keyed["stream"], "kind": "file", "path": str(outside / name)}
                redirected += 1
    assert redirected == 2
    (savepoint / STATE_INFO_FILE).write_text(json.dumps(doc))

    meta = read_state_info(savepoint=str(savepoint))  # _metadata is unchanged: the document is "fresh"
    state = next(s for _, s in meta.states() if s.name == KEYED_STATE)
    location = state.locations[0]
    assert location.stream.path.startswith(str(outside))
    with pytest.raises(StateFileError, match=ALLOWED_ROOTS_ENV):
        read_keyed_header(meta.storage, location.stream, list(location.offsets))
    with pytest.raises(StateFileError, match="outside the snapshot's directory"):
        check_state_rows(case, *next((op, s) for op, s in iter_states(load_expected(case)) if s["name"] == KEYED_STATE))

    monkeypatch.setenv(ALLOWED_ROOTS_ENV, str(outside))
    _check_keyed_rows(case)


def test_state_info_relative_path_cannot_climb_out(case):
    savepoint = case / "savepoint"
    snapshot(savepoint)
    doc = json.loads((savepoint / STATE_INFO_FILE).read_text())
    keyed = next(s["managed_keyed"] for op in doc["operators"] for s in op["handles"] if s["managed_keyed"])
    keyed["stream"]["path"] = "../../../../etc/passwd"
    (savepoint / STATE_INFO_FILE).write_text(json.dumps(doc))
    with pytest.raises(StateFileError, match="outside the savepoint directory"):
        read_state_info(savepoint=str(savepoint))
    # load_state_meta ignores the damaged document and derives from _metadata
    meta = load_state_meta(savepoint)
    assert all(
        "etc/passwd" not in loc.stream.path
        for _, s in meta.states()
        for loc in s.locations
        if hasattr(loc.stream, "path")
    )


def _checkpoint_layout(tmp_path: Path, case: Path) -> tuple[Path, Path, str]:
    """A retained-checkpoint job directory: job/chk-7 holds _metadata, the state file lives elsewhere in job/."""
    job = tmp_path / "job"
    chk = job / "chk-7"
    shutil.copytree(case / "savepoint", chk)
    for sub in ("shared", "taskowned", "chk-6", "other"):
        (job / sub).mkdir()
    name = _relative_handles((chk / "_metadata").read_bytes())[0][1]
    return job, chk, name


@pytest.mark.parametrize("place", ["shared", "taskowned", "chk-6"])
def test_checkpoint_handles_may_point_into_the_job_directory(case, tmp_path, place):
    job, chk, name = _checkpoint_layout(tmp_path, case)
    shutil.move(chk / name, job / place / name)
    _as_absolute_handle(chk, 0, f"file:{job / place / name}")
    meta = load_state_meta(chk, use_state_info=False)
    assert any(loc.stream.path == str(job / place / name) for _, s in meta.states() for loc in s.locations)


@pytest.mark.parametrize("place", ["other", "."])
def test_checkpoint_handles_elsewhere_in_the_job_directory_are_refused(case, tmp_path, place):
    job, chk, name = _checkpoint_layout(tmp_path, case)
    shutil.move(chk / name, job / place / name)
    _as_absolute_handle(chk, 0, f"file:{(job / place / name).resolve()}")
    with pytest.raises(StateFileError, match="shared/, taskowned/ and chk-"):
        load_state_meta(chk, use_state_info=False)


def test_a_savepoint_may_not_read_its_siblings(case, tmp_path):
    parent = tmp_path / "savepoints"
    mine, sibling = parent / "savepoint-aaaa-1", parent / "savepoint-bbbb-2"
    shutil.copytree(case / "savepoint", mine)
    shutil.copytree(case / "savepoint", sibling)
    name = _relative_handles((mine / "_metadata").read_bytes())[0][1]
    _as_absolute_handle(mine, 0, f"file:{sibling / name}")
    with pytest.raises(StateFileError):
        load_state_meta(mine, use_state_info=False)


@pytest.mark.parametrize("make", ["fifo", "directory"])
def test_non_regular_state_file_is_refused_without_blocking(case, make):
    savepoint = case / "savepoint"
    name = _relative_handles((savepoint / "_metadata").read_bytes())[0][1]
    (savepoint / name).unlink()
    if make == "fifo":
        os.mkfifo(savepoint / name)
    else:
        (savepoint / name).mkdir()
    # A child process, so a regression (open() of a FIFO waits for a writer) fails the test instead of hanging it.
    child = subprocess.run(
        [sys.executable, "-m", "statecat.catalog.cli", "inspect", str(savepoint)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 2, child.stderr
    assert "not a regular file" in child.stderr and name in child.stderr
    assert "Traceback" not in child.stderr


def test_device_under_an_allowed_root_is_still_refused(case):
    savepoint = case / "savepoint"
    name = _relative_handles((savepoint / "_metadata").read_bytes())[0][1]
    _as_absolute_handle(savepoint, 0, "file:/dev/zero")
    with pytest.raises(StateFileError, match="character device"):
        load_state_meta(savepoint, use_state_info=False, allowed_roots=["/dev"])
    assert (savepoint / name).exists()  # the real file was not what was read


def test_fifo_metadata_is_not_a_savepoint(tmp_path):
    os.mkfifo(tmp_path / "_metadata")
    child = subprocess.run(
        [sys.executable, "-m", "statecat.catalog.cli", "inspect", str(tmp_path / "_metadata")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 2 and "not a savepoint" in child.stderr, child.stderr


def test_allowed_roots_from_keyword_and_environment_are_combined(case, tmp_path, monkeypatch):
    monkeypatch.setenv(ALLOWED_ROOTS_ENV, os.pathsep.join([str(tmp_path / "a"), "", "s3://bucket/prefix"]))
    storage = open_storage(str(case / "savepoint"), allowed_roots=[str(tmp_path / "b")])
    assert storage.allowed_roots == (str(tmp_path / "b"), str(tmp_path / "a"), "s3://bucket/prefix")


def test_environment_roots_keep_uris_whole():
    assert split_roots(os.pathsep.join(["/data/a", "s3://bucket/x", "file:/data/b", "", "gs://b/y"])) == (
        "/data/a",
        "s3://bucket/x",
        "file:/data/b",
        "gs://b/y",
    )


def test_allow_roots_for_process_reaches_later_opens(case, tmp_path, monkeypatch):
    outside = tmp_path / "process-root"
    outside.mkdir()
    name = _relative_handles((case / "savepoint" / "_metadata").read_bytes())[0][1]
    shutil.move(case / "savepoint" / name, outside / name)
    _as_absolute_handle(case / "savepoint", 0, f"file:{outside / name}")
    with pytest.raises(StateFileError):
        load_state_meta(case / "savepoint", use_state_info=False)
    allow_roots_for_process([str(outside), "s3://bucket/x"])
    allow_roots_for_process([str(outside)])  # idempotent
    assert split_roots(os.environ[ALLOWED_ROOTS_ENV]) == (str(outside), "s3://bucket/x")
    load_state_meta(case / "savepoint", use_state_info=False)


def test_cli_refuses_a_handle_outside_and_reads_it_with_allow_root(case, tmp_path):
    savepoint = case / "savepoint"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    name = _relative_handles((savepoint / "_metadata").read_bytes())[0][1]
    shutil.move(savepoint / name, elsewhere / name)
    _as_absolute_handle(savepoint, 0, f"file:{elsewhere / name}")
    command = [
        sys.executable,
        "-m",
        "statecat.catalog.cli",
        "read",
        str(savepoint),
        "--state",
        KEYED_STATE,
        "--format",
        "jsonl",
    ]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "--allow-root" in refused.stderr, refused.stderr
    allowed = subprocess.run([*command, "--allow-root", str(elsewhere)], capture_output=True, text=True, timeout=120)
    assert allowed.returncode == 0, allowed.stderr
    rows = [json.loads(line) for line in allowed.stdout.splitlines()]
    expected = next(state for _, state in iter_states(load_expected(case)) if state["name"] == KEYED_STATE)

    def by_key(items):
        return sorted(items, key=lambda row: row["key"])

    assert by_key(rows) == by_key(expected["rows"]) and rows
