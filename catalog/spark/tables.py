"""What tables a savepoint becomes, and their Spark schemas. No Spark session needed (pyspark types only).

Per savepoint database:

* ``state_meta``: one row per state (operator, kind, types, decode status, size);
* ``<state>``: one table per state, columns ``key, namespace, value`` (keyed and timer states; states
  with TTL add ``ttl_timestamp``, statecat.readers.codecs.ttl) or
  ``value, subtask`` (operator list, union and broadcast states), named as in the Delta lake
  (``statecat.statemeta.naming``: ``accstate``, ``<operator>__<state>`` only where several operators
  have a state of that name);
* ``<operator>``: one table per operator with states, spanning all of them as JSON text
  (``state_name, kind, subtask, key, namespace, value``).

A catalog table reaches the data source only through its schema (Spark 4.2 does not hand a Python
data source the OPTIONS of a catalog table), so the first column's metadata carries a ``TableRef``
naming the savepoint, operator, state and table kind.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, cast

from statecat.statemeta.errors import LookupFailedError
from statecat.statemeta.model import STATE_META_TABLE, StateInfo, StateMeta
from statecat.statemeta.naming import catalog_table_names

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from statecat.statemeta.types import TypeDescriptor

SOURCE_NAME = "flinkstate"
REF_METADATA_KEY = "statecat.table"
# states, operators: catalog_views; key_view, diff: sql_forms
TABLE_KINDS = ("state", "operator", "state_meta", "states", "operators", "key_view", "diff")

STATE_META_COLUMNS = (
    ("operator_id", "string"),
    ("operator_uid", "string"),
    ("operator_name", "string"),
    ("parallelism", "int"),
    ("max_parallelism", "int"),
    ("state_name", "string"),
    ("kind", "string"),
    ("state_type", "string"),
    ("key_type", "string"),
    ("namespace_type", "string"),
    ("value_type", "string"),
    ("decode_status", "string"),
    ("raw_reasons", "string"),
    ("entries", "bigint"),
    ("bytes", "bigint"),
    ("operator_bytes", "bigint"),
    ("table_name", "string"),
)
# What each state_meta column holds (shown by DESCRIBE); exactly what entries and bytes count:
# statecat.readers.scans.state_bytes.
STATE_META_COMMENTS = {
    "operator_id": "Flink's operator id (32 hex digits)",
    "operator_uid": "the uid the job set on the operator (null when none, or before Flink 2.0)",
    "operator_name": "the operator's name (null in metadata before Flink 2.0)",
    "parallelism": "the operator's parallelism when the savepoint was taken",
    "max_parallelism": "the operator's max parallelism (number of key-groups)",
    "state_name": "the state's name as Flink writes it",
    "kind": "keyed | timer | operator_list | union | broadcast | coordinator",
    "state_type": "keyed state: VALUE, LIST, MAP, REDUCING or AGGREGATING as Flink wrote it",
    "key_type": "type of the key (keyed and timer states)",
    "namespace_type": "type of the namespace, e.g. the window (keyed and timer states)",
    "value_type": "type of the value (timers: the timestamp; broadcast: the map entry)",
    "decode_status": "full: every part decodes; raw: some part comes out as bytes (see raw_reasons)",
    "raw_reasons": "why parts of the state come out as bytes, or why its size could not be measured (null when none)",
    "entries": "entries stored: keyed state one per key and namespace (MapState: per map entry), timers one "
    "per timer, list/union state one per element, broadcast state map entries summed over the "
    "subtasks' copies; null for the coordinator",
    "bytes": "bytes of this state in the savepoint: its entries in the keyed key-group streams (compressed "
    "key-groups shared in proportion), or its part of the operator state streams; the operator's "
    "states' bytes add up to operator_bytes less headers and end markers (null: not measured, e.g. "
    "heap-checkpoint key-groups)",
    "operator_bytes": "every stream of the operator in the savepoint (the same on each of its states: do not "
    "sum it over states)",
    "table_name": "the state's table in this database",
}
OPERATOR_COLUMNS = (
    ("state_name", "string"),
    ("kind", "string"),
    ("subtask", "int"),
    ("key", "string"),
    ("namespace", "string"),
    ("value", "string"),
)

COLUMN_COMMENTS = {
    "key": "the key the state belongs to (Flink's keyBy / GROUP BY key)",
    "namespace": "window or other namespace of the value (null for plain keyed state)",
    "subtask": "the subtask that held the value",
    "ttl_timestamp": "states with TTL: when the value was last written (or read, with OnReadAndWrite), epoch ms as "
    "Flink keeps it; ListState: per element, MapState: per map key (statecat.readers.codecs.ttl)",
}


@dataclass(frozen=True)
class TableRef:
    """Which data a ``flinkstate`` table reads: a state, an operator's states, or a savepoint's metadata."""

    kind: str  # state | operator | state_meta
    savepoint: str
    operator: str | None = None  # operator id
    state: str | None = None
    unpickle: bool = False
    operator_label: str | None = None  # uid, name or id: how messages name the operator
    # A descriptor file (absolute path) applied to the savepoint's StateMeta when the table is read:
    # `attach --descriptors FILE` stores it here, so Spark's Python workers apply it too.
    descriptors: str | None = None
    # `attach --classpath JAR|DIR`: the job's classes (absolute paths) that type its Kryo state.
    classpath: tuple[str, ...] = ()

    def to_json(self) -> str:
        data = asdict(self)
        if data["descriptors"] is None:  # tables attached without one keep their exact metadata
            del data["descriptors"]
        if not data["classpath"]:
            del data["classpath"]
        else:
            data["classpath"] = list(data["classpath"])
        return json.dumps(data, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> TableRef:
        data = json.loads(text)
        return TableRef(
            data["kind"],
            data["savepoint"],
            data.get("operator"),
            data.get("state"),
            bool(data.get("unpickle")),
            data.get("operator_label"),
            data.get("descriptors"),
            tuple(data.get("classpath") or ()),
        )

    def describe(self) -> str:
        parts = [f"savepoint {self.savepoint}"]
        if self.operator_label or self.operator:
            parts.append(f"operator {self.operator_label or self.operator}")
        if self.state:
            parts.append(f"state {self.state!r}")
        return ", ".join(parts)


@dataclass(frozen=True)
class TableDef:
    name: str
    ref: TableRef
    comment: str


def savepoint_tables(
    meta: StateMeta, descriptors: str | None = None, classpath: tuple[str, ...] = ()
) -> list[TableDef]:
    """Every table of a savepoint's database, named as ``catalog_table_names`` names them.

    ``descriptors``: the descriptor file ``meta`` was loaded with; its tables carry it."""
    names = catalog_table_names(meta)
    tables = [
        TableDef(
            STATE_META_TABLE,
            TableRef("state_meta", meta.path, descriptors=descriptors, classpath=classpath),
            f"states of Flink savepoint {meta.path} (checkpoint {meta.checkpoint_id})",
        )
    ]
    for op, state in meta.states():
        tables.append(
            TableDef(
                names.states[(op.id, state.name)],
                TableRef(
                    "state",
                    meta.path,
                    op.id,
                    state.name,
                    operator_label=op.label,
                    descriptors=descriptors,
                    classpath=classpath,
                ),
                f"{state.kind} state {state.name!r} of operator {op.label}",
            )
        )
    for op in meta.operators:
        if op.id in names.operators:
            tables.append(
                TableDef(
                    names.operators[op.id],
                    TableRef(
                        "operator",
                        meta.path,
                        op.id,
                        operator_label=op.label,
                        descriptors=descriptors,
                        classpath=classpath,
                    ),
                    f"all states of operator {op.label} as JSON text",
                )
            )
    return tables


def state_table_names(meta: StateMeta) -> dict[tuple[str, str], str]:
    """(operator id, state name) -> table name."""
    return catalog_table_names(meta).states


# ----------------------------------------------------------------------------- schemas


def spark_schema(ref: TableRef, meta: StateMeta | None = None) -> StructType:
    """The Spark StructType of a table, its first column carrying the TableRef."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType, TimestampType

    # Built without a session: Python workers planning a read have no SparkContext to parse DDL.
    simple_types = {"string": StringType(), "int": IntegerType(), "bigint": LongType(), "timestamp": TimestampType()}

    if ref.kind == "state":
        from pyspark.sql.pandas.types import from_arrow_schema

        from statecat.readers.codecs.arrow_types import state_schema

        if meta is None:
            raise ValueError("state tables need the savepoint's StateMeta")
        if ref.unpickle:  # PyFlink thread-mode pickles become JSON text columns (see SavepointReader)
            from statecat.statemeta.descriptors import with_pyflink_pickles

            meta = with_pyflink_pickles(meta, unpickle=True)
        # A state table's ref names its state (ref_from_options and savepoint_tables see to it).
        _, state = meta.find_state(cast(str, ref.state), ref.operator)
        fields = list(from_arrow_schema(state_schema(state), prefer_timestamp_ntz=True).fields)
        fields = [StructField(f.name, f.dataType, True) for f in fields]
        comments = COLUMN_COMMENTS
    else:
        columns, comments = _columns_and_comments(ref.kind)
        fields = [StructField(name, simple_types[t], True) for name, t in columns]
    out = []
    for i, f in enumerate(fields):
        metadata = {}
        if f.name in comments:
            metadata["comment"] = comments[f.name]
        if i == 0:
            metadata[REF_METADATA_KEY] = ref.to_json()
        out.append(StructField(f.name, f.dataType, True, metadata))
    return StructType(out)


