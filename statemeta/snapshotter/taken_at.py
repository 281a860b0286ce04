"""When a savepoint was taken, and how statecat knows it.

Flink records no time in ``_metadata``; the file's modification time is the completion time only
where Flink wrote it, and the copy time once someone copied the directory. So the time comes from
the best source at hand, and every caller keeps the source next to it:

* ``rest_trigger``: ``statecat savepoint`` triggered the savepoint through Flink's REST API and
  recorded, in the savepoint's stateInfo, when it saw it complete;
* ``stateinfo_snapshot``: the stateInfo snapshotter (``snapshot``/``watch``) recorded the
  ``_metadata`` mtime it saw, and it ran within ``SNAPSHOTTER_WINDOW`` of that mtime, so the file
  was still Flink's own (the record survives a later copy);
* ``rest_checkpoint_history``: Flink's checkpoint history (``GET /jobs/<id>/checkpoints``, when a
  REST address is given) names the snapshot: its ``latest_ack_timestamp``, the time the last task
  acknowledged it;
* ``checkpoint_mtime``: a ``chk-N`` directory still in Flink's checkpoint layout (next to its job's
  ``shared`` and ``taskowned``), whose ``_metadata`` mtime is the completion time (unless the whole
  job directory was copied: ``cp -r`` keeps the layout);
* ``file_mtime: may be the copy time``: the ``_metadata`` mtime of anything else;
* ``unknown``: the filesystem reports no modification time.

Order (``in_checkpoint_order``): snapshots of one job graph are ordered by Flink's checkpoint id,
never by a time, since a copy gives every file the copy time. A job is its checkpoint directory's
job id (``<job-id>/chk-N``), or failing that its set of operator ids; a job restored from a
savepoint or checkpoint continues its checkpoint ids, so one set of operator ids is one order, and
the checkpoints of a job id join it. Different job graphs (other operator ids) are ordered by the
time of their first snapshot, then by their first checkpoint id.
"""

from __future__ import annotations

import datetime as dt
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import pyarrow.fs as pafs

from statecat.statemeta.errors import FormatError, StatecatError
from statecat.statemeta.files.storage import CHECKPOINT_DIR, CHECKPOINT_SHARED_DIRS, Storage, open_storage

SOURCE_REST = "rest_trigger"
SOURCE_SNAPSHOTTER = "stateinfo_snapshot"
SOURCE_FLINK_HISTORY = "rest_checkpoint_history"
SOURCE_CHECKPOINT = "checkpoint_mtime"
SOURCE_FILE = "file_mtime: may be the copy time"
SOURCE_UNKNOWN = "unknown"
SOURCES = (SOURCE_REST, SOURCE_SNAPSHOTTER, SOURCE_FLINK_HISTORY, SOURCE_CHECKPOINT, SOURCE_FILE, SOURCE_UNKNOWN)

# A snapshotter that saw ``_metadata`` at most this long after its mtime ran as the savepoint
# completed (``watch`` polls every few seconds); later runs may have met a copy.
SNAPSHOTTER_WINDOW = dt.timedelta(minutes=10)
_JOB_ID = re.compile(r"[0-9a-f]{32}")
# Flink names a savepoint directory savepoint-<first 6 hex digits of the job id>-<12 random hex digits>.
_SAVEPOINT_DIR = re.compile(r"savepoint-[0-9a-f]{6}-[0-9a-f]{12}")
_MIN_TIME = dt.datetime.min.replace(tzinfo=dt.UTC)


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
    if not CHECKPOINT_DIR.fullmatch(posixpath.basename(directory)):
        return False
    job = posixpath.dirname(directory)
    try:
        infos = storage.filesystem.get_file_info([posixpath.join(job, name) for name in CHECKPOINT_SHARED_DIRS])
    except OSError:
        return False
    return all(info.type == pafs.FileType.Directory for info in infos)


