"""The Spark catalog's table names: the same in every savepoint of a job, the same as the Delta lake's.

Fixture pairs are savepoints of one job taken by different Flink versions and state backends; the
plan is the same, so each state's table (and each operator's) must keep its name.
"""

from __future__ import annotations

import pytest

from statecat.catalog.spark.tables import savepoint_tables
from statecat.statemeta.model import load_state_meta
from statecat.statemeta.naming import catalog_table_names, stable_state_names
from tests.fixtures.expected import CASES, savepoint_dir

# One SQL GROUP BY job, savepointed by Flink 1.15 to 2.3 on the heap and RocksDB backends.
GROUPBY = [
    c
    for c in (
        "sql_groupby_hashmap_2.3",
        "sql_groupby_rocksdb_2.3",
        "sql_groupby_hashmap_2.0",
        "sql_groupby_hashmap_1.20",
        "sql_groupby_rocksdb_1.20",
        "sql_groupby_hashmap_1.15",
        "sql_groupby_rocksdb_1.15",
    )
    if c in CASES
]


def _meta(case):
    return load_state_meta(str(savepoint_dir(case)), use_state_info=False)


def _catalog_tables(case) -> dict[tuple, str]:
    """(kind, operator id, state name) -> table name, as the catalog creates the tables."""
    return {(t.ref.kind, t.ref.operator, t.ref.state): t.name for t in savepoint_tables(_meta(case))}


@pytest.mark.parametrize("case", GROUPBY[1:])
def test_state_tables_keep_their_names_across_savepoints_of_one_job(case):
    first = {k: v for k, v in _catalog_tables(GROUPBY[0]).items() if k[0] == "state"}
    assert {k: v for k, v in _catalog_tables(case).items() if k[0] == "state"} == first
    assert set(first.values()) == {
        "accstate",
        "coordinator",
        "sourcereaderstate",
        "timer_state_event_user_timers",
        "timer_state_processing_user_timers",
    }


def test_operator_tables_carry_no_plan_counters_and_keep_their_names():
    # Flink 2.x keeps operator names ('GroupAggregate[3]'); the counter is left out.
    named = {c: _catalog_tables(c) for c in GROUPBY if not c.endswith(("1.15", "1.20"))}
    operator_tables = {c: {k: v for k, v in t.items() if k[0] == "operator"} for c, t in named.items()}
    first = next(iter(operator_tables.values()))
    assert sorted(first.values()) == ["groupaggregate", "source_src"]
    assert all(t == first for t in operator_tables.values()), operator_tables
    # Flink 1.x _metadata keeps no names: the operator id names the table, the same in 1.15 and 1.20.
    unnamed = [
        {k: v for k, v in _catalog_tables(c).items() if k[0] == "operator"}
        for c in GROUPBY
        if c.endswith(("1.15", "1.20"))
    ]
    assert unnamed and all(t == unnamed[0] for t in unnamed)
    assert all(v.startswith("op_") and v == f"op_{k[1][:8]}" for k, v in unnamed[0].items())


@pytest.mark.parametrize("case", [c for c in CASES if (savepoint_dir(c) / "_metadata").exists()])
def test_catalog_and_lake_name_states_alike_and_every_table_is_unique(case):
    meta = _meta(case)
    names = catalog_table_names(meta)
    assert names.states == stable_state_names(meta)
    tables = [t.name for t in savepoint_tables(meta)]
    assert len(tables) == len(set(tables)), tables
    assert "state_meta" in tables


@pytest.mark.parametrize("case", [c for c in CASES if (savepoint_dir(c) / "_metadata").exists()])
def test_every_table_name_is_a_plain_sql_identifier(case):
    import sqlglot

    for table in savepoint_tables(_meta(case)):
        parsed = sqlglot.parse_one(f"SELECT * FROM db.{table.name}", read="spark")
        assert parsed.find(sqlglot.exp.Table).name == table.name, table.name


def test_sql_keywords_name_no_table():
    names = catalog_table_names(_meta("sql_join_2.3"))  # Flink SQL's 'Join[5]'
    assert "join_op" in names.operators.values()


def test_an_operator_named_like_a_state_gets_its_id_appended():
    from dataclasses import replace

    meta = _meta("sql_groupby_hashmap_2.3")
    op = next(o for o in meta.operators if any(s.name == "accState" for s in o.states))
    clash = replace(meta, operators=tuple(replace(o, name="accState") if o is op else o for o in meta.operators))
    names = catalog_table_names(clash)
    assert names.states[(op.id, "accState")] == "accstate"
    assert names.operators[op.id] == f"accstate_{op.id[:8]}"