def _columns_and_comments(kind: str) -> tuple[tuple, dict]:
    if kind == "state_meta":
        return STATE_META_COLUMNS, STATE_META_COMMENTS
    if kind in ("states", "operators"):
        from statecat.catalog.spark.catalog_views import catalog_columns

        return catalog_columns(kind)
    if kind in ("key_view", "diff"):
        from statecat.catalog.spark.sql_forms import sql_form_columns

        return sql_form_columns(kind)
    return OPERATOR_COLUMNS, COLUMN_COMMENTS


def create_table(spark: SparkSession, name: str, schema: StructType, comment: str | None) -> None:
    """Creates the ``flinkstate`` catalog table ``name`` with ``schema`` (whose first column's metadata
    holds its TableRef: no SQL DDL keeps column metadata), reading none of its rows."""
    if not is_connect_session(spark):
        spark.catalog.createTable(name, source=SOURCE_NAME, schema=schema, description=comment)
        return
    # A Spark Connect client's Catalog.createTable fetches the new table's every row (it runs the
    # plan to a table); the server creates the table when it plans the command, which asking for the
    # schema does without running it.
    from pyspark.sql.connect import plan
    from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame

    command = plan.CreateTable(
        table_name=name,
        path=None,  # type: ignore[arg-type] # a catalog table of the source, no path (as Catalog.createTable)
        source=SOURCE_NAME,
        schema=schema,
        description=comment,
        options={},
    )
    ConnectDataFrame(command, session=cast("Any", spark)).schema  # noqa: B018 - planning it creates the table


