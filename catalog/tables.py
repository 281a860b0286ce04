"""What tables a savepoint becomes, and their Spark schemas. No Spark session needed (pyspark types only).

Per savepoint database:

* ``state_meta``: one row per state (operator, kind, types, decode status, size);
* ``<state>``: one table per state, columns ``key, namespace, value`` (keyed and timer states) or
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
from dataclasses import asdict, dataclass

from statecat.statemeta.errors import LookupFailedError
from statecat.statemeta.model import STATE_META_TABLE, StateInfo, StateMeta
from statecat.statemeta.naming import catalog_table_names

SOURCE_NAME = "flinkstate"
REF_METADATA_KEY = "statecat.table"
TABLE_KINDS = ("state", "operator", "state_meta")

STATE_META_COLUMNS = (
    ("operator_id", "string"), ("operator_uid", "string"), ("operator_name", "string"),
    ("parallelism", "int"), ("max_parallelism", "int"), ("state_name", "string"), ("kind", "string"),
    ("state_type", "string"), ("key_type", "string"), ("namespace_type", "string"), ("value_type", "string"),
    ("decode_status", "string"), ("raw_reasons", "string"), ("stream_bytes", "bigint"), ("table_name", "string"),
)
OPERATOR_COLUMNS = (
    ("state_name", "string"), ("kind", "string"), ("subtask", "int"),
    ("key", "string"), ("namespace", "string"), ("value", "string"),
)

COLUMN_COMMENTS = {
    "key": "the key the state belongs to (Flink's keyBy / GROUP BY key)",
    "namespace": "window or other namespace of the value (null for plain keyed state)",
    "subtask": "the subtask that held the value",
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


    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> TableRef:
        data = json.loads(text)
        return TableRef(data["kind"], data["savepoint"], data.get("operator"), data.get("state"),
                        bool(data.get("unpickle")), data.get("operator_label"))

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


def savepoint_tables(meta: StateMeta) -> list[TableDef]:
    """Every table of a savepoint's database, named as ``catalog_table_names`` names them."""
    names = catalog_table_names(meta)
    tables = [TableDef(STATE_META_TABLE, TableRef("state_meta", meta.path),
                       f"states of Flink savepoint {meta.path} (checkpoint {meta.checkpoint_id})")]
    for op, state in meta.states():
        tables.append(TableDef(names.states[(op.id, state.name)],
                               TableRef("state", meta.path, op.id, state.name, operator_label=op.label),
                               f"{state.kind} state {state.name!r} of operator {op.label}"))
    for op in meta.operators:
        if op.id in names.operators:
            tables.append(TableDef(names.operators[op.id], TableRef("operator", meta.path, op.id, operator_label=op.label),
                                   f"all states of operator {op.label} as JSON text"))
    return tables


def state_table_names(meta: StateMeta) -> dict[tuple[str, str], str]:
    """(operator id, state name) -> table name."""
    return catalog_table_names(meta).states


# ----------------------------------------------------------------------------- schemas

def spark_schema(ref: TableRef, meta: StateMeta | None = None):
    """The Spark StructType of a table, its first column carrying the TableRef."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    # Built without a session: Python workers planning a read have no SparkContext to parse DDL.
    simple_types = {"string": StringType(), "int": IntegerType(), "bigint": LongType()}

    if ref.kind == "state":
        from pyspark.sql.pandas.types import from_arrow_schema
        from statecat.readers.arrow_types import state_schema

        if meta is None:
            raise ValueError("state tables need the savepoint's StateMeta")
        _, state = meta.find_state(ref.state, ref.operator)
        fields = list(from_arrow_schema(state_schema(state), prefer_timestamp_ntz=True).fields)
        fields = [StructField(f.name, f.dataType, True) for f in fields]
    else:
        columns = STATE_META_COLUMNS if ref.kind == "state_meta" else OPERATOR_COLUMNS
        fields = [StructField(name, simple_types[t], True) for name, t in columns]
    out = []
    for i, f in enumerate(fields):
        metadata = {}
        if f.name in COLUMN_COMMENTS and ref.kind != "state_meta":
            metadata["comment"] = COLUMN_COMMENTS[f.name]
        if i == 0:
            metadata[REF_METADATA_KEY] = ref.to_json()
        out.append(StructField(f.name, f.dataType, True, metadata))
    return StructType(out)


def ref_from_schema(schema) -> TableRef | None:
    if schema is None or not schema.fields:
        return None
    text = (schema.fields[0].metadata or {}).get(REF_METADATA_KEY)
    return TableRef.from_json(text) if text else None


def ref_from_options(options) -> TableRef | None:
    """``spark.read.format("flinkstate").option("path", ...)``: state (+operator), or table=state_meta."""
    opts = {k.lower(): v for k, v in dict(options).items()}
    path = opts.get("path") or opts.get("savepoint")
    if not path:
        return None
    kind = opts.get("table", "state" if opts.get("state") else "state_meta" if not opts.get("operator") else "operator")
    if kind not in TABLE_KINDS:
        raise LookupFailedError(f"option table={kind!r} is not one of {', '.join(TABLE_KINDS)}")
    if kind == "state" and not opts.get("state"):
        raise LookupFailedError("option 'state' is missing",
                                hint="Give .option('state', NAME) or .option('table', 'state_meta')")
    unpickle = opts.get("unpickle", "false").lower() in ("true", "1", "yes")
    return TableRef(kind, path, opts.get("operator"), opts.get("state"), unpickle)


def state_meta_rows(meta: StateMeta) -> list[tuple]:
    names = state_table_names(meta)
    rows = []
    for op, state in meta.states():
        rows.append((op.id, op.uid, op.name, op.parallelism, op.max_parallelism, state.name, state.kind,
                     state.state_type, _describe(state.key), _describe(state.namespace), _describe(state.value),
                     state.decode_status, "; ".join(state.raw_reasons) or None, state.stream_bytes,
                     names.get((op.id, state.name))))
    return rows


def _describe(desc) -> str | None:
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
