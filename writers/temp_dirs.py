"""Temporary directories next to what statecat writes, and what removes them when a write stops.

    temp = make_temp_dir("/savepoints", "fixed", "write")   # /savepoints/.fixed.statecat-write-k2j4x9_a
    remove_stale_temp_dirs("/savepoints")                     # the ones killed runs left there

A temporary directory is named ``.{name}.statecat-{purpose}-XXXXXXXX`` and holds a marker file
(``.statecat-temp``: the process's pid, its start time, the host and the boot), written right after
the directory is made. A run killed by SIGKILL cannot remove its own; the next run in the same
parent removes it, but only a directory with statecat's name *and* a valid marker whose process is
gone (same host, and no process with that pid and start time), or one with statecat's name that is
still empty (killed before it was marked): another host's, a live process's and anything else
unmarked are left alone.

SIGINT and SIGTERM are turned into an exception while ``signals_raise()`` is active, so the
writer's cleanup runs as for any error and the process then exits as a signalled one would.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import signal
import socket
import stat
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from statecat.statemeta.errors import Interrupted

MARKER = ".statecat-temp"
PARTIAL_MARKER = MARKER + ".partial"
MAX_MARKER_BYTES = 4096
MAX_ATTEMPTS = 5
_PURPOSE = re.compile(r"[a-z]+")
# mkdtemp's suffix is 8 of [a-z0-9_]; the name part is any basename.
_TEMP_NAME = re.compile(r"\..+\.statecat-[a-z]+-[a-z0-9_]+", re.DOTALL)


def make_temp_dir(parent: str, name: str, purpose: str) -> str:
    """A new directory ``parent/.{name}.statecat-{purpose}-XXXXXXXX`` (mode 0700) holding the marker
    of this process, so ``remove_stale_temp_dirs`` can remove it if the process is killed.

    ``name``: what the directory is for (DST's basename); ``purpose``: lower-case letters (``write``,
    ``scratch``, ...). Raises OSError as ``tempfile.mkdtemp`` does; leaves nothing on any failure."""
    if not _PURPOSE.fullmatch(purpose):
        raise ValueError(f"expected a purpose of lower-case letters, got {purpose!r}")
    for _ in range(MAX_ATTEMPTS):
        path = tempfile.mkdtemp(prefix=f".{name}.statecat-{purpose}-", dir=parent)
        try:
            # Written under another name and renamed: a cleaner reads a whole marker or none.
            with open(os.path.join(path, PARTIAL_MARKER), "w", encoding="utf-8") as f:
                json.dump(process_marker(purpose), f)
            os.rename(os.path.join(path, PARTIAL_MARKER), os.path.join(path, MARKER))
            return path
        except FileNotFoundError:
            # Another process's cleaner took the still unmarked directory for a killed one's.
            shutil.rmtree(path, ignore_errors=True)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
    raise FileNotFoundError(errno.ENOENT, f"removed {MAX_ATTEMPTS} times as it was made", parent)


def remove_temp_dir(path: str) -> None:
    """Removes one of statecat's temporary directories, its marker last. A process killed on the
    way leaves a directory still marked, which the next run removes; ``shutil.rmtree``'s own order
    may take the marker first and leave an unmarked directory with files, which no cleaner touches."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        if entry.name == MARKER:
            continue
        with contextlib.suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(path, MARKER))
    with contextlib.suppress(OSError):
        os.rmdir(path)


def remove_stale_temp_dirs(parent: str) -> list[str]:
    """Removes the temporary directories in ``parent`` whose process is gone; returns their paths.

    A directory with statecat's name is removed when its marker names a gone process, or when it
    is unmarked and empty (a process killed between making and marking it: nothing to lose; a live
    one then makes another). Never raises for what it finds: what it cannot read or remove is left."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        if not _TEMP_NAME.fullmatch(entry.name):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
        except OSError:
            continue
        marker = _read_marker(entry.path)
        if marker is None:
            if _remove_unmarked(entry.path):
                removed.append(entry.path)
            continue
        if may_be_alive(marker):
            continue
        remove_temp_dir(entry.path)
        if not os.path.lexists(entry.path):
            removed.append(entry.path)
    return removed


def _remove_unmarked(path: str) -> bool:
    """Removes ``path`` if it holds nothing but a partial marker; never a file of anyone else's."""
    try:
        if not set(os.listdir(path)) <= {PARTIAL_MARKER}:
            return False
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(path, PARTIAL_MARKER))
        os.rmdir(path)  # fails if a live process marked it meanwhile
        return True
    except OSError:
        return False


