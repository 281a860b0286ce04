"""Flink SQL word count with a sum: GROUP BY word over a continuously monitored CSV directory.

State: one GroupAggregate operator, keyed by `word`, ValueState `accState` (RowData of the
accumulators). The source keeps running (directory monitoring), so the job can be stopped with
a savepoint once the aggregate has received every input row.

--output FILE: the sink is the `print` connector instead of `blackhole` (same plan shape: one
sink chained to the aggregate, no state, so the operator ids and a savepoint's mapping do not
change), printing the aggregate's changelog: `out:<subtask>> +I[word, cnt, total]`, and
`-U[...]`/`+U[...]` pairs (the print sink asks for UPDATE_BEFORE, blackhole does not).
"""

import os

from pyflink.datastream import StreamExecutionEnvironment
from pyflink.table import StreamTableEnvironment

import _common


def main():
    p = _common.arg_parser(__doc__)
    p.add_argument("--input", required=True, help="directory with word,amount CSV files")
    p.add_argument("--records", type=int, required=True, help="number of input rows")
    args = p.parse_args()

    port = _common.free_port()
    env = StreamExecutionEnvironment.get_execution_environment(_common.make_config(args, port))
    t_env = StreamTableEnvironment.create(env)
    t_env.execute_sql(f"""
        CREATE TABLE src (word STRING, amount BIGINT) WITH (
          'connector' = 'filesystem',
          'path' = 'file://{os.path.abspath(args.input)}',
          'format' = 'csv',
          -- continuous monitoring keeps the source (and the job) RUNNING after the input
          'source.monitor-interval' = '1s'
        )""")
    sink = "'connector' = 'print', 'print-identifier' = 'out'" if args.output else "'connector' = 'blackhole'"
    t_env.execute_sql(f"""
        CREATE TABLE snk (word STRING, cnt BIGINT, total BIGINT)
        WITH ({sink})""")
    result = t_env.execute_sql(
        "INSERT INTO snk SELECT word, COUNT(*) AS cnt, SUM(amount) AS total FROM src GROUP BY word"
    )
    client = result.get_job_client()
    rest = _common.Rest(port, str(client.get_job_id()))
    _common.finish(args, rest, client, [("GroupAggregate", "numRecordsIn", args.records)])


if __name__ == "__main__":
    main()
