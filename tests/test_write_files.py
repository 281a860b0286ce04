"""What `statecat write SRC --out DST` does to files (writers/savepoint_writer.py, writers/temp_dirs.py):
nothing a user owns is lost. --overwrite replaces only a savepoint; SIGINT and SIGTERM remove the
hidden directory DST is built in, SIGKILL's leftovers go at the next write (never a live process's);
DST gets Flink's permissions under the umask; a full disk, a read-only parent or a file where a
directory must be is one line and leaves nothing. No Spark: rewrites without SQL edits."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from statecat.catalog.cli import main
from statecat.statemeta.errors import Interrupted
from statecat.statemeta.files.metadata import read_metadata
from statecat.writers import publish, savepoint_writer, temp_dirs
from statecat.writers.savepoint_writer import write_savepoint
from statecat.writers.temp_dirs import MARKER, PARTIAL_MARKER, make_temp_dir, remove_stale_temp_dirs
from tests.fixtures.expected import savepoint_dir

HEAP = "sql_groupby_hashmap_2.3"
ROCKSDB = "sql_groupby_rocksdb_2.3"
SEED = 20260529
TIMEOUT = 120  # seconds any one subprocess may take (a write takes about 3 on a loaded 2-core machine)
UUID_NAME = "01234567-89ab-cdef-0123-456789abcdef"


def _tree(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` with its kind, mode and bytes (a link: its target)."""
    out: dict[str, tuple] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory, name)
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                out[str(path.relative_to(root))] = ("link", os.readlink(path))
            elif stat.S_ISDIR(mode):
                out[str(path.relative_to(root))] = ("dir", stat.S_IMODE(mode))
            else:
                out[str(path.relative_to(root))] = ("file", stat.S_IMODE(mode), path.read_bytes())
    return out


def _write(capsys, *args) -> tuple[int, list[str]]:
    """`statecat write ARGS` in this process: its exit code and stderr lines."""
    capsys.readouterr()
    code = main(["write", *map(str, args)])
    return code, capsys.readouterr().err.splitlines()


def _temp_dirs(parent: Path) -> list[str]:
    return sorted(n for n in os.listdir(parent) if ".statecat-" in n)


def _is_whole(dst: Path) -> bool:
    """A whole savepoint: its _metadata parses, and its stateInfo (written last) is there."""
    names = set(os.listdir(dst))
    if not {"_metadata", "stateInfo"} <= names:
        return False
    read_metadata(str(dst))
    return True


# ----------------------------------------------------------------------------- --overwrite


def _savepoint_copy(path: Path, case: str = HEAP) -> Path:
    shutil.copytree(savepoint_dir(case), path)
    return path


def _notes_and_subdirectory(dst: Path) -> str:
    _savepoint_copy(dst)
    (dst / "notes.txt").write_text("what I changed and why\n")
    (dst / "drafts").mkdir()
    (dst / "drafts" / "plan.md").write_text("# plan\n")
    return "'drafts' (a directory)"  # sorted first among the foreign entries


def _two_savepoints(dst: Path) -> str:
    dst.mkdir()
    _savepoint_copy(dst / "sp1")
    _savepoint_copy(dst / "sp2", ROCKSDB)
    return "'sp1' (a directory)"


def _regular_file(dst: Path) -> str:
    dst.write_text("not a savepoint\n")
    return "expected a directory at"


def _state_files_without_metadata(dst: Path) -> str:
    dst.mkdir()
    (dst / UUID_NAME).write_bytes(b"\0" * 10)
    return "expected _metadata in"


def _link_to_a_savepoint(dst: Path) -> str:
    target = _savepoint_copy(dst.parent / "real")
    dst.symlink_to(target)
    return "got a symbolic link"


def _savepoint_with_a_link(dst: Path) -> str:
    _savepoint_copy(dst)
    (dst.parent / "elsewhere").write_text("mine\n")
    (dst / UUID_NAME).symlink_to(dst.parent / "elsewhere")
    return f"{UUID_NAME!r} (a symbolic link)"


@pytest.mark.parametrize(
    "make",
    [
        _notes_and_subdirectory,
        _two_savepoints,
        _regular_file,
        _state_files_without_metadata,
        _link_to_a_savepoint,
        _savepoint_with_a_link,
    ],
)
def test_overwrite_refuses_what_is_not_only_a_savepoint(tmp_path, capsys, make):
    dst = tmp_path / "out"
    named = make(dst)
    before = _tree(tmp_path)
    code, err = _write(capsys, savepoint_dir(HEAP), "--out", dst, "--overwrite")
    assert code == 2
    assert len(err) == 1 and str(dst) in err[0] and named in err[0], err
    assert err[0].startswith("statecat: error: --overwrite replaces only a savepoint: expected ")
    assert _tree(tmp_path) == before  # every byte, mode and link still there, nothing added