def savepoint_time(
    path_or_storage: str | Storage, flink_history: FlinkCheckpointHistory | None = None
) -> tuple[dt.datetime | None, str]:
    """When the savepoint was taken (aware UTC, or None) and the source of that time (``SOURCES``):
    its stateInfo's record, else Flink's checkpoint history (when given), else the ``_metadata`` mtime."""
    storage = path_or_storage if isinstance(path_or_storage, Storage) else open_storage(path_or_storage)
    recorded = _recorded(storage)
    if recorded is not None:
        return recorded
    if flink_history is not None:
        acknowledged = flink_history.time_of(storage)
        if acknowledged is not None:
            return acknowledged, SOURCE_FLINK_HISTORY
    mtime = metadata_mtime(storage)
    if mtime is None:
        return None, SOURCE_UNKNOWN
    return mtime, SOURCE_CHECKPOINT if is_checkpoint_in_place(storage) else SOURCE_FILE


def job_id_of(path: str) -> str | None:
    """The job id of a checkpoint in Flink's layout (``…/<job-id>/chk-N``), else None."""
    directory = path.rstrip("/")
    job = posixpath.basename(posixpath.dirname(directory))
    if CHECKPOINT_DIR.fullmatch(posixpath.basename(directory)) and _JOB_ID.fullmatch(job):
        return job
    return None


def checkpoint_number(path: str) -> int | None:
    """N of a ``chk-N`` directory: the checkpoint id Flink named it by."""
    name = posixpath.basename(path.rstrip("/"))
    return int(name[4:]) if CHECKPOINT_DIR.fullmatch(name) else None


# ----------------------------------------------------------------------------- Flink's checkpoint history


@dataclass(frozen=True)
class FlinkCheckpoint:
    """One completed checkpoint or savepoint in a job's history, as Flink's REST API reports it."""

    job_id: str
    checkpoint_id: int
    acknowledged_at: dt.datetime  # latest_ack_timestamp: the last task's acknowledgement
    external_path: str | None


class FlinkCheckpointHistory:
    """What ``GET /jobs/<id>/checkpoints`` says of a job's recent checkpoints and savepoints.

    A snapshot is matched by where Flink wrote it (``external_path``), so copies are matched by what
    a copy keeps: a ``<job-id>/chk-N`` directory by job id and checkpoint id, a savepoint directory
    by its name (``savepoint-<job>-<random>``, unique per savepoint). Flink keeps only the last
    ``web.checkpoints.history`` (default 10) entries, so older snapshots fall back to their mtime."""

    def __init__(self, checkpoints: Iterable[FlinkCheckpoint]):
        self.checkpoints = tuple(checkpoints)
        self._by_path: dict[tuple[str, str], dt.datetime] = {}
        self._by_checkpoint: dict[tuple[str, int], dt.datetime] = {}
        self._by_savepoint_name: dict[str, dt.datetime] = {}
        for cp in self.checkpoints:
            self._by_checkpoint[(cp.job_id, cp.checkpoint_id)] = cp.acknowledged_at
            if cp.external_path:
                self._by_path[_location(cp.external_path)] = cp.acknowledged_at
                name = posixpath.basename(_location(cp.external_path)[1])
                if _SAVEPOINT_DIR.fullmatch(name):
                    self._by_savepoint_name[name] = cp.acknowledged_at

    @classmethod
    def from_rest(cls, answers: Mapping[str, object], source: str) -> FlinkCheckpointHistory:
        """From the JSON answers of ``GET /jobs/<id>/checkpoints`` by job id; ``source`` (the REST
        address) names where a malformed answer came from."""
        return cls(cp for job_id, answer in answers.items() for cp in _parse_job_history(job_id, answer, source))

    def time_of(self, storage: Storage) -> dt.datetime | None:
        """When Flink's history says the snapshot at ``storage`` completed, or None when it does not list it."""
        directory = storage.directory.rstrip("/")
        found = self._by_path.get((storage.scheme, posixpath.normpath(directory)))
        if found is not None:
            return found
        job, number = job_id_of(directory), checkpoint_number(directory)
        if job is not None and number is not None:
            return self._by_checkpoint.get((job, number))
        return self._by_savepoint_name.get(posixpath.basename(directory))


