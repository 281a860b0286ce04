"""Flink SQL event-time TUMBLE window TVF aggregate, stopped while windows are still open.

    SELECT k, window_start, window_end, COUNT(*) AS cnt, SUM(v) AS total
    FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(ts), INTERVAL '<size>' SECOND))
    GROUP BY k, window_start, window_end

State of the WindowAggregate operator: keyed `window-aggs` (namespace = window end, epoch ms),
event timers at window end - 1 and the union list state `watermark`. The job waits until the
operator has received every row AND the final watermark (max ts - delay), so exactly the windows
ending after that watermark are open: deterministic state.

--output FILE: the sink is the `print` connector instead of `blackhole` (one stateless sink
chained to the WindowAggregate as before, so the operator ids and a savepoint's mapping do not
change), printing each fired window: `out:<subtask>> +I[k, window_start, window_end, cnt, total]`.
A restored job (tests/fixtures/restore.py) fires the windows the savepoint left open once its new
input's watermark passes their end - 1: their rows are the stored accumulators plus the new rows.
"""

import os

from pyflink.datastream import StreamExecutionEnvironment
from pyflink.table import StreamTableEnvironment

import _common


def main():
    p = _common.arg_parser(__doc__)
    p.add_argument("--input", required=True, help="directory with k,v,ts CSV files (ts sorted)")
    p.add_argument("--records", type=int, required=True)
    p.add_argument("--window-s", type=int, required=True)
    p.add_argument("--delay-s", type=int, required=True, help="watermark = ts - delay")
    p.add_argument(
        "--final-watermark",
        type=int,
        required=True,
        help="epoch ms the operator's input watermark must reach before the savepoint",
    )
    args = p.parse_args()

    port = _common.free_port()
    env = StreamExecutionEnvironment.get_execution_environment(_common.make_config(args, port))
    t_env = StreamTableEnvironment.create(env)
    cfg = t_env.get_config()
    # One WindowAggregate operator (no local/global split) keeps the state in one place.
    cfg.set("table.optimizer.agg-phase-strategy", "ONE_PHASE")
    # The input is one file, read by one source subtask; the other one must not hold back the
    # watermark forever.
    cfg.set("table.exec.source.idle-timeout", "500 ms")
    t_env.execute_sql(f"""
        CREATE TABLE src (
          k STRING, v BIGINT, ts TIMESTAMP(3),
          WATERMARK FOR ts AS ts - INTERVAL '{args.delay_s}' SECOND(3)
        ) WITH (
          'connector' = 'filesystem',
          'path' = 'file://{os.path.abspath(args.input)}',
          'format' = 'csv',
          'source.monitor-interval' = '1s'
        )""")
    sink = "'connector' = 'print', 'print-identifier' = 'out'" if args.output else "'connector' = 'blackhole'"
    t_env.execute_sql(f"""
        CREATE TABLE snk (k STRING, ws TIMESTAMP(3), we TIMESTAMP(3), cnt BIGINT, total BIGINT)
        WITH ({sink})""")
    result = t_env.execute_sql(f"""
        INSERT INTO snk
        SELECT k, window_start, window_end, COUNT(*) AS cnt, SUM(v) AS total
        FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(ts), INTERVAL '{args.window_s}' SECOND(3)))
        GROUP BY k, window_start, window_end""")
    client = result.get_job_client()
    rest = _common.Rest(port, str(client.get_job_id()))
    _common.finish(
        args,
        rest,
        client,
        [
            ("WindowAggregate", "numRecordsIn", args.records),
            ("WindowAggregate", "currentInputWatermark", args.final_watermark),
        ],
    )


if __name__ == "__main__":
    main()
