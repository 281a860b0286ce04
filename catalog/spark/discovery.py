"""Naming the database each attached savepoint becomes (finding them: ``statemeta.discovery``)."""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import re

from statecat.statemeta.files.discovery import discover_snapshots as discover_savepoints  # noqa: F401 - re-exported

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
        rel = posixpath.relpath(path, root.rstrip("/")) if "://" not in path else path[len(root.rstrip("/")) :]
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
    return f"{readable[: MAX_DATABASE_NAME - 9]}_{hashlib.sha1(path.encode()).hexdigest()[:8]}"


def normalise_path(path: str) -> str:
    return path.rstrip("/") if "://" in path else os.path.abspath(path)
