"""statecat.readers.codecs: bytes <-> Python values, one module per serializer family, each
decoder beside its encoder.

* ``decoders`` and ``encoders``: the trees built once per type and run per record, with Java's
  basic serializers (primitives, String, BigDecimal, time types, Tuple, POJO, Row, lists, maps);
  ``values`` checks a Python value against its type before it is encoded;
* ``rowdata``: the Table runtime's binary formats (BinaryRowData, arrays, maps);
* ``pyflink``: PyFlink's coders (pickled values are opened only when the user opts in);
* ``kryo`` and ``kryo_encoder``: Kryo 2.24 and 5, typed from the job's classes;
* ``avro``: flink-avro's values; ``java_serialized``: JavaSerializer's values;
* ``cep``: the CEP operator's NFA and shared buffer; ``source_splits``: FLIP-27 splits and enumerators;
* ``ttl``: state TTL's timestamp around a value; ``arrow_types``: the Arrow type of each state.

May import: statemeta only. The other readers rooms (backends, scans) build on these.
"""