def _read_marker(directory: str) -> dict[str, Any] | None:
    """The marker's document, or None when it is missing, not a regular file, too large or damaged."""
    try:
        fd = os.open(os.path.join(directory, MARKER), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, MAX_MARKER_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return parse_marker(data)


def process_marker(purpose: str) -> dict[str, Any]:
    """The marker document naming this process: pid, start time, host, boot and purpose."""
    doc: dict[str, Any] = {"pid": os.getpid(), "start": _start_time(os.getpid()), "host": socket.gethostname()}
    doc.update(boot=_boot_id(), purpose=purpose)
    return doc


def parse_marker(data: bytes) -> dict[str, Any] | None:
    """A marker's document from its bytes, or None when it is too large or damaged."""
    if len(data) > MAX_MARKER_BYTES:
        return None
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    if not isinstance(doc, dict) or type(doc.get("pid")) is not int or not isinstance(doc.get("host"), str):
        return None
    return doc


def may_be_alive(marker: dict[str, Any]) -> bool:
    """Whether the marker's process may still run: only a gone process's directory is removed."""
    if marker["host"] != socket.gethostname():
        return True  # another host's process cannot be seen from here
    boot = _boot_id()
    if boot is not None and isinstance(marker.get("boot"), str) and marker["boot"] != boot:
        return False  # the machine rebooted since
    pid = marker["pid"]
    if not 0 < pid < 1 << 31:
        return True  # not a process id: os.kill would address a group, or overflow
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        pass  # it exists (another user's)
    start = marker.get("start")
    if type(start) is int:
        now = _start_time(pid)
        if now is not None and now != start:
            return False  # the pid was reused by a later process
    return True


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks after boot (/proc/<pid>/stat field 22), if known."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        # Field 2, the command, is in parentheses and may hold spaces or ')': fields 3.. follow its last ')'.
        return int(data.rpartition(b")")[2].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


# ----------------------------------------------------------------------------- signals


class SignalGuard:
    """SIGINT and SIGTERM as ``Interrupted`` raised in the main thread, or held during ``hold()``."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.previous: dict[int, Any] = {}
        self.holding = 0
        self.pending: int | None = None
        self.raised = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.raised:
            return  # already stopping: a second Ctrl-C must not cut the cleanup short
        if self.holding:
            self.pending = self.pending or signum
            return
        self.raised = True
        raise Interrupted(signum)

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Signals arriving in this section wait: ``check()`` raises them, or the guard's end
        delivers them to the handlers it restores (a rename and its cleanup are not cut in two)."""
        self.holding += 1
        try:
            yield
        finally:
            self.holding -= 1

    def check(self) -> None:
        """Raises ``Interrupted`` for a signal held by an earlier ``hold()``."""
        if self.pending is not None and not self.raised:
            self.raised = True
            raise Interrupted(self.pending)

    def install(self) -> None:
        for signum in self.SIGNALS:
            current = signal.getsignal(signum)
            if current == signal.SIG_IGN:
                continue  # e.g. nohup or a background job: the process was told not to stop
            self.previous[signum] = current
            signal.signal(signum, self._handle)

    def restore(self) -> None:
        for signum, previous in self.previous.items():
            if signal.getsignal(signum) == self._handle:  # unless someone installed theirs meanwhile
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        if self.pending is not None and not self.raised:
            signal.raise_signal(self.pending)  # as if it came now: the previous handler decides


@contextmanager
def signals_raise() -> Iterator[SignalGuard]:
    """While active, SIGINT and SIGTERM raise ``Interrupted`` (a KeyboardInterrupt) in the main
    thread, so ``except BaseException`` cleanups run; previous handlers come back afterwards.

    Outside the main thread Python cannot install handlers: the guard then changes nothing."""
    guard = SignalGuard()
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    guard.install()
    try:
        yield guard
    finally:
        guard.restore()


__all__ = [
    "make_temp_dir",
    "remove_stale_temp_dirs",
    "signals_raise",
    "process_marker",
    "parse_marker",
    "may_be_alive",
    "SignalGuard",
    "MARKER",
    "Interrupted",
]
