"""PyFlink DataStream KeyedProcessFunction with every keyed state kind and timers.

Input: text lines "key,value,tag" (continuously monitored FileSource, so the job keeps running).
Operator uid "keyed-fn", name "My Keyed Fn", keyed by the String key. Per record (k, v, tag):

    count   ValueState<LONG>               += 1
    items   ListState<STRING>              append "<tag>:<v>"
    per_tag MapState<STRING, LONG>         per_tag[tag] += v
    max_v   ReducingState<LONG>            max(v)
    avg     AggregatingState<(LONG,LONG)>  accumulator (sum, count), result sum / count
    info    ValueState<PICKLED_BYTE_ARRAY> {"first": v0, "last": v, "span": (min, max)}
    timers  on a key's first record: event-time timer at EVENT_BASE + v0 * 1000 (no
            watermarks, never fires); when v0 is even also a processing-time timer at
            PROC_BASE + v0 (year 2100, never fires)

`--mode process|thread` selects python.execution-mode; state names/serializers differ
(see tests/fixtures/README.md).

--output FILE: per record the function emits, after its updates, one JSON line with the record
and every state as the function sees it (`new`: the key had no state before), printed by a print
sink (`out:<subtask>> {...}`); per timer that fires, one JSON line {"key", "timer": its timestamp,
"domain": "event" | "processing"}. Without it the function emits the key, to no sink (unchanged).
--fire-event-timers: the final stop drains (advanceToEndOfEventTime): a MAX_WATERMARK fires every
event-time timer of every key before the savepoint (the job has no watermarks otherwise).
"""

import json

from pyflink.common import Duration, Types, WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment, TimeDomain
from pyflink.datastream.connectors.file_system import FileSource, StreamFormat
from pyflink.datastream.functions import AggregateFunction, KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)

import _common

EVENT_BASE = 1_700_000_000_000
PROC_BASE = 4_102_444_800_000


class Avg(AggregateFunction):
    def create_accumulator(self):
        return 0, 0

    def add(self, value, accumulator):
        return accumulator[0] + value, accumulator[1] + 1

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1] if accumulator[1] else None

    def merge(self, a, b):
        return a[0] + b[0], a[1] + b[1]


class AllStates(KeyedProcessFunction):
    def __init__(self, emit_states=False):
        self.emit_states = emit_states

    def open(self, ctx: RuntimeContext):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.items = ctx.get_list_state(ListStateDescriptor("items", Types.STRING()))
        self.per_tag = ctx.get_map_state(MapStateDescriptor("per_tag", Types.STRING(), Types.LONG()))
        self.max_v = ctx.get_reducing_state(ReducingStateDescriptor("max_v", lambda a, b: max(a, b), Types.LONG()))
        self.avg = ctx.get_aggregating_state(
            AggregatingStateDescriptor("avg", Avg(), Types.TUPLE([Types.LONG(), Types.LONG()]))
        )
        self.info = ctx.get_state(ValueStateDescriptor("info", Types.PICKLED_BYTE_ARRAY()))

    def process_element(self, value, ctx):
        _, v, tag = value
        n = self.count.value()
        self.count.update((n or 0) + 1)
        self.items.add(f"{tag}:{v}")
        self.per_tag.put(tag, (self.per_tag.get(tag) or 0) + v)
        self.max_v.add(v)
        self.avg.add(v)
        info = self.info.value()
        if info is None:
            info = {"first": v, "last": v, "span": (v, v)}
            ctx.timer_service().register_event_time_timer(EVENT_BASE + v * 1000)
            if v % 2 == 0:
                ctx.timer_service().register_processing_time_timer(PROC_BASE + v)
        else:
            lo, hi = info["span"]
            info = {"first": info["first"], "last": v, "span": (min(lo, v), max(hi, v))}
        self.info.update(info)
        if not self.emit_states:
            yield value[0]
            return
        yield json.dumps(
            {
                "key": value[0],
                "v": v,
                "tag": tag,
                "new": n is None,
                "count": self.count.value(),
                "items": list(self.items.get()),
                "per_tag": dict(self.per_tag.items()),
                "max_v": self.max_v.get(),
                "avg": self.avg.get(),
                "info": info,
            },
            sort_keys=True,
        )

    def on_timer(self, timestamp, ctx):
        if self.emit_states:
            domain = "event" if ctx.time_domain() == TimeDomain.EVENT_TIME else "processing"
            yield json.dumps({"key": ctx.get_current_key(), "timer": timestamp, "domain": domain}, sort_keys=True)


def parse(line):
    k, v, tag = line.split(",")
    return k, int(v), tag


def main():
    p = _common.arg_parser(__doc__)
    p.add_argument("--input", required=True, help="directory with key,value,tag lines")
    p.add_argument("--records", type=int, required=True)
    p.add_argument("--mode", choices=["process", "thread"], default="process")
    p.add_argument("--keyed-uid", default="keyed-fn", help="the keyed function's uid (a restore under a new uid)")
    p.add_argument(
        "--fire-event-timers",
        dest="drain",
        action="store_true",
        help="stop with a drain: a MAX_WATERMARK fires every event-time timer before the savepoint",
    )
    args = p.parse_args()
    args.conf.append(f"python.execution-mode={args.mode}")
    # Timers registered by Python code reach the Java timer service as mailbox actions after
    # a bundle finishes; Flink only drains pending ones on watermarks, not before a snapshot.
    # One-record bundles register each record's timers before the next input (or barrier).
    args.conf.append("python.fn-execution.bundle.size=1")

    port = _common.free_port()
    env = StreamExecutionEnvironment.get_execution_environment(_common.make_config(args, port))
    source = (
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), args.input)
        .monitor_continuously(Duration.of_seconds(1))
        .build()
    )
    keyed = (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "lines")
        .uid("lines")
        .map(parse, output_type=Types.TUPLE([Types.STRING(), Types.LONG(), Types.STRING()]))
        .uid("parse")
        .name("parse")
        .key_by(lambda r: r[0], key_type=Types.STRING())
        .process(AllStates(emit_states=bool(args.output)), output_type=Types.STRING())
        .uid(args.keyed_uid)
        .name("My Keyed Fn")
    )
    if args.output:
        keyed.print("out")
    client = env.execute_async("datastream_keyed")
    rest = _common.Rest(port, str(client.get_job_id()))
    _common.finish(args, rest, client, [("My Keyed Fn", "numRecordsIn", args.records)])


if __name__ == "__main__":
    main()
