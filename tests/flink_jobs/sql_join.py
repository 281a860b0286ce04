"""Flink SQL regular inner join of two continuously monitored CSV directories.

    SELECT a.k, a.id, a.va, b.id, b.vb FROM a JOIN b ON a.k = b.k

`a` has no unique key, `b` declares PRIMARY KEY (id) NOT ENFORCED, so the Join operator keeps
two different state layouts (see tests/fixtures/README.md): `left-records` MapState<row, count>
and `right-records` MapState<unique key row, row>.

--output FILE: the sink is the `print` connector instead of `blackhole` (one stateless sink
chained to the Join as before: same operator ids), printing the join's rows:
`out:<subtask>> +I[k, a_id, va, b_id, vb]` (both inputs are insert-only, and so is the join).
"""

import os

from pyflink.datastream import StreamExecutionEnvironment
from pyflink.table import StreamTableEnvironment

import _common


def main():
    p = _common.arg_parser(__doc__)
    p.add_argument("--input-a", required=True)
    p.add_argument("--input-b", required=True)
    p.add_argument("--records", type=int, required=True, help="rows of a plus rows of b")
    args = p.parse_args()

    port = _common.free_port()
    env = StreamExecutionEnvironment.get_execution_environment(_common.make_config(args, port))
    t_env = StreamTableEnvironment.create(env)
    for name, cols, path in (
        ("a", "k STRING, id BIGINT, va BIGINT", args.input_a),
        ("b", "k STRING, id BIGINT, vb STRING, PRIMARY KEY (id) NOT ENFORCED", args.input_b),
    ):
        t_env.execute_sql(f"""
            CREATE TABLE {name} ({cols}) WITH (
              'connector' = 'filesystem',
              'path' = 'file://{os.path.abspath(path)}',
              'format' = 'csv',
              'source.monitor-interval' = '1s'
            )""")
    sink = "'connector' = 'print', 'print-identifier' = 'out'" if args.output else "'connector' = 'blackhole'"
    t_env.execute_sql(f"""
        CREATE TABLE snk (k STRING, a_id BIGINT, va BIGINT, b_id BIGINT, vb STRING)
        WITH ({sink})""")
    result = t_env.execute_sql("INSERT INTO snk SELECT a.k, a.id, a.va, b.id, b.vb FROM a JOIN b ON a.k = b.k")
    client = result.get_job_client()
    rest = _common.Rest(port, str(client.get_job_id()))
    _common.finish(args, rest, client, [("Join", "numRecordsIn", args.records)])


if __name__ == "__main__":
    main()
