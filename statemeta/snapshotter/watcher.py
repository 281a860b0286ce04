"""The watcher behind ``statecat watch``: finds new savepoints and retained checkpoints and snapshots each once.

Each poll walks the roots to a bounded depth, looking for ``savepoint-*`` and ``chk-N``
directories holding ``_metadata`` (it never descends into them, nor into ``shared``/``taskowned``),
and stats their ``_metadata``: a poll costs one listing per directory and one stat per savepoint,
and reads nothing it has seen before.

Savepoints ready in one poll are handed on in checkpoint order (``taken_at.in_checkpoint_order``),
so a copied backlog is snapshotted, attached and materialized oldest first, not in listing order.

A savepoint is snapshotted once it is complete: its ``_metadata`` is unchanged (size and mtime)
over two consecutive polls and parses, and every state file it refers to exists with at least the
size its handle records (``statemeta.completeness``). One whose state files are missing or short
is incomplete: it is checked again on every poll (one stat per file) and snapshotted once they
are all there. One whose ``_metadata`` fails to parse, or whose snapshot fails, is logged and
skipped until its ``_metadata`` changes (a copy of ``_metadata`` still in progress finishes; a
damaged savepoint stays skipped without stopping the watcher). One that already has a matching
stateInfo is done, so a restarted watcher does not redo finished work.
"""

from __future__ import annotations

import logging
import posixpath
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, cast

import pyarrow.fs as pafs

from statecat.statemeta.errors import StatecatError
from statecat.statemeta.files.metadata import read_metadata
from statecat.statemeta.files.storage import METADATA_FILE, SAVEPOINT_DIR_PREFIXES, Storage, open_storage
from statecat.statemeta.snapshotter.completeness import Shortfall, required_sizes, shortfalls
from statecat.statemeta.snapshotter.stateinfo import STATE_INFO_FILE, _filesystem_for, _read_json, is_fresh, snapshot
from statecat.statemeta.snapshotter.taken_at import in_checkpoint_order, placing_of

if TYPE_CHECKING:
    from statecat.statemeta.descriptors import DescriptorSet

    # (root, its filesystem, the root's path on it, savepoint directory, its _metadata's FileInfo)
    Candidate = tuple[str, pafs.FileSystem, str, str, pafs.FileInfo]

log = logging.getLogger("statecat.watch")

DEFAULT_INTERVAL = 5.0
DEFAULT_MAX_DEPTH = 4  # ROOT/<job id>/chk-N is depth 2; leaves room for per-job folders above
# Folders of a checkpoint directory that hold state files, never savepoints.
SKIP_DIRS = ("shared", "taskowned")


@dataclass
class _Seen:
    stamp: tuple[int, int]  # (size, mtime ns) of _metadata at the last look
    polls_stable: int = 0
    status: str = "pending"  # pending | incomplete | done | failed
    error: str | None = None
    # Parsed once per _metadata stamp: the savepoint's storage and the size each state file needs.
    storage: Storage | None = None
    needed: dict[str, int] | None = None


class _Ready(NamedTuple):
    """A savepoint this poll hands on: snapshotted now, or found with a matching stateInfo."""

    uri: str
    base: str
    directory: str
    entry: _Seen
    already_done: bool


@dataclass
class Event:
    kind: str  # snapshot | unchanged | done | skipped | waiting | incomplete
    path: str
    detail: str = ""


