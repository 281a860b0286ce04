"""Where a savepoint's bytes live, and which of them statecat may read.

A savepoint is addressed by its directory (the one holding ``_metadata``): a local path or any
URI ``pyarrow.fs`` opens (s3://, gs://, hdfs://). Every file statecat reads for a snapshot goes
through ``Storage.open``/``Storage.size``, which confine reads to the snapshot's own job
directory (see ``Storage.confine``) plus the roots the user allows (``STATECAT_ALLOWED_ROOTS``,
``allowed_roots=``), refuse anything that is not a regular file (a FIFO would block forever),
and hand out streams that never allocate for a length the file cannot hold.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import os
import posixpath
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from statecat.statemeta.errors import FormatError, SavepointNotFoundError, StateFileError

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer
    from pyarrow import NativeFile

METADATA_FILE = "_metadata"
SAVEPOINT_DIR_PREFIXES = ("savepoint-", "chk-")
# Extra roots statecat may read state files from, separated by os.pathsep (paths or URIs).
ALLOWED_ROOTS_ENV = "STATECAT_ALLOWED_ROOTS"
ALLOWED_ROOTS_OPTION = "--allow-root"
# A retained checkpoint's job directory: <job>/chk-N (exclusive), <job>/shared, <job>/taskowned.
CHECKPOINT_DIR = re.compile(r"chk-\d+")
CHECKPOINT_SHARED_DIRS = ("shared", "taskowned")
# Flink's aliases for the S3 filesystem; pyarrow knows it as s3.
SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "s3p": "s3", "gcs": "gs"}
# Schemes whose URI authority is a host, not part of the path (``hdfs://namenode:8020/path``).
HOST_AUTHORITY_SCHEMES = ("hdfs", "viewfs")
_FILE_TYPE_NAMES = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symbolic link",
}
_MISSING_HINT = "Copy the complete savepoint directory; every file next to _metadata belongs to it"


@dataclass(frozen=True)
class Root:
    """A directory tree reads may come from: a scheme plus a normalised absolute path in it."""

    scheme: str  # "file" for local paths
    path: str

    def holds(self, scheme: str, path: str) -> bool:
        if scheme != self.scheme:
            return False
        base = self.path.rstrip("/")
        return path == self.path or path.startswith(base + "/")

    def __str__(self) -> str:
        return self.path if self.scheme == "file" else f"{self.scheme}://{self.path.lstrip('/')}"


@dataclass(frozen=True)
class Storage:
    """A pyarrow filesystem plus the savepoint directory on it (a path in that filesystem's terms)."""

    filesystem: pafs.FileSystem
    directory: str
    uri: str  # as the user gave it, normalised; used in messages and as the savepoint's identity
    # Roots beyond the snapshot's own directory that state handles may point into (as configured).
    allowed_roots: tuple[str, ...] = field(default=(), compare=False)

    @property
    def metadata_path(self) -> str:
        return posixpath.join(self.directory, METADATA_FILE)

    @property
    def scheme(self) -> str:
        return _scheme_of(self.uri) if "://" in self.uri else "file"

    @property
    def is_local(self) -> bool:
        return isinstance(self.filesystem, pafs.LocalFileSystem)

    def with_allowed_roots(self, roots: Iterable[str | os.PathLike[str]]) -> Storage:
        """This storage, also allowing reads under ``roots`` (paths or URIs)."""
        extra = tuple(str(r) for r in roots if str(r).strip())
        for root in extra:
            _parse_root(root)
        return dataclasses.replace(self, allowed_roots=self.allowed_roots + extra)

    # -- reading

    def open(self, path: str, *, buffer_size: int = 1 << 16) -> StateFile:
        """Opens a file of this snapshot for random access reads (confined; regular files only)."""
        filesystem, target = self.confine(path)
        return open_regular_file(filesystem, target, self.display(path), buffer_size=buffer_size)

    def size(self, path: str) -> int:
        """The size of a file of this snapshot (confined; regular files only)."""
        filesystem, target = self.confine(path)
        return regular_file_size(filesystem, target, self.display(path))

    def display(self, path: str) -> str:
        """The path as the user would write it (with the URI scheme they used)."""
        if "://" in path:
            return path
        if "://" in self.uri:
            scheme = self.uri.split("://", 1)[0]
            return f"{scheme}://{path.lstrip('/')}" if scheme not in ("file",) else path
        return path

    # -- resolving handles

    def resolve_relative(self, relative: str) -> str:
        """A tag-6 relative handle: a file inside the savepoint directory, never outside it."""
        normalised = posixpath.normpath(relative)
        if (
            normalised.startswith(("/", ".."))
            or "/../" in f"/{normalised}/"
            or normalised in (".", "")
            or "\\" in relative
            or "\x00" in relative
        ):
            raise StateFileError(
                f"relative state handle {relative!r} points outside the savepoint directory",
                file=self.display(self.metadata_path),
                hint="The _metadata file is damaged or was crafted; statecat only reads files inside the savepoint",
            )
        return posixpath.join(self.directory, normalised)

    def resolve_absolute(self, uri: str) -> str:
        """A tag-2 absolute handle or a file-merging segment's file.

        Returns a path on this storage's filesystem when the handle names it (``file:/x`` for a
        local savepoint, ``s3://bucket/x`` for one on S3), else the URI itself: a file on another
        filesystem, which ``open`` reads only under an allowed root.
        """
        scheme, path = _split_uri(uri)
        moved = self._in_own_job_directory(path)
        if moved is not None:
            return moved
        if scheme is None:
            return path  # a scheme-less path: Flink's default filesystem, i.e. the savepoint's
        if scheme == self.scheme:
            return path
        return f"file://{path}" if scheme == "file" else uri

    def _in_own_job_directory(self, path: str) -> str | None:
        """A retained checkpoint's file, re-based onto this checkpoint's own job directory.

        Flink writes absolute handles (``…/<job-id>/shared/x``, ``…/<job-id>/chk-3/y``). A job
        directory copied or downloaded elsewhere keeps that layout, so a handle naming the same
        job directory's ``shared/``, ``taskowned/`` or ``chk-N/`` is read from the copy the user
        pointed at, wherever Flink first wrote it."""
        if not CHECKPOINT_DIR.fullmatch(posixpath.basename(self.directory.rstrip("/"))):
            return None
        job = posixpath.dirname(self.directory.rstrip("/"))
        job_name = posixpath.basename(job)
        parts = path.split("/")
        for i in range(len(parts) - 2, 0, -1):
            if parts[i - 1] == job_name and (parts[i] in CHECKPOINT_SHARED_DIRS or CHECKPOINT_DIR.fullmatch(parts[i])):
                suffix = posixpath.normpath("/".join(parts[i:]))
                if suffix.startswith("..") or "/../" in f"/{suffix}/":
                    return None
                return posixpath.join(job, suffix)
        return None

    # -- confinement

    def confine(self, path: str) -> tuple[pafs.FileSystem, str]:
        """The filesystem and path to read for ``path``, if this snapshot may read it.

        Allowed: files under the snapshot's own directory — for a retained checkpoint ``chk-N``
        its job directory's ``shared/``, ``taskowned/`` and ``chk-*`` directories — and under the
        roots the user allows. On local filesystems symbolic links are resolved first
        (``realpath``) and the target must be allowed: a link inside the savepoint that points
        inside is fine, one that points elsewhere is refused like an absolute handle would be.
        Anything else is a ``StateFileError`` that names the option widening the rule.
        """
        if "\x00" in path:
            raise StateFileError(
                "a state handle names a path with a NUL character",
                file=repr(path),
                hint="The _metadata file or stateInfo is damaged or was crafted",
            )
        if "://" in path:  # another filesystem than the savepoint's
            # A URI: _split_uri gives it a scheme.
            scheme, inner = cast("tuple[str, str]", _split_uri(path))
            if scheme == "file":
                inner = _real_local(inner)
            if any(root.holds(scheme, inner) for root in self._user_roots):
                if scheme == "file":
                    return pafs.LocalFileSystem(), inner
                return _filesystem_for_uri(path), _uri_inner_path(path)
            self._refuse(path, f"it is on another filesystem ({scheme}://) than the savepoint")
        if self.is_local:
            if not posixpath.isabs(path):
                self._refuse(path, "it is not an absolute path")
            target = _real_local(path)
        else:
            target = posixpath.normpath(path)
            if target == ".." or target.startswith("../"):
                self._refuse(path, "it climbs out of the filesystem's root")
        if self._own_tree_holds(target) or any(root.holds(self.scheme, target) for root in self._user_roots):
            return self.filesystem, target
        self._refuse(path, "it is outside the snapshot's directory")
        raise AssertionError("unreachable")

    @functools.cached_property
    def _own_root(self) -> str:
        return _real_local(self.directory) if self.is_local else posixpath.normpath(self.directory)

    def _own_tree_holds(self, target: str) -> bool:
        own = Root(self.scheme, self._own_root)
        if own.holds(self.scheme, target):
            return True
        if not CHECKPOINT_DIR.fullmatch(posixpath.basename(self._own_root)):
            return False
        job = posixpath.dirname(self._own_root)
        relative = target[len(job.rstrip("/")) + 1 :] if Root(self.scheme, job).holds(self.scheme, target) else ""
        first, _, rest = relative.partition("/")
        return bool(rest) and (first in CHECKPOINT_SHARED_DIRS or bool(CHECKPOINT_DIR.fullmatch(first)))

    @functools.cached_property
    def _user_roots(self) -> tuple[Root, ...]:
        return tuple(_parse_root(r) for r in self.allowed_roots)

    def _refuse(self, path: str, why: str) -> None:
        own = str(Root(self.scheme, self._own_root))
        if CHECKPOINT_DIR.fullmatch(posixpath.basename(self._own_root)):
            own = f"{own} and its job directory's shared/, taskowned/ and chk-* directories"
        raise StateFileError(
            f"refusing to read {self.display(path)}: a state handle of this snapshot points there and {why}",
            file=self.display(self.metadata_path),
            hint=f"statecat reads only files under the snapshot's own directory ({own}); if this snapshot is "
            f"trusted and the file belongs to it, allow its directory with {ALLOWED_ROOTS_OPTION} DIR, the "
            f"environment variable {ALLOWED_ROOTS_ENV} (paths or URIs separated by {os.pathsep!r}), or "
            f"allowed_roots=[...] in Python",
        )


class StateFile(io.RawIOBase):
    """A buffered, seekable read stream over one state file that trusts no length or position.

    ``read(n)`` never allocates more than the file still holds (a damaged length prefix asks for
    terabytes; the caller then sees a short read and reports truncation), and a negative length
    or position is a ``FormatError`` naming the file and offset instead of a bare ``ValueError``.
    """

    def __init__(self, raw: io.RawIOBase | NativeFile, name: str, size: int, buffer_size: int = 1 << 16) -> None:
        super().__init__()
        self._buffer = io.BufferedReader(raw, buffer_size=buffer_size)
        self.name = name
        self.file_size = size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._buffer.tell()

    def seek(self, position: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            position += self._buffer.tell()
        elif whence == io.SEEK_END:
            position += self.file_size
        if not isinstance(position, int) or position < 0:
            raise FormatError(
                f"expected a position within the file, got {position}",
                file=self.name,
                hint="An offset in _metadata or the state data is damaged",
            )
        try:
            return self._buffer.seek(position)
        except (OSError, ValueError, OverflowError) as exc:
            raise FormatError(f"cannot seek to byte {position}: {exc}", file=self.name, offset=position) from exc

    def read(self, n: int | None = -1) -> bytes:
        at = self._buffer.tell()
        if n is None or n == -1:
            n = max(self.file_size - at, 0)
        if not isinstance(n, int) or n < 0:
            raise FormatError(
                f"expected a non-negative length to read, got {n}",
                file=self.name,
                offset=at,
                hint="A length or offset in _metadata or the state data is damaged",
            )
        n = min(n, max(self.file_size - at, 0))
        try:
            return self._buffer.read(n)
        except OSError as exc:
            raise StateFileError(f"cannot read state file: {exc}", file=self.name, offset=at) from exc

    def readinto(self, buffer: WriteableBuffer) -> int:
        data = self.read(len(memoryview(buffer)))
        memoryview(buffer)[: len(data)] = data
        return len(data)

    def peek(self, n: int = 1) -> bytes:
        return self._buffer.peek(n) if self._buffer.tell() < self.file_size else b""

    def close(self) -> None:
        if not self.closed:
            self._buffer.close()
        super().close()


def open_regular_file(filesystem: pafs.FileSystem, path: str, display: str, *, buffer_size: int = 1 << 16) -> StateFile:
    """Opens a regular file for reads; anything else (FIFO, device, directory) is a ``StateFileError``.

    Not confined: ``Storage.open`` confines first; files the user names directly come here as they are.
    """
    if isinstance(filesystem, pafs.LocalFileSystem):
        raw, size = _open_local(path, display)
    else:
        size = regular_file_size(filesystem, path, display)
        try:
            raw = filesystem.open_input_file(path)
        except FileNotFoundError as exc:
            raise StateFileError(
                "state file referenced by _metadata is missing", file=display, hint=_MISSING_HINT
            ) from exc
        except OSError as exc:
            raise StateFileError(f"cannot open state file: {exc}", file=display) from exc
    return StateFile(raw, display, size, buffer_size)


def regular_file_size(filesystem: pafs.FileSystem, path: str, display: str) -> int:
    if isinstance(filesystem, pafs.LocalFileSystem):
        return _regular_file_stat(path, display).st_size
    try:
        info = filesystem.get_file_info(path)
    except OSError as exc:
        raise StateFileError(f"cannot read state file: {exc}", file=display) from exc
    if info.type == pafs.FileType.NotFound:
        raise StateFileError("state file referenced by _metadata is missing", file=display, hint=_MISSING_HINT)
    if info.type != pafs.FileType.File:
        raise StateFileError(
            "state file referenced by _metadata is not a regular file",
            file=display,
            hint="statecat reads regular files only",
        )
    return info.size


def _open_local(path: str, display: str) -> tuple[io.FileIO, int]:
    """Opens a local regular file without blocking (a FIFO's open would wait for a writer)."""
    before = _regular_file_stat(path, display)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError as exc:
        raise StateFileError("state file referenced by _metadata is missing", file=display, hint=_MISSING_HINT) from exc
    except OSError as exc:
        raise StateFileError(f"cannot open state file: {exc.strerror or exc}", file=display) from exc
    after = os.fstat(fd)
    # The path may have been swapped between the check and the open: the file opened must be the one checked.
    if not stat.S_ISREG(after.st_mode) or (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
        os.close(fd)
        raise StateFileError("state file changed while it was being opened", file=display)
    return io.FileIO(fd, "rb", closefd=True), after.st_size


def _regular_file_stat(path: str, display: str) -> os.stat_result:
    try:
        info = os.stat(path)
    except FileNotFoundError as exc:
        raise StateFileError("state file referenced by _metadata is missing", file=display, hint=_MISSING_HINT) from exc
    except OSError as exc:
        raise StateFileError(f"cannot read state file: {exc.strerror or exc}", file=display) from exc
    if not stat.S_ISREG(info.st_mode):
        kind = _FILE_TYPE_NAMES.get(stat.S_IFMT(info.st_mode), "not a regular file")
        raise StateFileError(
            f"refusing to read a state file that is {kind}, not a regular file",
            file=display,
            hint="statecat reads regular files only; replace it with the file Flink wrote",
        )
    return info


def _real_local(path: str) -> str:
    return os.path.realpath(path)


def _scheme_of(uri: str) -> str:
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else uri.split(":", 1)[0].lower()
    return SCHEME_ALIASES.get(scheme, scheme)


def _split_uri(uri: str) -> tuple[str | None, str]:
    """(scheme, path in that filesystem's terms) of a handle's URI; scheme None for a bare path."""
    if uri.startswith("file:"):
        path = uri[len("file:") :]
        while path.startswith("//"):
            path = path[1:]
        return "file", path
    if "://" not in uri:
        return None, uri
    return _scheme_of(uri), _uri_inner_path(uri)


def _uri_inner_path(uri: str) -> str:
    parts = urlsplit(uri)
    scheme = SCHEME_ALIASES.get(parts.scheme.lower(), parts.scheme.lower())
    if scheme in HOST_AUTHORITY_SCHEMES:
        return posixpath.normpath(parts.path or "/")
    return posixpath.normpath(f"{parts.netloc}/{parts.path.lstrip('/')}").rstrip("/")


def _parse_root(root: str) -> Root:
    root = str(root).strip()
    if "://" in root or root.startswith("file:"):
        # A URI (or file:): _split_uri gives it a scheme.
        scheme, path = cast("tuple[str, str]", _split_uri(root))
        if scheme == "file":
            return Root("file", _real_local(os.path.abspath(path)))
        return Root(scheme, path)
    return Root("file", _real_local(os.path.abspath(os.path.expanduser(root))))


@functools.lru_cache(maxsize=16)
def _filesystem_for_uri(uri: str) -> pafs.FileSystem:
    try:
        return pafs.FileSystem.from_uri(uri)[0]
    except (ValueError, OSError) as exc:
        raise StateFileError(f"cannot open the filesystem of {uri}: {exc}", file=uri) from exc


def allowed_roots_from_env() -> tuple[str, ...]:
    """The roots ``STATECAT_ALLOWED_ROOTS`` allows (empty entries ignored)."""
    return split_roots(os.environ.get(ALLOWED_ROOTS_ENV, ""))


def allow_roots_for_process(roots: Iterable[str | os.PathLike[str]]) -> None:
    """Adds ``roots`` to ``STATECAT_ALLOWED_ROOTS`` of this process (the CLI's ``--allow-root``).

    Through the environment the roots reach every way statecat opens a snapshot in this process
    and in the processes it starts (Spark's Python workers), not just the first call.
    """
    extra = [str(r) for r in roots if str(r).strip()]
    for root in extra:
        _parse_root(root)
    current = list(allowed_roots_from_env())
    merged = current + [r for r in extra if r not in current]
    if merged:
        os.environ[ALLOWED_ROOTS_ENV] = os.pathsep.join(merged)


def split_roots(text: str) -> tuple[str, ...]:
    """Roots separated by ``os.pathsep``; on POSIX that is ``:``, so a URI's ``scheme://`` is kept whole."""
    pieces = text.split(os.pathsep)
    roots: list[str] = []
    i = 0
    while i < len(pieces):
        piece = pieces[i]
        if (
            os.pathsep == ":"
            and i + 1 < len(pieces)
            and _URI_SCHEME.fullmatch(piece)
            and (pieces[i + 1].startswith("//") or piece == "file" and pieces[i + 1].startswith("/"))
        ):
            piece = f"{piece}:{pieces[i + 1]}"
            i += 1
        if piece.strip():
            roots.append(piece.strip())
        i += 1
    return tuple(roots)


_URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


def open_storage(path: str, *, allowed_roots: Iterable[str | os.PathLike[str]] | None = None) -> Storage:
    """Locates the savepoint directory for a user path.

    Accepts the directory holding ``_metadata``, the ``_metadata`` file itself, or a directory
    holding exactly one directory that holds ``_metadata`` (``savepoint-*``, ``chk-*``, any name). ``allowed_roots`` (paths or URIs)
    and ``STATECAT_ALLOWED_ROOTS`` name directories beyond the snapshot's own that its state
    handles may point into.
    """
    raw = str(path)
    try:
        if "://" in raw:
            filesystem, inner = pafs.FileSystem.from_uri(raw)
        else:
            filesystem, inner = pafs.LocalFileSystem(), posixpath.abspath(raw)
    except (ValueError, OSError) as exc:
        raise SavepointNotFoundError(f"cannot open {raw!r}: {exc}", file=raw) from exc
    inner = inner.rstrip("/") or "/"
    try:
        info = filesystem.get_file_info(inner)
        if info.type == pafs.FileType.NotFound:
            raise SavepointNotFoundError(
                "no such file or directory", file=raw, hint="Give the savepoint directory (the one holding _metadata)"
            )
        if info.type not in (pafs.FileType.File, pafs.FileType.Directory):
            raise SavepointNotFoundError(
                "not a savepoint: neither a directory nor a regular file",
                file=raw,
                hint="Give the savepoint directory (the one holding _metadata)",
            )
        return _open_found(filesystem, inner, info, raw, allowed_roots)
    except OSError as exc:
        raise SavepointNotFoundError(f"cannot read {raw!r}: {exc}", file=raw) from exc


def _open_found(
    filesystem: pafs.FileSystem,
    inner: str,
    info: pafs.FileInfo,
    raw: str,
    allowed_roots: Iterable[str | os.PathLike[str]] | None,
) -> Storage:
    if info.type == pafs.FileType.File:
        if posixpath.basename(inner) != METADATA_FILE:
            raise SavepointNotFoundError(
                "not a savepoint: expected a directory holding _metadata, got a file",
                file=raw,
                hint="Give the savepoint directory (the one holding _metadata)",
            )
        inner = posixpath.dirname(inner)
    directory = _find_metadata_dir(filesystem, inner, raw)
    uri = raw if directory == inner else _join_uri(raw, posixpath.relpath(directory, inner))
    roots = tuple(str(r) for r in (allowed_roots or ()) if str(r).strip()) + allowed_roots_from_env()
    for root in roots:
        _parse_root(root)  # a malformed root fails here, not at the first read
    return Storage(filesystem, directory, uri.rstrip("/"), roots)


def _find_metadata_dir(filesystem: pafs.FileSystem, directory: str, raw: str) -> str:
    if filesystem.get_file_info(posixpath.join(directory, METADATA_FILE)).type == pafs.FileType.File:
        return directory
    children = filesystem.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
    # Any name: Flink's savepoint-*/chk-*, or a copy's own name (``savepoint/``) as attach accepts it.
    candidates = [
        c.path
        for c in children
        if c.type == pafs.FileType.Directory
        and not c.base_name.startswith(".")
        and filesystem.get_file_info(posixpath.join(c.path, METADATA_FILE)).type == pafs.FileType.File
    ]
    if len(candidates) == 1:
        return candidates[0]
    if candidates:
        names = ", ".join(sorted(posixpath.basename(c) for c in candidates))
        raise SavepointNotFoundError(
            f"not a savepoint: the directory holds several savepoints ({names})", file=raw, hint="Give one of them"
        )
    raise SavepointNotFoundError(
        "not a savepoint: expected a _metadata file in the directory, found none",
        file=raw,
        hint="Give the savepoint directory (the one holding _metadata)",
    )


def _join_uri(base: str, relative: str) -> str:
    return base.rstrip("/") + "/" + relative
