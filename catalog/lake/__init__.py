"""The savepoint history lake: snapshots' state written as Delta tables, for dashboards.

* ``materialize``: ``statecat materialize``, each savepoint or checkpoint written exactly once
  (markers, retention, vacuum), with the deltalake package (no JVM);
* ``tables``: the lake's layout, its Arrow schemas and how a lake is read back.

May import: ``statemeta``, ``readers`` and ``catalog.render``. Not ``catalog.spark``,
``catalog.servers`` or ``catalog.cli``.
"""
