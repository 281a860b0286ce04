"""statecat.catalog: Flink savepoints as Spark databases (``attach``, ``sql``, ``session``) and the CLI.

The Spark side of statecat, in rooms by job; data flows one way, and so do the imports:

* ``render``: decoded values as JSON-ready data, the one rendering every room shares;
* ``report/``: plots and the HTML report (no Spark);
* ``spark/``: the ``flinkstate`` data source and each savepoint a database in Spark's catalog;
* ``servers/``: Spark sessions, the home's shared metastore, ``statecat serve``;
* ``lake/``: the savepoint history as Delta tables (``statecat materialize``);
* ``cli/``: the ``statecat`` command, one module per command.

Each room may import only the ones listed before it (``tests/test_layout.py`` checks every
import), and the CLI is imported by none. ``pyspark_statecat/`` is the top-level module Spark
discovers the data source by; ``_root/`` is the ``statecat`` package itself.

Spark is imported on first use only, so the CLI's reader commands start without it.
"""

from typing import Any

_EXPORTS = {
    "attach": "spark.databases",
    "materialise": "spark.databases",
    "AttachResult": "spark.databases",
    "EAGER_LIMIT": "spark.databases",
    "sql": "spark.queries",
    "prepare": "spark.queries",
    "session": "servers.home_server",
    "REGISTRY_TABLE": "spark.registry",
    "write_savepoint": "spark.edits",
}
# Modules documented under their old place (``from statecat.catalog import plots``).
_MODULES = {"plots": "report.plots"}


def __getattr__(name: str) -> Any:
    import importlib

    module = _EXPORTS.get(name)
    if module is not None:
        return getattr(importlib.import_module(f"statecat.catalog.{module}"), name)
    if name in _MODULES:
        return importlib.import_module(f"statecat.catalog.{_MODULES[name]}")
    raise AttributeError(f"module 'statecat.catalog' has no attribute {name!r}")
