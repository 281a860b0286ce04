"""statecat.statemeta.files: Flink's own files, read as Flink wrote them.

* ``metadata``: ``_metadata`` (versions 3-7): operators, subtasks and their state handles;
* ``headers``: the header of each state stream (state names, serializer snapshots, offsets);
* ``snapshots``: serializer snapshots, turned into portable type descriptors;
* ``storage``: where a snapshot's bytes live (local paths, ``pyarrow.fs`` URIs) and what may be read;
* ``discovery``: the snapshots below a directory.

May import: statemeta's own top-level modules (``errors``, ``binary``, ``types``) and the Java
world (``statemeta.java``), whose serializers the snapshots name; the model imports these rooms,
never the other way round.
"""
