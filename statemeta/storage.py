"""Where a savepoint's bytes live: local paths or any URI ``pyarrow.fs`` opens (s3://, gs://, hdfs://).

A savepoint is addressed by its directory (the one holding ``_metadata``). Relative state handles
resolve inside that directory and never outside it, which is what makes savepoints relocatable.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import BinaryIO

import pyarrow.fs as pafs

from statecat.statemeta.errors import SavepointNotFoundError, StateFileError

METADATA_FILE = "_metadata"
SAVEPOINT_DIR_PREFIXES = ("savepoint-", "chk-")


@dataclass(frozen=True)
class Storage:
    """A pyarrow filesystem plus the savepoint directory on it (a path in that filesystem's terms)."""

    filesystem: pafs.FileSystem
    directory: str
    uri: str  # as the user gave it, normalised; used in messages and as the savepoint's identity

    @property
    def metadata_path(self) -> str:
        return posixpath.join(self.directory, METADATA_FILE)

    def open(self, path: str, *, buffer_size: int = 1 << 16) -> BinaryIO:
        """Opens a file of this filesystem for random access reads."""
        try:
            stream = self.filesystem.open_input_file(path)
        except FileNotFoundError as exc:
            raise StateFileError(
                "state file referenced by _metadata is missing", file=self.display(path),
                hint="Copy the complete savepoint directory; every file next to _metadata belongs to it",
            ) from exc
        except OSError as exc:
            raise StateFileError(f"cannot open state file: {exc}", file=self.display(path)) from exc
        return stream

    def size(self, path: str) -> int:
        info = self.filesystem.get_file_info(path)
        if info.type != pafs.FileType.File:
            raise StateFileError("state file referenced by _metadata is missing", file=self.display(path),
                                 hint="Copy the complete savepoint directory; every file next to _metadata belongs to it")
        return info.size

    def display(self, path: str) -> str:
        """The path as the user would write it (with the URI scheme they used)."""
        if "://" in self.uri:
            scheme = self.uri.split("://", 1)[0]
            return f"{scheme}://{path.lstrip('/')}" if scheme not in ("file",) else path
        return path

    def resolve_relative(self, relative: str) -> str:
        """A tag-6 relative handle: a file inside the savepoint directory, never outside it."""
        normalised = posixpath.normpath(relative)
        if normalised.startswith(("/", "..")) or "/../" in f"/{normalised}/" or normalised in (".", ""):
            raise StateFileError(
                f"relative state handle {relative!r} points outside the savepoint directory",
                file=self.display(self.metadata_path),
                hint="The _metadata file is damaged or was crafted; statecat only reads files inside the savepoint",
            )
        return posixpath.join(self.directory, normalised)

    def resolve_absolute(self, uri: str) -> str:
        """A tag-2 absolute handle (e.g. ``file:/tmp/x``): a path on this storage's filesystem."""
        if uri.startswith("file:"):
            path = uri[len("file:"):]
            while path.startswith("//"):
                path = path[1:]
            return path
        if "://" in uri:
            return uri.split("://", 1)[1]
        return uri


def open_storage(path: str) -> Storage:
    """Locates the savepoint directory for a user path.

    Accepts the directory holding ``_metadata``, the ``_metadata`` file itself, or a directory
    holding exactly one ``savepoint-*``/``chk-*`` directory.
    """
    raw = str(path)
    try:
        if "://" in raw:
            filesystem, inner = pafs.FileSystem.from_uri(raw)
        else:
            filesystem, inner = pafs.LocalFileSystem(), posixpath.abspath(raw)
    except (pafs.ArrowInvalid if hasattr(pafs, "ArrowInvalid") else ValueError, OSError, ValueError) as exc:
        raise SavepointNotFoundError(f"cannot open {raw!r}: {exc}", file=raw) from exc
    inner = inner.rstrip("/") or "/"
    info = filesystem.get_file_info(inner)
    if info.type == pafs.FileType.NotFound:
        raise SavepointNotFoundError("no such file or directory", file=raw,
                                     hint="Give the savepoint directory (the one holding _metadata)")
    if info.type == pafs.FileType.File:
        if posixpath.basename(inner) != METADATA_FILE:
            raise SavepointNotFoundError("not a savepoint: expected a directory holding _metadata, got a file",
                                         file=raw, hint="Give the savepoint directory (the one holding _metadata)")
        inner = posixpath.dirname(inner)
    directory = _find_metadata_dir(filesystem, inner, raw)
    uri = raw if directory == inner else _join_uri(raw, posixpath.relpath(directory, inner))
    return Storage(filesystem, directory, uri.rstrip("/"))


def _find_metadata_dir(filesystem: pafs.FileSystem, directory: str, raw: str) -> str:
    if filesystem.get_file_info(posixpath.join(directory, METADATA_FILE)).type == pafs.FileType.File:
        return directory
    children = filesystem.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
    candidates = [
        c.path for c in children
        if c.type == pafs.FileType.Directory and c.base_name.startswith(SAVEPOINT_DIR_PREFIXES)
        and filesystem.get_file_info(posixpath.join(c.path, METADATA_FILE)).type == pafs.FileType.File
    ]
    if len(candidates) == 1:
        return candidates[0]
    if candidates:
        names = ", ".join(sorted(posixpath.basename(c) for c in candidates))
        raise SavepointNotFoundError(f"not a savepoint: the directory holds several savepoints ({names})",
                                     file=raw, hint="Give one of them")
    raise SavepointNotFoundError("not a savepoint: expected a _metadata file in the directory, found none",
                                 file=raw, hint="Give the savepoint directory (the one holding _metadata)")


def _join_uri(base: str, relative: str) -> str:
    return base.rstrip("/") + "/" + relative
