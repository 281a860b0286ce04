"""A savepoint written to an object store (``s3://``, ``gs://``, ``abfs://``... any pyarrow.fs URI).

    target = ObjectStoreTarget.of("s3://bucket/savepoints/fixed")
    target.check(overwrite=False)          # refuses a prefix that holds anything
    target.upload(work, signals)           # work: the finished local directory

An object store has no rename, so the savepoint is built in a local temporary directory and then
uploaded file by file with ``_metadata`` last, as Flink writes one: a prefix without ``_metadata``
is no savepoint to Flink's restore nor to statecat's reader.

The first object uploaded is a marker (``.statecat-upload``, the process as ``temp_dirs`` names it)
and the last one removed. SIGINT, SIGTERM and errors remove what the run uploaded; a run killed
(SIGKILL) before ``_metadata`` leaves its marker, and the next write into the same parent prefix
removes that run's objects once its process is gone, and only objects with a savepoint's names.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow.fs as pafs

from statecat.statemeta.errors import StatecatError, UnsupportedError
from statecat.statemeta.files.storage import METADATA_FILE
from statecat.statemeta.snapshotter.stateinfo import STATE_INFO_FILE
from statecat.writers.temp_dirs import MAX_MARKER_BYTES, SignalGuard, may_be_alive, parse_marker, process_marker

UPLOAD_MARKER = ".statecat-upload"
UPLOAD_CHUNK = 8 << 20  # bytes per write: S3 uploads parts of at least 5 MB

# What a savepoint directory holds, and so what statecat may remove: Flink's _metadata and state
# files (FsCheckpointStreamFactory names each by a random UUID, native RocksDB savepoints too),
# statecat's stateInfo, and the temporary file of a `statecat snapshot` killed while it wrote it.
SAVEPOINT_FILE = re.compile(
    rf"{re.escape(METADATA_FILE)}|{re.escape(STATE_INFO_FILE)}|\.{re.escape(STATE_INFO_FILE)}\.[a-z0-9_]+\.tmp"
    r"|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
)


def is_object_store(destination: str) -> bool:
    """Whether ``destination`` is a URI of a filesystem other than the local one."""
    scheme, sep, _ = destination.partition("://")
    return bool(sep) and scheme.lower() != "file"


@dataclass(frozen=True)
class ObjectStoreTarget:
    filesystem: pafs.FileSystem
    path: str  # in the filesystem's terms (bucket/prefix for S3)
    uri: str  # as the user gave it, without a trailing slash

    @classmethod
    def of(cls, uri: str) -> ObjectStoreTarget:
        uri = uri.rstrip("/")
        try:
            filesystem, path = pafs.FileSystem.from_uri(uri)
        except (ValueError, OSError) as exc:
            raise StatecatError(f"cannot open the filesystem of {uri}: {_one_line(exc)}") from None
        path = path.rstrip("/")
        if not path or "/" not in path.strip("/") and isinstance(filesystem, pafs.S3FileSystem):
            raise UnsupportedError(
                f"expected a prefix inside a bucket for the savepoint, got {uri}",
                hint="Give a path below the bucket, e.g. s3://bucket/savepoints/fixed",
            )
        return cls(filesystem, path, uri)

    def check(self, overwrite: bool) -> None:
        """Refuses, before anything is written, a prefix that holds anything, and --overwrite."""
        if overwrite:
            raise UnsupportedError(
                f"--overwrite replaces a local savepoint by a rename; {self.uri} is on an object store, which has "
                f"no rename, so its savepoint cannot be replaced whole",
                hint="Nothing was changed: write to a new URI, and delete the old savepoint once Flink restored it",
            )
        try:
            self.remove_stale_uploads()
            info = self.filesystem.get_file_info(self.path)
            held = info.type == pafs.FileType.File or bool(
                self.filesystem.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))
            )
        except OSError as exc:
            raise self.cannot_write(exc) from None
        if held:
            raise UnsupportedError(
                f"the destination {self.uri} exists",
                hint="Choose another --out: statecat never writes into a prefix that holds objects",
            )

    def upload(self, work: str, signals: SignalGuard) -> None:
        """Uploads the files of the local directory ``work`` (flat, as a savepoint is) below the
        target, marker first and ``_metadata`` last; on any failure or signal, removes what it
        uploaded and raises."""
        names = sorted(os.listdir(work))
        order = [n for n in names if n != METADATA_FILE] + [METADATA_FILE]
        uploaded: list[str] = []
        try:
            with signals.hold():  # the marker is known to be there before anything else is
                self._put_bytes(UPLOAD_MARKER, json.dumps(process_marker("upload")).encode())
                uploaded.append(UPLOAD_MARKER)
            for name in order:
                signals.check()
                uploaded.append(name)  # first: a stream closed by an exception still completes its object
                self._put_file(os.path.join(work, name), name)
            with signals.hold():  # _metadata is there: the savepoint is whole, the marker goes
                self.filesystem.delete_file(self._join(UPLOAD_MARKER))
        except BaseException:
            with signals.hold():
                self._remove(reversed(uploaded))
            raise

    def remove_stale_uploads(self) -> list[str]:
        """Removes what killed uploads left below the target's parent: a marked prefix whose
        process is gone loses its savepoint-named objects (or, holding ``_metadata``, only its
        marker: that savepoint is whole). Returns the prefixes cleaned."""
        parent = posixpath.dirname(self.path)
        cleaned = []
        for child in self.filesystem.get_file_info(pafs.FileSelector(parent, allow_not_found=True)):
            if child.type != pafs.FileType.Directory:
                continue
            marker = self._read_marker(child.path)
            if marker is None or may_be_alive(marker):
                continue
            names = {
                f.base_name
                for f in self.filesystem.get_file_info(pafs.FileSelector(child.path))
                if f.type == pafs.FileType.File
            }
            doomed = [] if METADATA_FILE in names else sorted(n for n in names if SAVEPOINT_FILE.fullmatch(n))
            for name in [*doomed, UPLOAD_MARKER]:
                self.filesystem.delete_file(posixpath.join(child.path, name))
            cleaned.append(child.path)
        return cleaned

    def cannot_write(self, exc: OSError) -> StatecatError:
        return StatecatError(f"cannot write {self.uri}: {_one_line(exc)}")

    def _read_marker(self, prefix: str) -> dict | None:
        path = posixpath.join(prefix, UPLOAD_MARKER)
        try:
            if self.filesystem.get_file_info(path).type != pafs.FileType.File:
                return None
            with self.filesystem.open_input_stream(path) as f:
                return parse_marker(f.read(MAX_MARKER_BYTES + 1))
        except OSError:
            return None

    def _join(self, name: str) -> str:
        return posixpath.join(self.path, name)

    def _put_bytes(self, name: str, data: bytes) -> None:
        with self.filesystem.open_output_stream(self._join(name)) as out:
            out.write(data)

    def _put_file(self, local: str, name: str) -> None:
        with open(local, "rb") as source, self.filesystem.open_output_stream(self._join(name)) as out:
            while chunk := source.read(UPLOAD_CHUNK):
                out.write(chunk)

    def _remove(self, names: Iterable[str]) -> None:
        """Removes ``names``, the marker last; stops at the first failure, so that what is left
        keeps its marker and the next write removes it."""
        for name in names:
            path = self._join(name)
            try:
                self.filesystem.delete_file(path)
            except OSError:
                try:
                    if self.filesystem.get_file_info(path).type == pafs.FileType.NotFound:
                        continue  # never uploaded
                except OSError:
                    pass
                return


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


__all__ = ["ObjectStoreTarget", "is_object_store", "SAVEPOINT_FILE", "UPLOAD_MARKER"]
