"""Spark's hook for statecat: every session registers the ``flinkstate`` data source by itself.

Spark (4.0+) imports each installed top-level module named ``pyspark_*`` the first time a session
needs a Python data source and registers the module's ``DefaultSource`` under its ``name()``. This
module must stay installed as a regular package (not editable) for that discovery to see it.
"""

from statecat.catalog.source import FlinkStateDataSource as DefaultSource

__all__ = ["DefaultSource"]
