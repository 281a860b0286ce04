"""Spark's hook for statecat: every session registers the ``flinkstate`` data source by itself.

Spark (4.0+) imports each installed top-level module named ``pyspark_*`` the first time a session
needs a Python data source and registers the module's ``DefaultSource`` under its ``name()``. That
discovery lists modules on ``sys.path`` and so misses an editable install's import hook: statecat's
own sessions (``statecat.catalog.servers.sessions``) register the source themselves, any other session
(``spark-sql``) needs the regular install.
"""

from statecat.catalog.spark.source import FlinkStateDataSource as DefaultSource

__all__ = ["DefaultSource"]
