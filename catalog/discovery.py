"""Finding savepoints under attach roots, and naming the database each one becomes."""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import re

from statecat.statemeta.storage import METADATA_FILE

REGISTRY_DATABASE = "statecat"  # the catalog-wide database statecat keeps its registry in
MAX_DATABASE_NAME = 100
SHORT_DATABASE_NAME = 40  # longer readable names keep only their last directories (at least two)
# ``savepoint-<job id prefix>-<random>`` as Flink names a savepoint directory; a job's 32-hex-digit id.
_FLINK_SAVEPOINT_DIR = re.compile(r"savepoint-[0-9a-f]{6}-([0-9a-f]{12})", re.IGNORECASE)
_CHECKPOINT_DIR = re.compile(r"chk-\d+")
_JOB_ID_DIR = re.compile(r"[0-9a-f]{32}", re.IGNORECASE)
# Directory names that say nothing about the savepoint; the database is named after their parent.
GENERIC_DIR_NAMES = {"savepoint", "savepoints", "checkpoint", "checkpoints", "state"}

log = logging.getLogger("statecat.catalog")


def discover_savepoints(root: str) -> list[str]:
    """Savepoint directories (holding ``_metadata``) at or under ``root``, sorted; never descends into one."""
    if "://" in root:
        return _discover_remote(root)
    root = os.path.abspath(root)
    if os.path.isfile(root) and os.path.basename(root) == METADATA_FILE:
        return [os.path.dirname(root)]
    if not os.path.isdir(root):
        from statecat.statemeta.errors import SavepointNotFoundError

        raise SavepointNotFoundError("no such directory", file=root,
                                     hint="Give a savepoint directory or a directory holding savepoints")
    found = []
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError as exc:
            log.warning("skipping %s: %s", directory, exc)
            continue
        if any(e.name == METADATA_FILE and e.is_file() for e in entries):
            found.append(directory)
            continue
        stack.extend(e.path for e in entries if e.is_dir(follow_symlinks=False) and not e.name.startswith("."))
    return sorted(found)


def _discover_remote(root: str) -> list[str]:
    import pyarrow.fs as pafs

    filesystem, inner = pafs.FileSystem.from_uri(root)
    scheme_prefix = root[: len(root) - len(root.split("://", 1)[1])]
    inner = inner.rstrip("/")
    infos = filesystem.get_file_info(pafs.FileSelector(inner, recursive=True, allow_not_found=True))
    directories = sorted({posixpath.dirname(i.path) for i in infos
                          if i.type == pafs.FileType.File and posixpath.basename(i.path) == METADATA_FILE})
    # A savepoint's own subdirectories never hold another _metadata; keep the outermost anyway.
    outer = [d for d in directories if not any(d != o and d.startswith(o + "/") for o in directories)]
    return [scheme_prefix + d for d in outer]


def _short_part(part: str) -> str:
    # Flink's random ids make names long without making them clearer: keep a few hex digits.
    match = _FLINK_SAVEPOINT_DIR.fullmatch(part)
    if match:
        return f"savepoint_{match.group(1)[:8]}"
    if _JOB_ID_DIR.fullmatch(part):
        return part[:8]
    return part


def readable_name(path: str, root: str | None = None) -> str:
    """A short database name from the savepoint's path relative to the attach root (or its own name).

    ``orders/savepoint-1a2b3c-4d5e6f7a8b9c`` → ``orders_savepoint_4d5e6f7a``; a job id directory keeps
    its first 8 hex digits (``<job id>/chk-12`` → ``a1b2c3d4_chk_12``)."""
    path = path.rstrip("/")
    parts = []
    if root is not None:
        rel = posixpath.relpath(path, root.rstrip("/")) if "://" not in path else path[len(root.rstrip("/")):]
        parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts:
        parts = [posixpath.basename(path)]
        if _FLINK_SAVEPOINT_DIR.fullmatch(parts[0]) or _CHECKPOINT_DIR.fullmatch(parts[0]):
            parts.insert(0, posixpath.basename(posixpath.dirname(path)))  # its job's directory says which job
    if parts[-1].lower() in GENERIC_DIR_NAMES:
        parts = parts[:-1] or [posixpath.basename(posixpath.dirname(path)) or "savepoint"]
    from statecat.statemeta.model import sql_name

    parts = [sql_name(_short_part(p)) for p in parts]
    while len(parts) > 2 and len("_".join(parts)) > SHORT_DATABASE_NAME:
        parts = parts[1:]  # the directories nearest the savepoint say most; the full path is in statecat.savepoints
    name = "_".join(parts)
    if not name[0].isalpha():
        name = f"sp_{name}"
    if name == REGISTRY_DATABASE:
        name = f"{name}_savepoint"
    return name[:MAX_DATABASE_NAME]


def unique_name(path: str, readable: str, taken: set[str]) -> str:
    """``readable``, or with a short hash of the path when another savepoint (or database) has it."""
    if readable not in taken:
        return readable
    return f"{readable[:MAX_DATABASE_NAME - 9]}_{hashlib.sha1(path.encode()).hexdigest()[:8]}"


def normalise_path(path: str) -> str:
    return path.rstrip("/") if "://" in path else os.path.abspath(path)
