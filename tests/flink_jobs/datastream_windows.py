"""PyFlink DataStream windows (thread mode), stopped while windows are still open.

Input: one file of "k,v,ts" lines sorted by ts (epoch ms). Everything before the windows runs
with parallelism 1 (the environment's default; only the window operators get --parallelism):
assign_timestamps_and_watermarks adds internal operators (Extract-Timestamp, the Java watermark
generator) that take the default parallelism, and with 2 of them each would see every other
record and the downstream watermark would lag one record. So the window operators see one
ordered input and one watermark: max ts - delay - 1 (for_bounded_out_of_orderness).
Three window operators, keyed by k as Types.INT():

    uid "tumble-agg"    name "Tumble Agg"    TumblingEventTimeWindows(size) .aggregate(sum of v,
                                              accumulator Types.LONG())
    uid "count-agg"     name "Count Agg"     .count_window(count_size) .aggregate(sum of v,
                                              accumulator Types.LONG())   (PyFlink: CountWindow)
                                              only with --count-window: in thread mode PyFlink's
                                              count_window cannot be snapshotted (its
                                              "tumble-count-assigner" ValueState is created with
                                              VoidNamespace under the CountWindow namespace
                                              serializer: ClassCastException at the savepoint)
    uid "global-reduce" name "Global Reduce" GlobalWindows + PurgingTrigger(CountTrigger(n))
                                              .reduce((k, sum v, max ts)) on TUPLE<INT, LONG, LONG>

The job waits until every window operator received all records and "Tumble Agg" saw the final
watermark, so exactly the event-time windows with max timestamp > watermark are still open.
"""

from pyflink.common import Duration, Time, Types, WatermarkStrategy
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.file_system import FileSource, StreamFormat
from pyflink.datastream.functions import AggregateFunction
from pyflink.datastream.window import CountTrigger, GlobalWindows, PurgingTrigger, TumblingEventTimeWindows

import _common

EVENT = Types.TUPLE([Types.INT(), Types.LONG(), Types.LONG()])


class SumV(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, value, accumulator):
        return accumulator + value[1]

    def get_result(self, accumulator):
        return accumulator

    def merge(self, a, b):
        return a + b


class EventTs(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[2]


def parse(line):
    k, v, ts = line.split(",")
    return int(k), int(v), int(ts)


def main():
    p = _common.arg_parser(__doc__)
    p.add_argument("--input", required=True, help="directory with k,v,ts lines (ts sorted)")
    p.add_argument("--records", type=int, required=True)
    p.add_argument("--window-s", type=int, required=True)
    p.add_argument("--delay-s", type=int, required=True)
    p.add_argument("--count-size", type=int, required=True)
    p.add_argument("--global-count", type=int, required=True)
    p.add_argument("--final-watermark", type=int, required=True)
    p.add_argument("--mode", choices=["process", "thread"], default="thread")
    p.add_argument(
        "--count-window", action="store_true", help="add the count_window operator (its savepoint fails in thread mode)"
    )
    args = p.parse_args()
    args.conf.append(f"python.execution-mode={args.mode}")
    # as datastream_keyed.py: each record's timers reach the Java timer service before the next
    args.conf.append("python.fn-execution.bundle.size=1")

    port = _common.free_port()
    env = StreamExecutionEnvironment.get_execution_environment(_common.make_config(args, port))
    env.set_parallelism(1)
    source = (
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), args.input)
        .monitor_continuously(Duration.of_seconds(1))
        .build()
    )
    wm = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_seconds(args.delay_s)).with_timestamp_assigner(
        EventTs()
    )
    events = (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "lines")
        .uid("lines")
        .map(parse, output_type=EVENT)
        .uid("parse")
        .name("parse")
        .assign_timestamps_and_watermarks(wm)
        .uid("timestamps")
        .name("timestamps")
    )
    (
        events.key_by(lambda e: e[0], key_type=Types.INT())
        .window(TumblingEventTimeWindows.of(Time.seconds(args.window_s)))
        .aggregate(SumV(), accumulator_type=Types.LONG(), output_type=Types.LONG())
        .uid("tumble-agg")
        .name("Tumble Agg")
        .set_parallelism(args.parallelism)
    )
    if args.count_window:
        (
            events.key_by(lambda e: e[0], key_type=Types.INT())
            .count_window(args.count_size)
            .aggregate(SumV(), accumulator_type=Types.LONG(), output_type=Types.LONG())
            .uid("count-agg")
            .name("Count Agg")
            .set_parallelism(args.parallelism)
        )
    (
        events.key_by(lambda e: e[0], key_type=Types.INT())
        .window(GlobalWindows.create())
        .trigger(PurgingTrigger.of(CountTrigger.of(args.global_count)))
        .reduce(lambda a, b: (a[0], a[1] + b[1], max(a[2], b[2])), output_type=EVENT)
        .uid("global-reduce")
        .name("Global Reduce")
        .set_parallelism(args.parallelism)
    )
    client = env.execute_async("datastream_windows")
    rest = _common.Rest(port, str(client.get_job_id()))
    _common.finish(
        args,
        rest,
        client,
        [
            ("Tumble Agg", "numRecordsIn", args.records),
            *([("Count Agg", "numRecordsIn", args.records)] if args.count_window else []),
            ("Global Reduce", "numRecordsIn", args.records),
            ("Tumble Agg", "currentInputWatermark", args.final_watermark),
        ],
    )


if __name__ == "__main__":
    main()
