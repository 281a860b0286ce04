"""Flink SQL regular join whose left side buffers rows with a column of every logical type.

    a_src (CSV, scalar columns) -> view `a`: every typed column built with CAST, ARRAY[...],
    MAP[...], ROW(...); column c_* is NULL where the row's null mask `nm` has a '1' at its
    position (COLUMNS order below).
    b_src (CSV: k1, k2, vb) -> view `b`: SELECT k1, k2, COLLECT(vb) AS vbs GROUP BY k1, k2
    (MULTISET<STRING>; a GroupAggregate, so b is an update stream with unique key (k1, k2)).

    SELECT a.*, b.vbs FROM a JOIN b ON a.k1 = b.k1 AND a.k2 = b.k2

Two-field join key (k1 STRING, k2 INT): the keys are RowData of two fields. `a` has no unique
key: `left-records` MapState<RowData record, Integer count>; b's unique key is the join key:
`right-records` ValueState<RowData record>. table.local-time-zone = UTC.
"""

import os

from pyflink.datastream import StreamExecutionEnvironment
from pyflink.table import ExplainDetail, StreamTableEnvironment

import _common

A_SRC = (
    "k1 STRING, k2 INT, id BIGINT, s STRING, flag BOOLEAN, t8 INT, t16 INT, i INT, "
    "n BIGINT, x DOUBLE, d2 STRING, d10 STRING, dy STRING, t0 STRING, t3 STRING, "
    "ts3 STRING, ts9 STRING, ms BIGINT, ts6 STRING, nm STRING"
)

# (column, SQL type, expression over a_src); the generator (SqlTypes) mirrors this table.
COLUMNS = [
    ("c_char", "CHAR(5)", "CAST(s AS CHAR(5))"),
    ("c_varchar", "VARCHAR(20)", "CAST(s AS VARCHAR(20))"),
    ("c_string", "STRING", "s"),
    ("c_boolean", "BOOLEAN", "flag"),
    ("c_tinyint", "TINYINT", "CAST(t8 AS TINYINT)"),
    ("c_smallint", "SMALLINT", "CAST(t16 AS SMALLINT)"),
    ("c_int", "INT", "i"),
    ("c_bigint", "BIGINT", "n"),
    ("c_float", "FLOAT", "CAST(x AS FLOAT)"),
    ("c_double", "DOUBLE", "x"),
    ("c_dec10_2", "DECIMAL(10, 2)", "CAST(d2 AS DECIMAL(10, 2))"),
    ("c_dec30_10", "DECIMAL(30, 10)", "CAST(d10 AS DECIMAL(30, 10))"),
    ("c_date", "DATE", "CAST(dy AS DATE)"),
    ("c_time0", "TIME(0)", "CAST(t0 AS TIME(0))"),
    ("c_time3", "TIME(3)", "CAST(t3 AS TIME(3))"),
    ("c_ts3", "TIMESTAMP(3)", "CAST(ts3 AS TIMESTAMP(3))"),
    ("c_ts9", "TIMESTAMP(9)", "CAST(ts9 AS TIMESTAMP(9))"),
    ("c_ltz3", "TIMESTAMP_LTZ(3)", "TO_TIMESTAMP_LTZ(ms, 3)"),
    ("c_ltz6", "TIMESTAMP_LTZ(6)", "CAST(CAST(ts6 AS TIMESTAMP(6)) AS TIMESTAMP_LTZ(6))"),
    ("c_binary4", "BINARY(4)", "CAST(s AS BINARY(4))"),
    ("c_varbinary10", "VARBINARY(10)", "CAST(s AS VARBINARY(10))"),
    ("c_arr_int", "ARRAY<INT>", "ARRAY[i, CAST(NULL AS INT), t16]"),
    ("c_arr_str", "ARRAY<STRING>", "ARRAY[k1, s]"),
    ("c_map", "MAP<STRING, INT>", "MAP['i', i, 'none', CAST(NULL AS INT)]"),
    ("c_row", "ROW<a INT, b STRING>", "CAST(ROW(i, s) AS ROW<a INT, b STRING>)"),
    ("c_row_arr", "ROW<n INT, tags ARRAY<STRING>>", "CAST(ROW(t16, ARRAY[s, k1]) AS ROW<n INT, tags ARRAY<STRING>>)"),
]


def view_sql():
    cols = []
    for pos, (name, sql_type, expr) in enumerate(COLUMNS):
        cols.append(
            f"CASE WHEN SUBSTRING(nm, {pos + 1}, 1) = '1' THEN CAST(NULL AS {sql_type}) ELSE {expr} END AS {name}"
        )
    return "CREATE TEMPORARY VIEW a AS SELECT k1, k2, id,\n  " + ",\n  ".join(cols) + "\nFROM a_src"


def main():
    p = _common.arg_parser(__doc__)
    p.add_argument("--input-a", required=True)
    p.add_argument("--input-b", required=True)
    p.add_argument("--a-records", type=int, required=True, help="rows of a_src")
    p.add_argument("--b-records", type=int, required=True, help="rows of b_src")
    p.add_argument("--b-keys", type=int, required=True, help="distinct (k1, k2) of b_src")
    args = p.parse_args()

    port = _common.free_port()
    env = StreamExecutionEnvironment.get_execution_environment(_common.make_config(args, port))
    t_env = StreamTableEnvironment.create(env)
    t_env.get_config().set("table.local-time-zone", "UTC")
    for name, cols, path in (("a_src", A_SRC, args.input_a), ("b_src", "k1 STRING, k2 INT, vb STRING", args.input_b)):
        t_env.execute_sql(f"""
            CREATE TABLE {name} ({cols}) WITH (
              'connector' = 'filesystem',
              'path' = 'file://{os.path.abspath(path)}',
              'format' = 'csv',
              'source.monitor-interval' = '1s'
            )""")
    t_env.execute_sql(view_sql())
    t_env.execute_sql("CREATE TEMPORARY VIEW b AS SELECT k1, k2, COLLECT(vb) AS vbs FROM b_src GROUP BY k1, k2")
    sink_cols = ", ".join(f"{n} {t}" for n, t, _ in COLUMNS)
    t_env.execute_sql(f"""
        CREATE TABLE snk (k1 STRING, k2 INT, id BIGINT, {sink_cols}, vbs MULTISET<STRING>)
        WITH ('connector' = 'blackhole')""")
    insert = "INSERT INTO snk SELECT a.*, b.vbs FROM a JOIN b ON a.k1 = b.k1 AND a.k2 = b.k2"
    # The Join receives every a row plus the GroupAggregate's changes: +I for a key's first b
    # row, then -U/+U (or +U alone: the planner decides whether UPDATE_BEFORE is needed; the
    # plan's changelog modes say which) for each later one.
    plan = t_env.explain_sql(insert, ExplainDetail.CHANGELOG_MODE)
    agg = next(ln for ln in plan.splitlines() if "GroupAggregate(" in ln and "changelogMode=" in ln)
    per_update = 2 if "UB" in agg.split("changelogMode=")[-1] else 1
    agg_out = args.b_keys + per_update * (args.b_records - args.b_keys)
    print(f"GroupAggregate: {agg.strip()[:60]}... -> {agg_out} changes", flush=True)
    client = t_env.execute_sql(insert).get_job_client()
    rest = _common.Rest(port, str(client.get_job_id()))
    _common.finish(
        args,
        rest,
        client,
        [
            ("GroupAggregate", "numRecordsIn", args.b_records),
            ("GroupAggregate", "numRecordsOut", agg_out),
            ("Join", "numRecordsIn", args.a_records + agg_out),
        ],
    )


if __name__ == "__main__":
    main()