def is_connect_session(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect client's session (not a session in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def ref_from_schema(schema: StructType | None) -> TableRef | None:
    if schema is None or not schema.fields:
        return None
    text = (schema.fields[0].metadata or {}).get(REF_METADATA_KEY)
    return TableRef.from_json(text) if text else None


def ref_from_options(options: Mapping[str, str]) -> TableRef | None:
    """``spark.read.format("flinkstate").option("path", ...)``: state (+operator), or table=state_meta."""
    opts = {k.lower(): v for k, v in dict(options).items()}
    path = opts.get("path") or opts.get("savepoint")
    if not path:
        return None
    kind = opts.get("table", "state" if opts.get("state") else "state_meta" if not opts.get("operator") else "operator")
    if kind not in TABLE_KINDS:
        raise LookupFailedError(f"option table={kind!r} is not one of {', '.join(TABLE_KINDS)}")
    if kind == "state" and not opts.get("state"):
        raise LookupFailedError(
            "option 'state' is missing", hint="Give .option('state', NAME) or .option('table', 'state_meta')"
        )
    unpickle = opts.get("unpickle", "false").lower() in ("true", "1", "yes")
    # option("classpath", "job.jar:classes/"): entries separated as on a JVM's classpath
    classpath = tuple(os.path.abspath(e) for e in (opts.get("classpath") or "").split(os.pathsep) if e)
    return TableRef(
        kind,
        path,
        opts.get("operator"),
        opts.get("state"),
        unpickle,
        descriptors=opts.get("descriptors"),
        classpath=classpath,
    )


def state_meta_rows(meta: StateMeta, sizes: dict | None = None) -> list[tuple]:
    """One row per state; ``sizes`` (``statecat.readers.scans.state_bytes.savepoint_bytes``, a walk of the
    key-groups) is computed when not given. An operator whose data cannot be walked (damaged) keeps
    its rows, with no sizes and the reason in ``raw_reasons``: this table is where a damaged savepoint is diagnosed."""
    from statecat.readers.scans.state_bytes import operator_bytes
    from statecat.statemeta.errors import StatecatError

    names = state_table_names(meta)
    rows = []
    for op in meta.operators:
        size, size_error = (sizes or {}).get(op.id), None
        if isinstance(size, str):  # measured before, and failed (``catalog_views.measured_sizes``)
            size, size_error = None, size
        elif size is None:
            try:
                size = operator_bytes(meta, op)
            except StatecatError as exc:
                size_error = f"sizes not measured: {exc}"
        for state in op.states:
            measured = size.states[state.name] if size is not None else None
            notes = "; ".join(list(state.raw_reasons) + ([size_error] if size_error else [])) or None
            rows.append(
                (
                    op.id,
                    op.uid,
                    op.name,
                    op.parallelism,
                    op.max_parallelism,
                    state.name,
                    state.kind,
                    state.state_type,
                    _describe(state.key),
                    _describe(state.namespace),
                    _describe(state.value),
                    state.decode_status,
                    notes,
                    measured.entries if measured else None,
                    measured.bytes if measured else None,
                    size.operator_bytes if size is not None else None,
                    names.get((op.id, state.name)),
                )
            )
    return rows


def _describe(desc: TypeDescriptor | None) -> str | None:
    return desc.describe() if desc is not None else None


__all__ = [
    "SOURCE_NAME",
    "StateInfo",
    "TableDef",
    "TableRef",
    "ref_from_options",
    "ref_from_schema",
    "savepoint_tables",
    "spark_schema",
    "state_meta_rows",
]