def _location(external_path: str) -> tuple[str, str]:
    from statecat.statemeta.files.storage import _split_uri

    scheme, path = _split_uri(external_path)
    return scheme or "file", posixpath.normpath(path).rstrip("/") or "/"


def _parse_job_history(job_id: str, answer: object, source: str) -> list[FlinkCheckpoint]:
    where = f"GET /jobs/{job_id}/checkpoints"

    def malformed(what: str) -> FormatError:
        return FormatError(
            f"Flink's checkpoint history answer to {where} {what}",
            file=source,
            hint="Give the JobManager's REST address (e.g. http://jobmanager:8081), or leave out --rest "
            "to order and time snapshots without Flink's history",
        )

    if not isinstance(answer, dict):
        raise malformed(f"is not a JSON object but {type(answer).__name__}")
    history = answer.get("history", [])
    if not isinstance(history, list):
        raise malformed(f"has a 'history' that is not a list ({type(history).__name__})")
    latest = answer.get("latest") or {}
    if not isinstance(latest, dict):
        raise malformed(f"has a 'latest' that is not an object ({type(latest).__name__})")
    # The latest completed checkpoint and savepoint stay listed after older entries leave the history.
    entries: list[tuple[str, object]] = [(f"history[{i}]", e) for i, e in enumerate(history)]
    entries += [(f"latest.{name}", latest[name]) for name in ("completed", "savepoint") if latest.get(name)]
    found = []
    for at, entry in entries:
        if not isinstance(entry, dict):
            raise malformed(f"has {at} that is not an object")
        if entry.get("status", "COMPLETED") != "COMPLETED":
            continue  # in progress or failed: wrote no snapshot to order
        checkpoint_id, acknowledged, path = (
            entry.get("id"),
            entry.get("latest_ack_timestamp"),
            entry.get("external_path"),
        )
        if isinstance(checkpoint_id, bool) or not isinstance(checkpoint_id, int):
            raise malformed(f"has {at} without an integer 'id' (got {checkpoint_id!r})")
        if isinstance(acknowledged, bool) or not isinstance(acknowledged, int) or acknowledged <= 0:
            raise malformed(
                f"has {at} (checkpoint {checkpoint_id}) without a 'latest_ack_timestamp' in ms (got {acknowledged!r})"
            )
        if path is not None and not isinstance(path, str):
            raise malformed(f"has {at} (checkpoint {checkpoint_id}) with an 'external_path' that is not text")
        try:
            moment = dt.datetime.fromtimestamp(acknowledged / 1000, dt.UTC)
        except (OverflowError, OSError, ValueError):
            raise malformed(
                f"has {at} (checkpoint {checkpoint_id}) with 'latest_ack_timestamp' {acknowledged} out of range"
            ) from None
        # Flink reports "<checkpoint-not-externalized>" for checkpoints it wrote nowhere.
        external = path if path and not path.startswith("<") else None
        found.append(FlinkCheckpoint(job_id, checkpoint_id, moment, external))
    return found


# ----------------------------------------------------------------------------- order


@dataclass(frozen=True)
class Placing:
    """What ordering needs to know of one snapshot: where, which checkpoint of which job graph, when."""

    path: str
    checkpoint_id: int | None  # from _metadata, else the chk-N name, else None
    operator_ids: frozenset[str] | None  # None when _metadata could not be read
    taken_at: dt.datetime | None
    time_source: str

    @property
    def job_id(self) -> str | None:
        return job_id_of(self.path)


