"""statecat.statemeta: what a Flink snapshot holds, understood as one StateMeta model (no Spark).

    from statecat.statemeta.model import load_state_meta

    meta = load_state_meta("/savepoints/savepoint-1a2b3c-4d5e6f7a8b9c")
    for operator, state in meta.states():
        print(operator.label, state.name, state.kind)      # GroupAggregate[3] accState keyed

What lives here, by job:

* ``files/``: Flink's files: ``metadata`` (``_metadata``, versions 3-7), ``headers`` (state stream
  headers), ``snapshots`` (serializer snapshots), ``storage`` (where the bytes live, which may be
  read) and ``discovery``;
* ``java/``: the Java world, read as data and never run: ``javaser`` (Java serialization),
  ``classfile`` and ``classpath`` (a job's classes), ``kryo`` and ``avro`` (types from them);
* ``snapshotter/``: ``stateinfo`` (StateMeta as a versioned JSON document, STATEINFO.md there),
  ``watcher`` (``statecat watch``), ``completeness`` and ``taken_at``;
* the model, at the top: ``model`` (StateMeta, operators, states, locations), ``types`` (portable
  type descriptors), ``naming`` (one stable name per state), ``descriptors`` (declared types for
  states whose bytes carry none), ``source_splits`` (FLIP-27 split types), and what every layer
  shares: ``errors`` (one root exception, with file and offset), ``binary`` (a schema-blind reader
  of Java's bytes), ``html`` (rich display in notebooks).

The first layer: imports nothing of ``readers``, ``writers`` or ``catalog``.
"""