def test_overwrite_replaces_a_savepoint_statecat_wrote(tmp_path, capsys):
    dst = tmp_path / "out"
    assert _write(capsys, savepoint_dir(HEAP), "--out", dst)[0] == 0
    old = set(os.listdir(dst))
    code, err = _write(capsys, savepoint_dir(ROCKSDB), "--out", dst, "--overwrite")
    assert (code, err) == (0, [])
    assert os.listdir(tmp_path) == ["out"] and _is_whole(dst)
    assert read_metadata(str(dst)).operators[0].id == read_metadata(str(savepoint_dir(ROCKSDB))).operators[0].id
    assert not (old - {"_metadata", "stateInfo"}) & set(os.listdir(dst))  # the old state files are gone


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_overwrite_replaces_a_flink_savepoint(tmp_path, capsys, monkeypatch, exchange):
    dst = _savepoint_copy(tmp_path / "out")
    (dst / ".stateInfo.k2j4x9_a.tmp").write_text("{")  # what a killed `statecat snapshot` leaves
    flinks = set(os.listdir(dst)) - {"_metadata"}
    if not exchange:  # as where renameat2 is missing (not Linux) or the filesystem refuses it
        monkeypatch.setattr(publish, "_renameat2", lambda: None)
    code, err = _write(capsys, savepoint_dir(HEAP), "--out", dst, "--overwrite")
    assert (code, err) == (0, [])
    assert os.listdir(tmp_path) == ["out"] and _is_whole(dst)
    assert not flinks & set(os.listdir(dst))


def test_files_added_to_a_replaced_savepoint_meanwhile_are_kept(tmp_path, caplog):
    """The check before publishing leaves a short race: a replaced savepoint is removed file by
    file, so what appeared in it since is kept beside DST, not deleted."""
    old = _savepoint_copy(tmp_path / "old")
    (old / "notes.txt").write_text("mine\n")
    publish._remove_savepoint(str(old), str(tmp_path / "out"))
    (kept,) = _temp_dirs(tmp_path)
    assert kept.startswith(".out.statecat-kept-") and os.listdir(tmp_path) == [kept]
    assert os.listdir(tmp_path / kept) == ["notes.txt"]  # the savepoint's own files are gone
    assert (tmp_path / kept / "notes.txt").read_text() == "mine\n"
    assert "kept in" in caplog.text
    remove_stale_temp_dirs(str(tmp_path))  # unmarked and not empty: never removed
    assert (tmp_path / kept / "notes.txt").exists()


# ----------------------------------------------------------------------------- signals


