"""Where a written savepoint goes, and how it gets there without losing anything of the user's.

DST is checked before anything is written (it must not overlap SRC; with ``overwrite`` it must be
a savepoint: ``_metadata``, ``stateInfo`` and Flink's state files, nothing else), built in a hidden
sibling directory (temp_dirs.py) and renamed into place last, atomically where the kernel can
(``renameat2`` with ``RENAME_EXCHANGE``): readers see no DST or a whole one. An object-store DST is
built in the system's temporary directory and uploaded with ``_metadata`` last (object_store.py).
Environment errors (disk full, read-only, a parent that is a file) are one line naming the path.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import signal
import stat
import tempfile
import uuid
from typing import Any

from statecat.statemeta.errors import Interrupted, StatecatError, UnsupportedError
from statecat.statemeta.files.storage import METADATA_FILE
from statecat.statemeta.model import (
    StateMeta,
)
from statecat.writers.object_store import SAVEPOINT_FILE, ObjectStoreTarget, is_object_store
from statecat.writers.temp_dirs import make_temp_dir, remove_stale_temp_dirs

log = logging.getLogger(__name__)


def destination_display(destination: str) -> str:
    """DST as messages name it: an object-store URI as given, a local path made absolute."""
    return destination.rstrip("/") if is_object_store(destination) else os.path.abspath(destination)


def check_destination(meta: StateMeta, destination: str, overwrite: bool) -> None:
    """Refuses a DST that overlaps SRC, exists without ``overwrite``, or is not a savepoint to replace."""
    if is_object_store(destination):
        remote = ObjectStoreTarget.of(destination)
        source = meta.storage.uri.rstrip("/")
        if source == remote.uri or source.startswith(remote.uri + "/") or remote.uri.startswith(source + "/"):
            raise UnsupportedError(
                f"the destination {remote.uri} overlaps the source snapshot {meta.storage.uri}",
                hint="statecat never writes into a snapshot it reads: give another --out",
            )
        remote.check(overwrite)
        return
    target = os.path.abspath(destination)
    source_dir = os.path.realpath(meta.storage.directory)
    real = os.path.realpath(target)
    if real == source_dir or real.startswith(source_dir + os.sep) or source_dir.startswith(real + os.sep):
        raise UnsupportedError(
            f"the destination {target} overlaps the source snapshot {meta.storage.directory}",
            hint="statecat never writes into a snapshot it reads: give another --out directory",
        )
    if os.path.lexists(target) and not overwrite:
        raise UnsupportedError(
            f"the destination {target} exists", hint="Pass --overwrite to replace it, or choose another --out"
        )
    if overwrite:
        _check_replaceable(target)


def _check_replaceable(target: str) -> None:
    """Refuses (before anything is written) a ``target`` that is not a savepoint and nothing else."""
    refusal = "--overwrite replaces only a savepoint"
    hint = "Nothing was changed: move it away, or choose another --out"
    try:
        mode = os.lstat(target).st_mode
        if not stat.S_ISDIR(mode):
            raise UnsupportedError(f"{refusal}: expected a directory at {target}, got {_kind(mode)}", hint=hint)
        names = sorted(os.listdir(target))
        for name in names:
            mode = os.lstat(os.path.join(target, name)).st_mode
            if not (SAVEPOINT_FILE.fullmatch(name) and stat.S_ISREG(mode)):
                raise UnsupportedError(
                    f"{refusal}: expected only _metadata, stateInfo and Flink's state files in {target}, "
                    f"got {name!r} ({_kind(mode)})",
                    hint=hint,
                )
    except (FileNotFoundError, NotADirectoryError):
        return  # nothing to replace (a parent that is not a directory fails the write itself)
    except OSError as exc:
        raise StatecatError(f"cannot read {target}: {exc.strerror or exc}") from None
    if METADATA_FILE not in names:
        raise UnsupportedError(
            f"{refusal}: expected {METADATA_FILE} in {target}, got "
            f"{'an empty directory' if not names else 'a directory without it'}",
            hint=hint,
        )


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "a special file"


def _make_temp_dir(target: str) -> str:
    """DST's parent (made when missing) with the hidden directory DST is built in; the temporary
    directories of killed writes there are removed first."""
    parent = os.path.dirname(target)
    try:
        os.makedirs(parent, exist_ok=True)
        remove_stale_temp_dirs(parent)
        return make_temp_dir(parent, os.path.basename(target), "write")
    except OSError as exc:
        raise _cannot_write(target, exc) from None


def _make_upload_dir(target: str) -> str:
    """The local directory an object-store DST is built in before its upload (the system's
    temporary directory: DST's own has no rename to publish with)."""
    parent = tempfile.gettempdir()
    remove_stale_temp_dirs(parent)
    return make_temp_dir(parent, target.rstrip("/").rsplit("/", 1)[-1], "upload")


def _cannot_write(target: str, exc: OSError) -> StatecatError:
    """An environment's refusal (full disk, read-only parent, a file where a directory must be) as
    one line naming DST and, when an ancestor is at fault, that ancestor."""
    cause = exc.strerror or str(exc)
    where = exc.filename if isinstance(exc.filename, str) else None
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        # makedirs reports EEXIST for a regular file on the way, or the directory it failed to make.
        where = next((a for a in _ancestors(target) if os.path.lexists(a) and not os.path.isdir(a)), where)
        cause = os.strerror(errno.ENOTDIR) if where is not None and not os.path.isdir(where) else cause
    at = f" ({where})" if where is not None and where in _ancestors(target) else ""
    return StatecatError(f"cannot write {target}: {cause}{at}")


def _ancestors(path: str) -> list[str]:
    """``path``'s ancestors, from the root down."""
    out = []
    while (parent := os.path.dirname(path)) != path:
        out.append(parent)
        path = parent
    return out[::-1]


# Errors writing files report no file name (a full disk shows at write, flush or close).
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})


