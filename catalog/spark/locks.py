"""One process at a time: an exclusive lock on a file, for work several statecat processes may start at
once (resolving Delta's jars, starting a home's metastore or server)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Holds an exclusive lock on ``path`` (created if missing) for the block; others wait for it."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