def _default_signals() -> None:
    # A shell may start background jobs with SIGINT ignored, which Python (and statecat) respect.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _wait_for_temp_dir(parent: Path, process: subprocess.Popen) -> bool:
    """Polls until the write's hidden directory appears (True) or the process ends (False)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if _temp_dirs(parent):
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.001)
    raise AssertionError(f"no temporary directory in {parent} within {TIMEOUT} s")


def _signalled_write(parent: Path, case: str, extra: list[str], signum: int, delay: float) -> tuple[int, str]:
    """`statecat write` in a process that gets ``signum`` ``delay`` seconds into its write."""
    command = [sys.executable, "-m", "statecat.catalog.cli", "write", str(savepoint_dir(case))]
    return signalled_run(
        [*command, "--out", str(parent / "out"), *extra], signum, delay, lambda p: _wait_for_temp_dir(parent, p)
    )


def signalled_run(
    command: list[str], signum: int, delay: float, started: Callable[[subprocess.Popen], bool], env=None
) -> tuple[int, str]:
    """``command`` in a process that gets ``signum`` ``delay`` seconds after ``started(process)``
    says its work began (never when it says False: the process ended first); its exit code and stderr."""
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=_default_signals
    )
    try:
        if started(process):
            time.sleep(delay)  # the random moment, not a synchronisation
            process.send_signal(signum)
        _, err = process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, err


def _check_signalled(parent: Path, case: str, extra: list[str], signum: int, code: int, err: str, what: str) -> bool:
    """Checks what a signalled write left in ``parent``; True when the signal stopped it mid-write."""
    dst = parent / "out"
    stopped = not dst.exists()
    if signum == signal.SIGKILL:
        assert code in (0, -signal.SIGKILL), what
        if stopped:
            (left,) = _temp_dirs(parent)  # what a killed write leaves: its hidden directory
            assert left.startswith(".out.statecat-write-"), what
        # One more write into the same parent: nothing of statecat's but its DST is left.
        write_savepoint(str(savepoint_dir(case)), str(dst), overwrite=True, max_parallelism=256 if extra else None)
        assert os.listdir(parent) == ["out"] and _is_whole(dst), what
        return stopped
    assert _temp_dirs(parent) == [], what
    if stopped:
        assert code == 128 + signum, what
        assert err.splitlines() == [f"statecat: interrupted by {signum.name}: nothing written at {dst}"], what
    else:  # the signal came after the write, or while DST was renamed into place (then it waits)
        assert code in (0, 128 + signum, -signum) and _is_whole(dst), what
    return stopped


ATTEMPTS = 4


@pytest.mark.parametrize(
    "case,extra,max_delay",
    [
        (HEAP, [], 0.01),  # its write takes some 15-40 ms after the hidden directory appears
        (ROCKSDB, ["--max-parallelism", "256"], 0.4),  # re-keying: some 800 ms
    ],
    ids=["rewrite", "max-parallelism"],
)
def test_a_signal_during_a_write_leaves_no_temporary_directory(tmp_path, case, extra, max_delay):
    rng = random.Random(f"{SEED}-{case}")
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        bound = max_delay
        for attempt in range(ATTEMPTS):
            parent = tmp_path / f"{signum.name}-{attempt}"
            parent.mkdir()
            delay = rng.uniform(0, bound)
            code, err = _signalled_write(parent, case, extra, signum, delay)
            what = f"{signum.name} after {delay * 1000:.1f} ms: exit {code}, stderr {err!r}"
            if _check_signalled(parent, case, extra, signum, code, err, what):
                break
            bound /= 2  # the write was done before the signal came: this machine is faster
        else:
            raise AssertionError(f"{signum.name} came after the write in all {ATTEMPTS} attempts")


class _SignallingEditor:
    """Sends this process ``signum`` in the middle of the keyed stream (an editor of no key-group)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum

    def key_groups(self, operator_id):
        return frozenset(range(128))

    def edit(self, operator, key_group, entries):
        if key_group == 70:
            os.kill(os.getpid(), self.signum)
        return {}

    def operator_states(self, operator_id):
        return frozenset()

    def edit_elements(self, operator, state, subtask, elements):
        return elements


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_a_signal_while_overwriting_keeps_the_old_savepoint(tmp_path, signum):
    dst = _savepoint_copy(tmp_path / "out")
    before = _tree(tmp_path)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(Interrupted) as raised:
        write_savepoint(str(savepoint_dir(HEAP)), str(dst), overwrite=True, editor=_SignallingEditor(signum))
    assert raised.value.signum == signum
    assert raised.value.message == f"interrupted by {signum.name}: nothing written at {dst}"
    assert _tree(tmp_path) == before
    assert {s: signal.getsignal(s) for s in handlers} == handlers  # the previous handlers are back


def test_a_signal_while_dst_is_renamed_into_place_waits_for_the_cleanup(tmp_path, monkeypatch):
    """DST is whole once renamed: a signal then is held, and delivered to the previous handler."""
    received: list[int] = []
    original_publish = savepoint_writer._publish

    def signalled_publish(*args):
        os.kill(os.getpid(), signal.SIGTERM)
        original_publish(*args)

    monkeypatch.setattr(savepoint_writer, "_publish", signalled_publish)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        write_savepoint(str(savepoint_dir(ROCKSDB)), str(tmp_path / "out"))
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert received == [signal.SIGTERM]
    assert os.listdir(tmp_path) == ["out"] and _is_whole(tmp_path / "out")


def test_a_write_outside_the_main_thread_installs_no_handler(tmp_path):
    """Python installs signal handlers from the main thread only (else ValueError): a thread's
    write runs without them."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    failed: list[BaseException] = []

    def write():
        try:
            write_savepoint(str(savepoint_dir(ROCKSDB)), str(tmp_path / "out"))
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    thread.join(TIMEOUT)
    assert failed == [] and os.listdir(tmp_path) == ["out"] and _is_whole(tmp_path / "out")
    assert {s: signal.getsignal(s) for s in handlers} == handlers


def _marked(parent: Path, name: str, **marker) -> Path:
    """A temporary directory as a write of ``name`` made it, its marker's fields replaced."""
    path = Path(make_temp_dir(str(parent), name, "write"))
    doc = json.loads((path / MARKER).read_text())
    doc.update(marker)
    (path / MARKER).write_text(json.dumps(doc))
    (path / "savepoint").mkdir()
    (path / "savepoint" / UUID_NAME).write_bytes(b"state")
    return path


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait(timeout=TIMEOUT)
    return process.pid


