"""Finding the savepoints and checkpoints under a root (no Spark): every directory holding ``_metadata``.

Shared by the readers' key history and the catalog's attach roots.
"""

from __future__ import annotations

import logging
import os
import posixpath

from statecat.statemeta.errors import SavepointNotFoundError
from statecat.statemeta.files.storage import METADATA_FILE

log = logging.getLogger("statecat.statemeta")


def discover_snapshots(root: str) -> list[str]:
    """Snapshot directories (holding ``_metadata``) at or under ``root``, sorted; never descends into one."""
    if "://" in root:
        return _discover_remote(root)
    root = os.path.abspath(root)
    if os.path.isfile(root) and os.path.basename(root) == METADATA_FILE:
        return [os.path.dirname(root)]
    if not os.path.isdir(root):
        raise SavepointNotFoundError(
            "no such directory", file=root, hint="Give a savepoint directory or a directory holding savepoints"
        )
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
    directories = sorted(
        {
            posixpath.dirname(i.path)
            for i in infos
            if i.type == pafs.FileType.File and posixpath.basename(i.path) == METADATA_FILE
        }
    )
    # A savepoint's own subdirectories never hold another _metadata; keep the outermost anyway.
    outer = [d for d in directories if not any(d != o and d.startswith(o + "/") for o in directories)]
    return [scheme_prefix + d for d in outer]
