"""Session-wide test settings: statecat homes stay under pytest's temp dir, and every shared
metastore server a test started (catalog/servers/metastore.py) is stopped when the session ends."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _statecat_homes(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    previous = {key: os.environ.get(key) for key in ("STATECAT_HOME", "STATECAT_METASTORE_IDLE_SECONDS")}
    # A test that names no home must not use (or start a server for) the developer's ~/.statecat.
    os.environ["STATECAT_HOME"] = str(base / "default_statecat_home")
    # A server whose test was killed stops by itself soon after.
    os.environ.setdefault("STATECAT_METASTORE_IDLE_SECONDS", "300")
    yield
    from statecat.catalog.servers import metastore

    for state in base.rglob(metastore.STATE_FILE):
        metastore.stop(str(state.parent))
    for key, value in previous.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
