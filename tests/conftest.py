"""Session-wide test settings: statecat homes stay under pytest's temp dir, and every shared
metastore server (catalog/servers/metastore.py) and home server (catalog/servers/home_server.py)
a test started is stopped when the session ends."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _statecat_homes(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    idle_settings = ("STATECAT_METASTORE_IDLE_SECONDS", "STATECAT_SERVER_IDLE_SECONDS")
    previous = {key: os.environ.get(key) for key in ("STATECAT_HOME", *idle_settings)}
    # A test that names no home must not use (or start a server for) the developer's ~/.statecat.
    os.environ["STATECAT_HOME"] = str(base / "default_statecat_home")
    # A server whose test was killed stops by itself soon after; a home server `statecat sql` started
    # in the background for one test's home stops a minute after that test's last query.
    os.environ.setdefault("STATECAT_METASTORE_IDLE_SECONDS", "300")
    os.environ.setdefault("STATECAT_SERVER_IDLE_SECONDS", "60")
    yield
    from statecat.catalog.servers import metastore
    from statecat.catalog.servers.home_server import stop_server
    from statecat.catalog.servers.thrift_server import SERVE_FILE

    for served in base.rglob(SERVE_FILE):  # servers `statecat sql` started in the background
        stop_server(str(served.parent))

    for state in base.rglob(metastore.STATE_FILE):
        metastore.stop(str(state.parent))
    for key, value in previous.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
