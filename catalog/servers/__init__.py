"""The processes statecat runs or joins: Spark sessions, the shared metastore, the JDBC endpoint.

* ``sessions``: a local Spark session on a statecat home, with the catalog, the data source,
  pushdown and the columnar scan set up; it starts the home's metastore when needed;
* ``metastore``: the home's shared Hive metastore server (one per home, started on demand,
  stopping itself when idle) and ``conf/`` for Spark programs statecat does not start;
* ``thrift_server``: ``statecat serve``, Spark's Thrift (HiveServer2) server on the home's
  catalog, attaching savepoints as they arrive; ``sql_client`` sends ``statecat sql`` to it;
* ``local_ports``: free ports, listening sockets and process checks on loopback;
* ``spark_tools``: pyspark's ``spark-sql`` and ``beeline`` run from anywhere, and the stderr of
  every JVM statecat starts without the JDK's incubator-module warning.

May import: ``statemeta``, ``readers``, ``catalog.render``, ``catalog.report`` and
``catalog.spark``. Not ``catalog.lake`` or ``catalog.cli``.
"""