def test_only_gone_processes_temporary_directories_are_removed(tmp_path):
    live = Path(make_temp_dir(str(tmp_path), "live", "write"))  # this process's: running
    own = json.loads((live / MARKER).read_text())
    dead = _marked(tmp_path, "dead", pid=_dead_pid())
    reused = _marked(tmp_path, "reused", start=(own["start"] or 0) - 1)  # this pid, an earlier process
    rebooted = _marked(tmp_path, "rebooted", boot="another-boot")
    other_host = _marked(tmp_path, "remote", pid=_dead_pid(), host=socket.gethostname() + "-elsewhere")
    unmarked = _marked(tmp_path, "unmarked", pid=_dead_pid())
    (unmarked / MARKER).unlink()
    damaged = _marked(tmp_path, "damaged")
    (damaged / MARKER).write_text("{")
    linked = _marked(tmp_path, "linked", pid=_dead_pid())
    (tmp_path / "marker-elsewhere").write_text((linked / MARKER).read_text())
    (linked / MARKER).unlink()
    (linked / MARKER).symlink_to(tmp_path / "marker-elsewhere")
    misnamed = tmp_path / ".notes.statecat-write"  # no random suffix: not statecat's name
    shutil.copytree(dead, misnamed)
    empty = Path(make_temp_dir(str(tmp_path), "empty", "write"))  # killed before it was marked
    (empty / MARKER).unlink()
    half = Path(make_temp_dir(str(tmp_path), "half", "write"))  # killed while it was marked
    (half / MARKER).rename(half / PARTIAL_MARKER)
    expected_gone = {dead.name, empty.name, half.name}
    if own["start"] is not None:  # /proc tells a reused pid's start time apart
        expected_gone.add(reused.name)
    if own["boot"] is not None:  # and a reboot
        expected_gone.add(rebooted.name)
    before = set(os.listdir(tmp_path))

    write_savepoint(str(savepoint_dir(ROCKSDB)), str(tmp_path / "out"))
    assert set(os.listdir(tmp_path)) == (before - expected_gone) | {"out"}
    assert (live / MARKER).is_file() and (misnamed / "savepoint" / UUID_NAME).is_file()
    assert other_host.exists() and unmarked.exists() and damaged.exists() and linked.exists()
    shutil.rmtree(live)


class _Killed(BaseException):
    """The process dying at one step of a cleanup."""


def test_a_cleanup_killed_at_any_step_leaves_a_directory_the_next_write_removes(tmp_path, monkeypatch):
    """A temporary directory's own cleanup removes its marker last: killed at any step, what is left
    still names the gone process or is empty (rmtree's order could remove the marker first and leave files
    no cleaner may touch: CI saw one such directory after a SIGKILL during an upload's cleanup)."""
    real = {"unlink": os.unlink, "rmdir": os.rmdir, "rmtree": shutil.rmtree}
    step = 0
    while True:
        parent = tmp_path / f"step-{step}"
        parent.mkdir()
        temp = _marked(parent, "out", pid=_dead_pid())
        for name in ("_metadata", "stateInfo"):
            (temp / "savepoint" / name).write_bytes(b"x")
        calls = 0

        def dies_at_step(name, *args, _step=step, **kwargs):
            nonlocal calls
            calls += 1
            if calls > _step:
                raise _Killed
            return real[name](*args, **kwargs)

        for name in real:
            module = shutil if name == "rmtree" else os
            monkeypatch.setattr(module, name, lambda *a, _n=name, **k: dies_at_step(_n, *a, **k))
        try:
            temp_dirs.remove_temp_dir(str(temp))
            finished = True
        except _Killed:
            finished = False
        finally:
            monkeypatch.undo()
        if finished:
            assert not temp.exists()
            break
        # Gone, still marked, or empty (killed between the marker and the directory): the next
        # write removes each of these, and nothing else unmarked.
        left_as = sorted(os.listdir(temp)) if temp.exists() else None
        assert left_as is None or not left_as or MARKER in left_as, f"killed at step {step}: {left_as}"
        left = [str(temp)] if temp.exists() else []
        assert remove_stale_temp_dirs(str(parent)) == left
        assert os.listdir(parent) == []
        step += 1
    assert step >= 3  # the savepoint, the other files, the marker, the directory: each a step


def test_a_live_writes_temporary_directory_survives_a_concurrent_write(tmp_path):
    """Two writes into one parent: the running one's hidden directory is not stale."""
    running = Path(make_temp_dir(str(tmp_path), "out", "write"))
    write_savepoint(str(savepoint_dir(ROCKSDB)), str(tmp_path / "other"))
    assert sorted(os.listdir(tmp_path)) == sorted([running.name, "other"])
    assert remove_stale_temp_dirs(str(tmp_path)) == [] and running.exists()
    shutil.rmtree(running)