def placing_of(path_or_storage: str | Storage, *, taken: tuple[dt.datetime | None, str] | None = None) -> Placing:
    """The snapshot's placing from its ``_metadata`` (checkpoint id, operator ids) and its time
    (``taken`` when the caller has it, else ``savepoint_time``). An unreadable snapshot keeps what
    its path says (the chk-N number), so it still sorts with its job."""
    from statecat.statemeta.files.metadata import read_metadata

    try:
        storage = path_or_storage if isinstance(path_or_storage, Storage) else open_storage(path_or_storage)
    except (StatecatError, OSError):
        path = cast(str, path_or_storage)
        return Placing(path, checkpoint_number(path), None, *(taken or (None, SOURCE_UNKNOWN)))
    path = storage.uri
    try:
        metadata = read_metadata(storage)
        checkpoint_id: int | None = metadata.checkpoint_id
        operator_ids: frozenset[str] | None = frozenset(op.id for op in metadata.operators)
    except (StatecatError, OSError):
        checkpoint_id, operator_ids = checkpoint_number(storage.directory), None
    if taken is None:
        try:
            taken = savepoint_time(storage)
        except (StatecatError, OSError):
            taken = (None, SOURCE_UNKNOWN)
    return Placing(path, checkpoint_id, operator_ids, *taken)


T = TypeVar("T")


def in_checkpoint_order(items: Iterable[T], placing: Callable[[T], Placing]) -> list[T]:
    """``items`` in the order Flink took them (see the module's docstring), oldest first.

    Within one job graph: by checkpoint id, then (equal ids only) time, job id and path (numbers
    in it compared as numbers). Job graphs: by their first snapshot's time, then their first checkpoint id.
    Snapshots whose ``_metadata`` cannot be read sort with their job (by the chk-N number), or
    else last."""
    placed = [(item, placing(item)) for item in items]
    graph_of_job: dict[str, frozenset[str]] = {}
    for _, p in placed:
        if p.operator_ids is not None and p.job_id is not None:
            graph_of_job.setdefault(p.job_id, p.operator_ids)

    def graph(p: Placing) -> tuple[str, ...]:
        operators = p.operator_ids if p.operator_ids is not None else graph_of_job.get(p.job_id or "")
        return ("", *sorted(operators)) if operators is not None else ("~unread", p.job_id or p.path)

    graphs: dict[tuple[str, ...], list[Placing]] = {}
    for _, p in placed:
        graphs.setdefault(graph(p), []).append(p)
    rank = {key: _graph_rank(key, members) for key, members in graphs.items()}
    placed.sort(key=lambda pair: (rank[graph(pair[1])], *within_job_key(pair[1])))
    return [item for item, _ in placed]


def within_job_key(p: Placing) -> tuple:
    """The sort key of a snapshot among those of its job graph: checkpoint id first; a time only
    between equal ids (runs of one job graph started afresh each count from 1)."""
    taken = _aware(p.taken_at)
    return (
        p.checkpoint_id is None,
        p.checkpoint_id or 0,
        taken is None,
        taken or _MIN_TIME,
        p.job_id or "",
        natural_key(p.path),
    )


def _graph_rank(key: tuple[str, ...], members: Sequence[Placing]) -> tuple:
    times = [t for t in (_aware(m.taken_at) for m in members) if t is not None]
    ids = [m.checkpoint_id for m in members if m.checkpoint_id is not None]
    return (key[0] == "~unread", not times, min(times, default=_MIN_TIME), not ids, min(ids, default=0), key)


def natural_key(text: str) -> tuple:
    """``text`` with its digit runs compared as numbers: chk-2 before chk-10."""
    parts = re.split(r"(\d+)", text)
    return tuple(int(part) if i % 2 else part for i, part in enumerate(parts))


def _aware(moment: dt.datetime | None) -> dt.datetime | None:
    if moment is not None and moment.tzinfo is None:
        return moment.replace(tzinfo=dt.UTC)  # Spark and Delta hand back naive UTC
    return moment


def _recorded(storage: Storage) -> tuple[dt.datetime, str] | None:
    """The time the savepoint's own stateInfo records, if it describes this ``_metadata`` and vouches for one."""
    from statecat.statemeta.snapshotter.stateinfo import FORMAT_NAME, STATE_INFO_FILE, _read_json, is_fresh

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
