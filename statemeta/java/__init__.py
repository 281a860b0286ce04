"""statecat.statemeta.java: the Java world, read as data and never run.

* ``javaser``: Java serialization streams (the serializer snapshots that are Java objects);
* ``classfile`` and ``classpath``: a job's classes parsed from JARs and class directories (never loaded);
* ``kryo``: Kryo-serialized types typed from those classes (Kryo 2.24 on Flink 1.x, 5 on Flink 2.x);
* ``avro``: flink-avro's types, from the writer schema in the serializer snapshot.

May import: statemeta's own top-level modules (``errors``, ``binary``, ``types``, and the model for
its types); nothing of ``statemeta.files`` or ``statemeta.snapshotter`` at run time.
"""
