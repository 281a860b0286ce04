"""Reading RocksDB's block-based SST files without RocksDB: the files Flink's RocksDB state
backend (FRocksDB 6.20 on Flink 1.x, 8.10 on Flink 2.x) writes into native snapshots.

``SstFile`` reads one file lazily (footer, metaindex, properties, index, then only the data blocks
a key range needs); ``ColumnFamilyView`` merges a column family's files into what RocksDB's own
iterator returns.
"""

from statecat.readers.backends.sst.block import DecodedBlock
from statecat.readers.backends.sst.column_family import ColumnFamilyView, RangeTombstones, concatenate_with_delimiter
from statecat.readers.backends.sst.format import SUPPORTED_FORMAT_VERSIONS
from statecat.readers.backends.sst.table import SstFile

__all__ = [
    "ColumnFamilyView",
    "DecodedBlock",
    "RangeTombstones",
    "SUPPORTED_FORMAT_VERSIONS",
    "SstFile",
    "concatenate_with_delimiter",
]
