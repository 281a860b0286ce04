"""When a savepoint was taken, and how statecat knows it.

Flink records no time in ``_metadata``; the file's modification time is the completion time only
where Flink wrote it, and the copy time once someone copied the directory. So the time comes from
the best source at hand, and every caller keeps the source next to it:

* ``rest_trigger``: ``statecat savepoint`` triggered the savepoint through Flink's REST API and
  recorded, in the savepoint's stateInfo, when it saw it complete;
* ``stateinfo_snapshot``: the stateInfo snapshotter (``snapshot``/``watch``) recorded the
  ``_metadata`` mtime it saw, and it ran within ``SNAPSHOTTER_WINDOW`` of that mtime, so the file
  was still Flink's own (the record survives a later copy);
* ``checkpoint_mtime``: a ``chk-N`` directory still in Flink's checkpoint layout (next to its job's
  ``shared`` and ``taskowned``), whose ``_metadata`` mtime is the completion time;
* ``file_mtime: may be the copy time``: the ``_metadata`` mtime of anything else;
* ``unknown``: the filesystem reports no modification time.
"""

from __future__ import annotations

import datetime as dt
import posixpath
import re
from typing import Any, cast

import pyarrow.fs as pafs

from statecat.statemeta.errors import StatecatError
from statecat.statemeta.storage import Storage, open_storage

SOURCE_REST = "rest_trigger"
SOURCE_SNAPSHOTTER = "stateinfo_snapshot"
SOURCE_CHECKPOINT = "checkpoint_mtime"
SOURCE_FILE = "file_mtime: may be the copy time"
SOURCE_UNKNOWN = "unknown"
SOURCES = (SOURCE_REST, SOURCE_SNAPSHOTTER, SOURCE_CHECKPOINT, SOURCE_FILE, SOURCE_UNKNOWN)

# A snapshotter that saw ``_metadata`` at most this long after its mtime ran as the savepoint
# completed (``watch`` polls every few seconds); later runs may have met a copy.
SNAPSHOTTER_WINDOW = dt.timedelta(minutes=10)
_CHECKPOINT_DIR = re.compile(r"chk-\d+")
# Flink's checkpoint storage creates these next to every chk-N of a job.
_JOB_SIBLINGS = ("shared", "taskowned")


def iso(moment: dt.datetime) -> str:
    """UTC ISO-8601 with a Z, to the millisecond (as stateInfo stores times)."""
    text = moment.astimezone(dt.UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def parse_iso(text: object) -> dt.datetime | None:
    """A time written by ``iso`` (or any ISO-8601 with a zone), as an aware UTC datetime; None if not one."""
    if not isinstance(text, str):
        return None
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.astimezone(dt.UTC) if moment.tzinfo is not None else None


def rest_record(triggered_at: dt.datetime, completed_at: dt.datetime) -> dict[str, str]:
    """The stateInfo ``taken`` record of ``statecat savepoint``: the times it observed."""
    return {"source": SOURCE_REST, "triggered_at": iso(triggered_at), "completed_at": iso(completed_at)}


def snapshotter_record(storage: Storage, observed_at: dt.datetime | None = None) -> dict[str, str] | None:
    """The stateInfo ``taken`` record of the snapshotter: the ``_metadata`` mtime it saw, kept only when
    it saw the file within ``SNAPSHOTTER_WINDOW`` of that mtime (so the file was still Flink's).

    The record holds no time of its own making: snapshots of the same ``_metadata`` write the same
    bytes (stateInfo writes are idempotent, concurrent ones included)."""
    mtime = metadata_mtime(storage)
    observed = observed_at or dt.datetime.now(dt.UTC)
    if mtime is None or not dt.timedelta(0) <= observed - mtime <= SNAPSHOTTER_WINDOW:
        return None
    return {"source": SOURCE_SNAPSHOTTER, "metadata_mtime": iso(mtime)}


def time_of_record(record: object) -> dt.datetime | None:
    """The time a stateInfo ``taken`` record vouches for, or None when it vouches for none."""
    if not isinstance(record, dict):
        return None
    if record.get("source") == SOURCE_REST:
        return parse_iso(record.get("completed_at"))
    if record.get("source") == SOURCE_SNAPSHOTTER:
        return parse_iso(record.get("metadata_mtime"))  # the window was checked when it was written
    return None


def metadata_mtime(storage: Storage) -> dt.datetime | None:
    try:
        info = storage.filesystem.get_file_info(storage.metadata_path)
    except OSError:
        return None
    return info.mtime.astimezone(dt.UTC) if info.mtime is not None else None


def is_checkpoint_in_place(storage: Storage) -> bool:
    """A ``chk-N`` directory in Flink's checkpoint layout: ``<job>/chk-N`` next to ``<job>/shared`` and ``taskowned``."""
    directory = storage.directory.rstrip("/")
    if not _CHECKPOINT_DIR.fullmatch(posixpath.basename(directory)):
        return False
    job = posixpath.dirname(directory)
    try:
        infos = storage.filesystem.get_file_info([posixpath.join(job, name) for name in _JOB_SIBLINGS])
    except OSError:
        return False
    return all(info.type == pafs.FileType.Directory for info in infos)


def savepoint_time(path_or_storage: str | Storage) -> tuple[dt.datetime | None, str]:
    """When the savepoint was taken (aware UTC, or None) and the source of that time (``SOURCES``)."""
    storage = path_or_storage if isinstance(path_or_storage, Storage) else open_storage(path_or_storage)
    recorded = _recorded(storage)
    if recorded is not None:
        return recorded
    mtime = metadata_mtime(storage)
    if mtime is None:
        return None, SOURCE_UNKNOWN
    return mtime, SOURCE_CHECKPOINT if is_checkpoint_in_place(storage) else SOURCE_FILE


def _recorded(storage: Storage) -> tuple[dt.datetime, str] | None:
    """The time the savepoint's own stateInfo records, if it describes this ``_metadata`` and vouches for one."""
    from statecat.statemeta.stateinfo import FORMAT_NAME, STATE_INFO_FILE, _read_json, is_fresh

    doc = _read_json(storage.filesystem, posixpath.join(storage.directory, STATE_INFO_FILE), storage)
    if doc is None or doc.get("format") != FORMAT_NAME:
        return None
    record = doc.get("taken")
    moment = time_of_record(record)
    if moment is None:
        return None
    try:
        if not is_fresh(doc, storage):
            return None  # written for other _metadata bytes: says nothing about these
    except StatecatError:
        return None
    return moment, cast("dict[str, Any]", record)["source"]  # a dict: time_of_record vouched for it
