"""statecat.statemeta: what a Flink snapshot holds, understood as one StateMeta model (no Spark).

    from statecat.statemeta.model import load_state_meta

    meta = load_state_meta("/savepoints/savepoint-1a2b3c-4d5e6f7a8b9c")
    for operator, state in meta.states():
        print(operator.label, state.name, state.kind)      # GroupAggregate[3] accState keyed

What lives here, by job:

* the files: ``metadata`` (``_metadata``, versions 3-7), ``headers`` (state stream headers),
  ``snapshots`` (serializer snapshots) and ``storage`` (where the bytes live, which may be read);
* the model: ``model`` (StateMeta, operators, states, locations), ``types`` (portable type
  descriptors), ``naming`` (one stable name per state), ``descriptors`` (declared types for states
  whose bytes carry none), ``source_splits`` (FLIP-27 split types), ``classfile`` and ``classpath``
  (a job's classes read as data, never loaded), ``kryo`` (Kryo-serialized types typed from them)
  and ``avro`` (flink-avro types from the writer schema in the serializer snapshot);
* the snapshotter: ``stateinfo`` (StateMeta as a versioned JSON document, STATEINFO.md),
  ``watcher`` (``statecat watch``), ``discovery``, ``completeness`` and ``taken_at``;
* shared by every layer: ``errors`` (one root exception, with file and offset), ``binary`` and
  ``javaser`` (schema-blind readers of Java bytes), ``html`` (rich display in notebooks).

The first layer: imports nothing of ``readers`` or ``catalog``.
"""
