"""Savepoints inside Spark: the ``flinkstate`` data source and each savepoint a database.

What lives here, by job:

* the data source Spark calls: ``source`` (``flinkstate``: partitions, pushdown, reads),
  ``columnar_worker`` (the Python side of the columnar scan) and ``extension`` (the Java side,
  compiled from ``java-extension/`` on first use); ``errors`` turns Spark's failures back into statecat's;
* what a savepoint becomes in the catalog: ``tables`` (table kinds, schemas, ``TableRef``),
  ``discovery`` (database names), ``registry`` (``statecat.savepoints``), ``databases``
  (``attach``), ``relocation`` (``detach``, ``relocate``), ``catalog_views`` (``statecat.states``,
  ``statecat.operators``) and ``sql_forms`` (``statecat.key_view``, ``statecat.diff``);
* ``queries``: SQL over attached savepoints, creating the databases a query names first;
* state surgery: ``edit_plan`` (statements parsed by sqlglot and checked against a savepoint's
  tables), ``edit_spark`` (Spark evaluates them on working copies of the rows they can touch) and
  ``edits`` (what changed, applied key-group by key-group by the writer ``statecat write`` runs).

May import: ``statemeta``, ``readers``, ``catalog.render`` and ``catalog.report``. Not ``catalog.servers``, ``catalog.lake`` or ``catalog.cli``: those build
on this package. Importing it imports no Spark; its modules import pyspark where they need it.
"""
