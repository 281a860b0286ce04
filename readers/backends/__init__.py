"""statecat.readers.backends: where each state backend keeps a key-group's bytes.

* ``heap_checkpoint``: the heap backend's own checkpoint layout (state by state, key-group by key-group);
* ``native_rocksdb``: RocksDB and ForSt native snapshots, read from their SST files (``sst/``);
* ``native_merge``: RocksDB's merge operands as Flink's list state writes them;
* ``framing``: the canonical framing of a key-group's entries, both ways. It sits here, not with
  the writers, because the native backend frames what it reads in it for the scanner.
* ``streams``: what every stream reader shares (snapshot compression).

May import: statemeta and ``readers.codecs``.
"""