# ----------------------------------------------------------------------------- permissions


@pytest.mark.parametrize("umask,directory_mode,file_mode", [(0o022, 0o755, 0o644), (0o077, 0o700, 0o600)])
@pytest.mark.parametrize("max_parallelism", [None, 256], ids=["rewrite", "max-parallelism"])
def test_destination_gets_flinks_permissions_under_the_umask(
    tmp_path, umask, directory_mode, file_mode, max_parallelism
):
    dst = tmp_path / "out"
    previous = os.umask(umask)
    try:
        write_savepoint(str(savepoint_dir(ROCKSDB)), str(dst), max_parallelism=max_parallelism)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(dst.stat().st_mode) == directory_mode
    modes = {p.name: stat.S_IMODE(p.lstat().st_mode) for p in dst.iterdir()}
    assert {"_metadata", "stateInfo"} <= set(modes) and set(modes.values()) == {file_mode}, modes


# ----------------------------------------------------------------------------- the environment


@contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tiny filesystem of its own at ``path`` (root may write anywhere: only a mount says no)."""
    path.mkdir()
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    except FileNotFoundError:
        pytest.skip("cannot mount a tmpfs to fill or make read-only: no mount command")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill or make read-only: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        busy = subprocess.run(["umount", str(path)], capture_output=True, text=True, timeout=TIMEOUT)
        if busy.returncode != 0:  # detached all the same, so that no test leaves a mount behind
            subprocess.run(["umount", "-l", str(path)], timeout=TIMEOUT)
            raise AssertionError(f"a file of the write stayed open: {busy.stderr.strip()}")


def _read_only(path: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True, capture_output=True, timeout=TIMEOUT)


def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, capsys):
    # 64 KiB: the savepoint written is some 160 KiB.
    with _tmpfs(tmp_path / "small", "64k") as disk:
        dst = disk / "out"
        code, err = _write(capsys, savepoint_dir(HEAP), "--out", dst)
        assert (code, err) == (2, [f"statecat: error: cannot write {dst}: No space left on device"])
        assert os.listdir(disk) == []


def test_a_read_only_parent_is_one_line_and_leaves_nothing(tmp_path, capsys):
    with _tmpfs(tmp_path / "ro", "256k") as disk:
        (disk / "kept").mkdir()
        _read_only(disk)
        for dst, at in [(disk / "out", ""), (disk / "kept" / "out", ""), (disk / "new" / "out", f" ({disk / 'new'})")]:
            code, err = _write(capsys, savepoint_dir(HEAP), "--out", dst)
            assert (code, err) == (2, [f"statecat: error: cannot write {dst}: Read-only file system{at}"])
        assert os.listdir(disk) == ["kept"] and os.listdir(disk / "kept") == []


@pytest.mark.parametrize("below", ["out", "new/out"])
@pytest.mark.parametrize("overwrite", [False, True])
def test_a_file_where_a_directory_must_be_is_one_line(tmp_path, capsys, below, overwrite):
    parent = tmp_path / "file"
    parent.write_text("mine\n")
    dst = parent / below
    code, err = _write(capsys, savepoint_dir(HEAP), "--out", dst, *(["--overwrite"] if overwrite else []))
    assert (code, err) == (2, [f"statecat: error: cannot write {dst}: Not a directory ({parent})"])
    assert os.listdir(tmp_path) == ["file"] and parent.read_text() == "mine\n"


@pytest.mark.parametrize("kernel_copy", [True, False])
def test_a_truncated_state_file_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch, kernel_copy):
    # Untouched streams are copied unread (writers/output.py): by the kernel, or in chunks where it cannot.
    if not kernel_copy:
        monkeypatch.delattr(os, "copy_file_range")
    src = tmp_path / "src"
    shutil.copytree(savepoint_dir(HEAP), src)
    state_file = max((p for p in src.iterdir() if p.name != "_metadata"), key=lambda p: p.stat().st_size)
    size = state_file.stat().st_size
    state_file.write_bytes(state_file.read_bytes()[: size // 2])
    dst = tmp_path / "out"
    code, err = _write(capsys, src, "--out", dst)
    assert code == 2 and len(err) == 1, err
    assert f"expected {size - size // 2} more bytes of state, the file ends at offset {size // 2}" in err[0], err
    assert str(state_file) in err[0] and "truncated" in err[0], err
    assert sorted(os.listdir(tmp_path)) == ["src"]