def _explained(
    exc: BaseException, target: str, temp: str | None, remote: ObjectStoreTarget | None
) -> BaseException | None:
    """What a failed write raises instead of ``exc`` (None: ``exc`` itself), the temporary directory
    being removed: a signal says nothing was written, the environment's errors are one line."""
    if isinstance(exc, KeyboardInterrupt):
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        return Interrupted(signum, f"interrupted by {signal.Signals(signum).name}: nothing written at {target}")
    if remote is not None and isinstance(exc, OSError):
        name = exc.filename if isinstance(exc.filename, str) else None
        if name is not None and temp is not None and name.startswith(temp + os.sep):
            return StatecatError(f"cannot write {target}: {exc.strerror or exc} (building it in {temp})")
        return remote.cannot_write(exc)
    if isinstance(exc, OSError):
        name = exc.filename if isinstance(exc.filename, str) else None
        ours = name is not None and any(name == p or name.startswith(p + os.sep) for p in (temp, target) if p)
        if ours or (name is None and exc.errno in _WRITE_ERRNOS):
            return _cannot_write(target, exc)
    return None


def _publish(work: str, target: str, overwrite: bool) -> None:
    """Renames the finished directory into place: readers see no DST or a whole one. A savepoint
    it replaces is removed only once the new one is in place."""
    if not (overwrite and os.path.lexists(target)):
        if not _rename(work, target, _RENAME_NOREPLACE):
            raise UnsupportedError(f"the destination {target} appeared while writing", hint="Pass --overwrite")
        return
    _check_replaceable(target)  # again: files may have been added to it while statecat wrote
    if _rename(work, target, _RENAME_EXCHANGE):
        _remove_savepoint(work, target)  # the old savepoint, swapped into the temporary directory
        return
    # No atomic exchange here: the old savepoint waits beside DST (never in a marked temporary
    # directory, which a later write would remove even if the second rename never happened).
    aside = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.statecat-replaced-", dir=os.path.dirname(target))
    os.rmdir(aside)
    os.rename(target, aside)
    try:
        os.rename(work, target)
    except BaseException:
        os.rename(aside, target)
        raise
    _remove_savepoint(aside, target)


def _remove_savepoint(directory: str, target: str) -> None:
    """Removes a replaced savepoint's files, and nothing else: an entry added since the check keeps
    its directory, moved beside DST. Failing here fails no write: the new DST is in place."""
    try:
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            if SAVEPOINT_FILE.fullmatch(name) and stat.S_ISREG(os.lstat(path).st_mode):
                os.unlink(path)
        try:
            os.rmdir(directory)
        except OSError:
            parent, name = os.path.split(target)
            kept = os.path.join(parent, f".{name}.statecat-kept-{uuid.uuid4().hex[:8]}")
            os.rename(directory, kept)  # not empty, unmarked: no cleaner removes it
            log.warning("the replaced %s held files that are not a savepoint's: they are kept in %s", target, kept)
    except OSError as exc:
        log.warning("the savepoint %s replaced could not be removed from %s: %s", target, directory, exc)


_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2  # renameat2(2) flags


def _rename(source: str, target: str, flag: int) -> bool:
    """renameat2 with ``flag``: False when ``target`` exists (NOREPLACE). Without renameat2 (not
    Linux, or a filesystem without it) NOREPLACE is a check then a rename, EXCHANGE returns False."""
    libc_rename = _renameat2()
    if libc_rename is not None:
        if libc_rename(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), flag) == 0:
            return True
        err = ctypes.get_errno()
        if err in (errno.EEXIST, errno.ENOTEMPTY) and flag == _RENAME_NOREPLACE:
            return False
        if err not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            raise OSError(err, os.strerror(err), target)
    if flag == _RENAME_EXCHANGE:
        return False
    if os.path.lexists(target):
        return False
    os.rename(source, target)
    return True


_AT_FDCWD = -100


@functools.cache
def _renameat2() -> Any:
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function