@dataclass
class Watcher:
    roots: list[str]
    output: str | None = None
    descriptors: DescriptorSet | None = None
    max_depth: int = DEFAULT_MAX_DEPTH
    stable_polls: int = 2
    seen: dict[str, _Seen] = field(default_factory=dict)
    # Called with each savepoint's URI once it has a stateInfo (e.g. to register it in the catalog).
    on_ready: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        self._fs = [(root, *_filesystem_for(root)) for root in self.roots]

    # -- discovery

    def candidates(self) -> Iterator[Candidate]:
        """(root, filesystem, savepoint dir, _metadata FileInfo) for every savepoint under the roots."""
        for root, filesystem, base in self._fs:
            yield from self._walk(root, filesystem, base, base, 0)

    def _walk(
        self, root: str, filesystem: pafs.FileSystem, base: str, directory: str, depth: int
    ) -> Iterator[Candidate]:
        meta = filesystem.get_file_info(posixpath.join(directory, METADATA_FILE))
        if meta.type == pafs.FileType.File:
            yield root, filesystem, base, directory, meta
            return
        if depth >= self.max_depth:
            return
        try:
            children = filesystem.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        except OSError as exc:  # unreadable directory: skip it, keep watching the rest
            self._warn_once(directory, f"cannot list {directory}: {exc}")
            return
        for child in sorted(children, key=lambda c: c.path):
            if child.type != pafs.FileType.Directory or child.base_name in SKIP_DIRS:
                continue
            if child.base_name.startswith(SAVEPOINT_DIR_PREFIXES):
                meta = filesystem.get_file_info(posixpath.join(child.path, METADATA_FILE))
                if meta.type == pafs.FileType.File:
                    yield root, filesystem, base, child.path, meta
                continue  # an in-progress checkpoint/savepoint without _metadata yet
            yield from self._walk(root, filesystem, base, child.path, depth + 1)

    def _warn_once(self, key: str, message: str) -> None:
        entry = self.seen.get(key)
        if entry is None or entry.error != message:
            log.warning(message)
            self.seen[key] = _Seen((-1, -1), status="failed", error=message)

    # -- one poll

    def poll(self) -> list[Event]:
        events = []
        present = set()
        ready: list[_Ready] = []
        for root, filesystem, base, directory, meta in self.candidates():
            present.add(directory)
            stamp = (meta.size, meta.mtime_ns or 0)
            entry = self.seen.get(directory)
            uri = self._uri(root, base, directory)
            if entry is None:
                entry = self.seen[directory] = _Seen(stamp)
                # A stateInfo may arrive with _metadata, ahead of the state files: done only when they are there.
                if self._already_done(root, filesystem, base, directory) and self._all_there(uri, entry):
                    ready.append(_Ready(uri, base, directory, entry, already_done=True))
                    continue
            elif entry.stamp != stamp:
                entry.stamp, entry.polls_stable, entry.status = stamp, 0, "pending"
                entry.storage = entry.needed = entry.error = None
            else:
                entry.polls_stable += 1
            if entry.status in ("done", "failed"):
                continue
            if entry.polls_stable + 1 < self.stable_polls:
                events.append(Event("waiting", directory, "_metadata may still be written"))
                continue
            ready.append(_Ready(uri, base, directory, entry, already_done=False))
        # Handed on in the order Flink took them (a copied backlog arrives in one poll, in listing order).
        for item in in_checkpoint_order(ready, lambda r: placing_of(r.uri)):
            if item.already_done:
                item.entry.status, item.entry.storage, item.entry.needed = "done", None, None
                events.append(Event("done", item.directory, "stateInfo already matches"))
                self._ready(item.uri)
            else:
                events.append(self._process(item.uri, item.base, item.directory, item.entry))
        for gone in [d for d, e in self.seen.items() if d not in present and e.stamp != (-1, -1)]:
            del self.seen[gone]  # deleted savepoints: memory stays bounded by what exists
        return events

    def _output_dir(self, base: str, directory: str) -> str | None:
        if self.output is None:
            return None
        relative = posixpath.relpath(directory, base)
        return self.output if relative == "." else posixpath.join(self.output, relative)

    def _already_done(self, root: str, filesystem: pafs.FileSystem, base: str, directory: str) -> bool:
        out = self._output_dir(base, directory)
        if out is None:
            doc_fs, doc_path = filesystem, posixpath.join(directory, STATE_INFO_FILE)
        else:
            doc_fs, out_dir = _filesystem_for(out)
            doc_path = posixpath.join(out_dir, STATE_INFO_FILE)
        doc = _read_json(doc_fs, doc_path)
        if doc is None:
            return False
        if self.descriptors is not None and (doc.get("descriptors") or {}).get("sha256") != self.descriptors.digest:
            return False  # written without (or with other) declarations: write it again with these
        try:
            return is_fresh(doc, open_storage(self._uri(root, base, directory)))
        except StatecatError:
            return False

    @staticmethod
    def _uri(root: str, base: str, directory: str) -> str:
        # Keep the user's scheme (s3://...) so messages and the recorded path use it.
        relative = posixpath.relpath(directory, base)
        if relative == ".":
            return root
        return root.rstrip("/") + "/" + relative

    def _process(self, uri: str, base: str, directory: str, entry: _Seen) -> Event:
        """Snapshots the savepoint if it is complete; else says what it waits for or why it is skipped."""
        try:
            missing = self._missing(uri, entry)
            if missing:
                return self._incomplete(uri, directory, entry, missing)
            # _missing set entry.storage (with the sizes it needs)
            result = snapshot(
                cast(Storage, entry.storage), self._output_dir(base, directory), descriptors=self.descriptors
            )
        except (StatecatError, OSError) as exc:  # damaged, unreadable or vanished: the same treatment
            return self._skip(uri, directory, entry, str(exc))
        except Exception as exc:  # noqa: BLE001 - a bug on one savepoint must not stop the daemon
            log.exception("statecat bug while processing %s (please report it)", uri)
            return self._skip(uri, directory, entry, f"{type(exc).__name__}: {exc}")
        entry.status, entry.storage, entry.needed = "done", None, None
        self._ready(uri)
        if result.written:
            log.info("wrote %s", result.path)
            return Event("snapshot", directory, result.path)
        return Event("unchanged", directory, result.path)

    @staticmethod
    def _missing(uri: str, entry: _Seen) -> list[Shortfall]:
        """The savepoint's missing or short state files; _metadata is parsed once per stamp."""
        if entry.needed is None:
            entry.storage = open_storage(uri)
            entry.needed = required_sizes(read_metadata(entry.storage))
        return shortfalls(cast(Storage, entry.storage), entry.needed)  # set together with needed

    def _all_there(self, uri: str, entry: _Seen) -> bool:
        try:
            return not self._missing(uri, entry)
        except (StatecatError, OSError):
            return False  # processing reports it

    @staticmethod
    def _incomplete(uri: str, directory: str, entry: _Seen, missing: list[Shortfall]) -> Event:
        detail = f"{len(missing)} state file(s) not there yet: {missing[0]}"
        if entry.status != "incomplete":  # logged once; checked again on every poll
            log.info("waiting for %s: %s", uri, detail)
        entry.status, entry.error = "incomplete", detail
        return Event("incomplete", directory, detail)

    @staticmethod
    def _skip(uri: str, directory: str, entry: _Seen, error: str) -> Event:
        entry.status, entry.error, entry.storage, entry.needed = "failed", error, None, None
        log.error("skipping %s until its _metadata changes: %s", uri, error)
        return Event("skipped", directory, error)

    def _ready(self, uri: str) -> None:
        if self.on_ready is None:
            return
        try:
            self.on_ready(uri)
        except Exception as exc:  # noqa: BLE001 - a daemon logs a failed registration and goes on
            log.error("could not register %s: %s", uri, exc)

    # -- loop

    def run(
        self, interval: float = DEFAULT_INTERVAL, stop: threading.Event | None = None, max_polls: int | None = None
    ) -> None:
        stop = stop or threading.Event()
        polls = 0
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.poll()
            except OSError as exc:  # a root that vanished or a flaky store: try again next time
                log.warning("poll failed: %s", exc)
            polls += 1
            if max_polls is not None and polls >= max_polls:
                return
            stop.wait(max(0.0, interval - (time.monotonic() - started)))
