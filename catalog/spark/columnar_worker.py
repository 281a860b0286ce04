"""statecat's Python worker for columnar state scans (the JVM side: catalog/spark/java-extension/).

Spark's own ``pyspark.daemon`` runs it (as ``pyspark_statecat.columnar``: the daemon imports only
modules named ``pyspark*``) and calls ``main`` once per request on the socket it hands over; a worker
is reused across requests, so imports, compiled decoders and cached StateMeta stay warm. Requests
(big-endian, as pyspark's own; a blob is an int32 length and its bytes):

    OP_PLAN  schema, options, filters, read schema (JSON)   (on the driver)
             -> STATUS_OK, pickled reader, int32 count, that many pickled partitions, STATUS_OK
    OP_READ  pickled reader, pickled partition               (in a task)
             -> STATUS_OK, an Arrow IPC stream of the partition's batches in the read schema (always closed
                with its end marker, so the JVM reads a well-formed stream even when decoding
                failed half way), then STATUS_OK

Any failure replies STATUS_ERROR and the error's text instead, and ends the worker. A state statecat
cannot read fails with "StatecatQueryError: ..." as in the row-wise source, without a traceback;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import traceback
from typing import TYPE_CHECKING, BinaryIO

import pyarrow as pa

if TYPE_CHECKING:
    import io

    from pyspark.sql.datasource import Filter

    from statecat.catalog.spark.source import FlinkStateReader

OP_PLAN, OP_READ = 1, 2
STATUS_OK, STATUS_ERROR = 0x5C0FFEE0, 0x5C0FFEE1
# Pickled plans and partitions are small; a longer prefix means the stream is not a request.
MAX_BLOB_BYTES = 256 << 20

_readers: dict[bytes, FlinkStateReader] = {}  # pickled reader -> reader, per worker process (a reader is per scan)
_READERS_KEPT = 16


class ColumnarRequestError(Exception):
    """A request the JVM sent that this worker cannot parse."""


def _read_exactly(infile: io.BufferedReader, n: int) -> bytes:
    data = infile.read(n)
    if data is None or len(data) != n:
        raise ColumnarRequestError(f"expected {n} bytes from the JVM, got {0 if data is None else len(data)}")
    return data


def _read_int(infile: io.BufferedReader) -> int:
    return struct.unpack(">i", _read_exactly(infile, 4))[0]


def _read_blob(infile: io.BufferedReader) -> bytes:
    n = _read_int(infile)
    if not 0 <= n <= MAX_BLOB_BYTES:
        raise ColumnarRequestError(f"expected a blob length within 0..{MAX_BLOB_BYTES}, got {n}")
    return _read_exactly(infile, n)


def _write_blob(outfile: BinaryIO, blob: bytes) -> None:
    outfile.write(struct.pack(">i", len(blob)))
    outfile.write(blob)


def main(infile: io.BufferedReader, outfile: BinaryIO) -> None:
    if not infile.peek(1):
        # The JVM closed the socket (it destroyed this worker after a failed or abandoned read):
        # a non-zero code makes pyspark.daemon end this child quietly instead of reusing it.
        raise SystemExit(1)
    try:
        op = _read_int(infile)
        if op == OP_PLAN:
            _plan(infile, outfile)
        elif op == OP_READ:
            _read(infile, outfile)
        else:
            raise ColumnarRequestError(f"expected request {OP_PLAN} or {OP_READ}, got {op}")
        outfile.flush()
    except (BrokenPipeError, ConnectionResetError):
        _abandoned()
    except Exception as exc:  # sent to the JVM, which fails the query with it
        _fail(outfile, exc)


def _abandoned() -> None:
    """The JVM stopped reading (a LIMIT was met, a task was cancelled) and closed the socket: there is
    nobody to answer. This worker ends here rather than in pyspark.daemon, which would print a
    traceback for the unsent bytes still in its buffer (spark-sql shows it to the user)."""
    os._exit(1)


def _fail(outfile: BinaryIO, exc: Exception) -> None:
    from statecat.statemeta.errors import StatecatError

    text = f"{type(exc).__name__}: {exc}"
    if not isinstance(exc, StatecatError):
        text += "\n" + traceback.format_exc()
    try:
        outfile.write(struct.pack(">i", STATUS_ERROR))
        _write_blob(outfile, text.encode("utf-8"))
        outfile.flush()
    except (BrokenPipeError, ConnectionResetError):
        _abandoned()
    raise SystemExit(1)  # the JVM destroys a worker whose request failed; this child ends too


def _plan(infile: io.BufferedReader, outfile: BinaryIO) -> None:
    from pyspark.sql.datasource import EqualTo, In
    from pyspark.sql.types import StructType

    from statecat.catalog.spark.source import FlinkStateDataSource

    schema, options, filters, read_schema = (json.loads(_read_blob(infile)) for _ in range(4))
    reader = FlinkStateDataSource(options).reader(StructType.fromJson(schema))
    pushed: list[Filter] = [
        EqualTo((f["column"],), f["values"][0]) if f["op"] == "EqualTo" else In((f["column"],), tuple(f["values"]))
        for f in filters
        if "." not in f["column"]
    ]  # a nested field is Spark's to filter
    for _ in reader.pushFilters(pushed):  # a generator: what it yields stays Spark's to evaluate
        pass
    reader.project(StructType.fromJson(read_schema))
    partitions = reader.partitions()
    outfile.write(struct.pack(">i", STATUS_OK))
    _write_blob(outfile, pickle.dumps(reader, protocol=pickle.HIGHEST_PROTOCOL))
    outfile.write(struct.pack(">i", len(partitions)))
    for partition in partitions:
        _write_blob(outfile, pickle.dumps(partition, protocol=pickle.HIGHEST_PROTOCOL))
    outfile.write(struct.pack(">i", STATUS_OK))


def _read(infile: io.BufferedReader, outfile: BinaryIO) -> None:
    reader_bytes = _read_blob(infile)
    partition = pickle.loads(_read_blob(infile))
    reader = _readers.get(reader_bytes)
    if reader is None:
        if len(_readers) >= _READERS_KEPT:
            _readers.pop(next(iter(_readers)))
        reader = _readers[reader_bytes] = pickle.loads(reader_bytes)
    outfile.write(struct.pack(">i", STATUS_OK))  # the stream follows
    writer = pa.ipc.new_stream(outfile, reader.read_schema)
    try:
        for batch in reader.read_columns(partition):
            writer.write_batch(batch)
    finally:
        writer.close()
    outfile.write(struct.pack(">i", STATUS_OK))
