"""Catalog-wide tables: every state and every operator of every attached savepoint, in ``statecat``.

    SELECT database, operator, state_name, bytes FROM statecat.states ORDER BY database, bytes DESC

``statecat.states``: one row per state per savepoint (the savepoint's ``state_meta`` row with the
savepoint's database, path and checkpoint id in front). ``statecat.operators``: one row per
operator per savepoint, with its states' bytes, framing, unattributed and total bytes.

Design: both are ``flinkstate`` tables whose reader takes the savepoints from the registry
``statecat.savepoints`` when the query runs, reading the registry's Parquet files itself (a Python
data source reader has no Spark session). So they include savepoints attached lazily (whose
databases do not exist yet) and follow every attach with no refresh. Their definition holds the
registry's location (attach creates them: ``ensure_catalog_views``); a rewrite of the registry
(detach, relocate: ``registry.rewrite_records`` points it at new files) calls
``refresh_catalog_views`` to point them there too.
Each savepoint is one Spark task: it loads the savepoint's StateMeta and walks its key-groups for
the sizes (``statecat.readers.scans.state_bytes``, which says exactly what is counted); ``WHERE database =
...`` or ``IN (...)`` reads only those savepoints.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from statecat.catalog.spark.discovery import REGISTRY_DATABASE
from statecat.statemeta.errors import StatecatError

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from pyspark.sql import SparkSession

    from statecat.readers.scans.state_bytes import OperatorBytes
    from statecat.statemeta.model import StateMeta

STATES_TABLE = f"{REGISTRY_DATABASE}.states"
OPERATORS_TABLE = f"{REGISTRY_DATABASE}.operators"
CATALOG_KINDS = ("states", "operators")

SAVEPOINT_COLUMNS = (("database", "string"), ("path", "string"), ("checkpoint_id", "bigint"), ("operator", "string"))
SAVEPOINT_COMMENTS = {
    "database": "the savepoint's database (as in statecat.savepoints)",
    "path": "the savepoint's directory or URI",
    "checkpoint_id": "the checkpoint id Flink gave the savepoint",
    "operator": "the operator's uid, else its name, else its id (how statecat names it)",
}
OPERATORS_COLUMNS = SAVEPOINT_COLUMNS + (
    ("operator_id", "string"),
    ("operator_uid", "string"),
    ("operator_name", "string"),
    ("parallelism", "int"),
    ("max_parallelism", "int"),
    ("states", "int"),
    ("state_bytes", "bigint"),
    ("framing_bytes", "bigint"),
    ("unattributed_bytes", "bigint"),
    ("operator_bytes", "bigint"),
    ("unsupported", "string"),
)
OPERATORS_COMMENTS = {
    "operator_id": "Flink's operator id (32 hex digits)",
    "operator_uid": "the uid the job set on the operator (null when none, or before Flink 2.0)",
    "operator_name": "the operator's name (null in metadata before Flink 2.0)",
    "parallelism": "the operator's parallelism when the savepoint was taken",
    "max_parallelism": "the operator's max parallelism (number of key-groups)",
    "states": "how many states the operator has (as rows of statecat.states)",
    "state_bytes": "sum of the bytes of the operator's states (statecat.states.bytes)",
    "framing_bytes": "stream headers (serializer snapshots, state names) and key-group end markers",
    "unattributed_bytes": "bytes statecat cannot tell apart by state: handles it does not read (native RocksDB, "
    "raw state; see unsupported) and heap-checkpoint key-groups (their states' bytes are null)",
    "operator_bytes": "every stream of the operator in the savepoint: state_bytes + framing_bytes + unattributed_bytes",
    "unsupported": "handles statecat cannot read, with the reasons (null when none)",
}
TABLE_COMMENTS = {
    "states": "every state of every attached savepoint: types, entries, bytes (one row per savepoint and state)",
    "operators": "every operator of every attached savepoint: states, bytes (one row per savepoint and operator)",
}


def catalog_columns(kind: str) -> tuple[tuple, dict]:
    """(columns, comments) of ``statecat.states`` or ``statecat.operators``."""
    from statecat.catalog.spark.tables import STATE_META_COLUMNS, STATE_META_COMMENTS

    if kind == "states":
        return SAVEPOINT_COLUMNS + STATE_META_COLUMNS, {**STATE_META_COMMENTS, **SAVEPOINT_COMMENTS}
    return OPERATORS_COLUMNS, {**SAVEPOINT_COMMENTS, **OPERATORS_COMMENTS}


# ----------------------------------------------------------------------------- creating (driver, Spark)


def ensure_catalog_views(spark: SparkSession) -> None:
    """Creates ``statecat.states`` and ``statecat.operators`` (idempotent; recreated when their
    columns or the registry's location changed). Needs the registry table (``ensure_registry``)."""
    from statecat.catalog.spark.registry import REGISTRY_TABLE

    location = registry_location(spark, REGISTRY_TABLE)
    ensure_registry_tables(
        spark,
        location,
        [
            ("states", STATES_TABLE, TABLE_COMMENTS["states"]),
            ("operators", OPERATORS_TABLE, TABLE_COMMENTS["operators"]),
        ],
    )
    from statecat.catalog.spark.sql_forms import ensure_sql_forms

    ensure_sql_forms(spark, location)  # statecat.key_view / statecat.diff read the registry the same way


def ensure_registry_tables(spark: SparkSession, location: str, tables: Iterable[tuple[str, str, str]]) -> None:
    """Creates each (kind, name, comment) ``flinkstate`` table reading the registry at ``location``;
    one whose columns or registry location changed is recreated, an up-to-date one is kept."""
    from statecat.catalog.spark.tables import TableRef, create_table, ref_from_schema, spark_schema

    for kind, name, comment in tables:
        schema = spark_schema(TableRef(kind, location))
        if spark.catalog.tableExists(name):
            current = spark.table(name).schema
            if ref_from_schema(current) == ref_from_schema(schema) and current.names == schema.names:
                continue
            spark.sql(f"DROP TABLE {name}")
        create_table(spark, name, schema, comment)


def refresh_catalog_views(spark: SparkSession) -> None:
    """Points the tables at the registry's current files: call it after the registry table moved
    to a new location (``registry.rewrite_records``). Appends need no call."""
    ensure_catalog_views(spark)


def registry_location(spark: SparkSession, table: str) -> str:
    for row in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect():
        if row[0] == "Location":
            return row[1]
    raise StatecatError(
        f"the catalog does not say where {table} keeps its files", hint="Recreate the catalog's home, or attach again"
    )


# ----------------------------------------------------------------------------- reading (workers, no Spark)


class SavepointPartition(InputPartition):
    """One task: one registered savepoint."""

    def __init__(self, database: str, path: str, checkpoint_id: int | None):
        super().__init__(database)
        self.database = database
        self.path = path
        self.checkpoint_id = checkpoint_id


def registered_savepoints(location: str) -> list[tuple[str, str, int | None]]:
    """(database, path, checkpoint id) of every row of the registry, from its Parquet files, in
    checkpoint order (then time, then database), so an unordered query lists a copied checkpoint
    directory as Flink took it, not by name (chk-1, chk-10, chk-2)."""
    import pyarrow.dataset as ds

    from statecat.statemeta.snapshotter.taken_at import Placing, within_job_key

    filesystem, path = _filesystem(location)
    try:
        info = filesystem.get_file_info(path)
        if info.type.name == "NotFound":
            return []  # a registry nothing was ever written to
        dataset = ds.dataset(path, format="parquet", filesystem=filesystem)
        # `time` orders equal checkpoint ids only; a registry written without it still lists.
        columns = ["database", "path", "checkpoint_id"] + (["time"] if "time" in dataset.schema.names else [])
        table = dataset.to_table(columns=columns)
    except (OSError, pa.ArrowInvalid) as exc:
        raise StatecatError(
            f"cannot read the registry of attached savepoints at {location}: {exc}",
            hint="Attach again to recreate statecat.savepoints",
        ) from None
    times = table.column("time").to_pylist() if "time" in columns else [None] * len(table)
    rows = zip(*(table.column(c).to_pylist() for c in ("database", "path", "checkpoint_id")), times)
    ordered = sorted(rows, key=lambda r: (*within_job_key(Placing(r[1], r[2], None, r[3], "")), r[0]))
    return [(database, path, checkpoint_id) for database, path, checkpoint_id, _ in ordered]


def catalog_partitions(location: str, databases: set | None) -> list[SavepointPartition]:
    return [
        SavepointPartition(database, path, checkpoint_id)
        for database, path, checkpoint_id in registered_savepoints(location)
        if databases is None or database in databases
    ]


def catalog_batches(kind: str, partition: SavepointPartition, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The rows of one savepoint for ``statecat.states`` or ``statecat.operators``."""
    from statecat.statemeta.model import load_state_meta

    table = STATES_TABLE if kind == "states" else OPERATORS_TABLE
    try:
        meta = load_state_meta(partition.path)
        sizes = measured_sizes(meta)
        rows = states_rows(meta, sizes) if kind == "states" else operators_rows(meta, sizes)
    except (StatecatError, OSError) as exc:
        from statecat.catalog.spark.relocation import is_missing, missing_error

        # Moved or deleted since it was attached: say how to put the catalog right.
        problem = missing_error(partition.path, partition.database) if is_missing(partition.path) else exc
        raise StatecatError(
            f"{table}: cannot read savepoint {partition.path} (database {partition.database}): {problem}"
        ) from None
    front = (partition.database, partition.path, partition.checkpoint_id)
    rows = [front + row for row in rows]
    if rows:
        columns = list(zip(*rows))
        yield pa.RecordBatch.from_arrays(
            [pa.array(list(c), type=f.type) for c, f in zip(columns, schema)], schema=schema
        )


def states_rows(meta: StateMeta, sizes: dict[str, OperatorBytes | str]) -> list[tuple]:
    """``state_meta`` rows with the operator's label in front."""
    from statecat.catalog.spark.tables import state_meta_rows

    labels = {op.id: op.label for op in meta.operators}
    return [(labels[row[0]],) + row for row in state_meta_rows(meta, sizes)]


def measured_sizes(meta: StateMeta) -> dict[str, OperatorBytes | str]:
    """``operator_bytes`` of every operator whose data can be walked: one damaged operator (or
    savepoint) leaves its size columns empty with the reason, not the catalog-wide query failed."""
    from statecat.readers.scans.state_bytes import operator_bytes

    sizes: dict[str, OperatorBytes | str] = {}
    for op in meta.operators:
        try:
            sizes[op.id] = operator_bytes(meta, op)
        except StatecatError as exc:
            sizes[op.id] = f"sizes not measured: {exc}"
    return sizes


def operators_rows(meta: StateMeta, sizes: dict[str, OperatorBytes | str]) -> list[tuple]:
    rows = []
    for op in meta.operators:
        size = sizes[op.id]
        problems = list(op.unsupported) + ([size] if isinstance(size, str) else [])
        measured = size if not isinstance(size, str) else None
        rows.append(
            (
                op.label,
                op.id,
                op.uid,
                op.name,
                op.parallelism,
                op.max_parallelism,
                len(op.states),
                *(
                    (measured.state_bytes, measured.framing_bytes, measured.unattributed_bytes, measured.operator_bytes)
                    if measured
                    else (None, None, None, None)
                ),
                "; ".join(problems) or None,
            )
        )
    return rows


def _filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and path for the registry's location (``file:``, a path, or a URI)."""
    from pyarrow import fs

    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return fs.LocalFileSystem(), unquote(parsed.path)
    uri = location
    if parsed.scheme in ("s3a", "s3n"):  # Hadoop's names for what pyarrow calls s3
        uri = "s3" + location[len(parsed.scheme) :]
    try:
        return fs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, OSError) as exc:
        raise StatecatError(
            f"cannot reach the registry of attached savepoints at {location}: {exc}",
            hint="The catalog-wide tables read the registry's files directly; keep the "
            "warehouse on a local, s3:// or gs:// path",
        ) from None


__all__ = [
    "CATALOG_KINDS",
    "OPERATORS_TABLE",
    "STATES_TABLE",
    "catalog_batches",
    "catalog_columns",
    "catalog_partitions",
    "ensure_catalog_views",
    "refresh_catalog_views",
    "registered_savepoints",
]
