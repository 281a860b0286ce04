"""The savepoint history lake: snapshots' state written as Delta tables, for dashboards.

* ``materialize``: ``statecat materialize``, each savepoint or checkpoint written exactly once
  (markers, retention, vacuum), with the deltalake package (no JVM);
* ``spark_writer``: the same lake written through Spark (``--engine spark``): delta-spark's writer,
  the state decoded by Spark tasks per key-group range;
* ``tables``: the lake's layout, its Arrow schemas and how a lake is read back.

May import: ``statemeta``, ``readers``, ``catalog.render``, ``catalog.report``, ``catalog.spark``
and ``catalog.servers`` (the rooms before it); the deltalake path needs none of the catalog's
rooms, the Spark writer reads state through ``catalog.spark``'s source. Not ``catalog.cli``.
"""
