"""statecat.writers: savepoints written, the read path run backwards (no Spark).

* ``savepoint_writer``: ``write_savepoint``, a savepoint rebuilt from another with edits applied
  (``keyed_rewrite`` rebuilds one keyed stream, also into another max parallelism; ``publish``
  puts the result in place: temporary directory, atomic rename, ``--overwrite``'s checks;
  ``output`` writes DST's streams, copying SRC's untouched bytes unread, each durable before
  ``_metadata``);
* ``entry_codec``: a state row <-> its key-group entry bytes; ``heap_rewrite``: the heap
  backend's layout re-framed canonically;
* ``metadata_writer``: ``_metadata``, written last;
* ``temp_dirs`` and ``object_store``: statecat's own temporary places, recognised by a marker and
  cleaned up after a killed run; object stores, which have no rename.

The fourth layer: files -> statemeta -> readers -> writers -> catalog. May import statemeta and
readers, nothing of catalog. Encoders sit beside their decoders in ``readers.codecs``: a codec is
one format both ways, and the readers' tests hold each pair to the same bytes.
"""
