"""PyFlink DataStream job whose keyed state changes from one input phase to the next.

Input: text lines "key,value,tag,op" (continuously monitored FileSource over --input, recursive,
so each phase's directory appears under it as a whole). Operator uid "keyed-fn", name
"My Keyed Fn", keyed by the String key, thread mode. Per record (k, v, tag, op):

    add    count    ValueState<LONG>          += 1
           items    ListState<STRING>         append "<tag>:<v>" (a RocksDB merge operand)
           per_tag  MapState<STRING, LONG>    per_tag[tag] += v
           max_v    ReducingState<LONG>       max(v)
           last_tag ValueState<STRING>        tag, with a StateTtlConfig (10 years, processing
                                              time: nothing expires; the value carries the TTL
                                              timestamp in the state's bytes)
           on the key's first add (count empty): an event-time timer at timer_ts(k) (no
           watermarks, never fires)
    clear  clears every state of the key and deletes its timer
    drop   per_tag.remove(tag)

The job then follows the successive protocol of _common.successive: after each phase a
retained incremental RocksDB checkpoint and a canonical savepoint, the job keeps running.
"""

from pyflink.common import Duration, Types, WatermarkStrategy
from pyflink.common.time import Time
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.file_system import FileSource, StreamFormat
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)

import _common

EVENT_BASE = 1_700_000_000_000
TTL_DAYS = 3650


def timer_ts(key):
    # derived from the key, so `clear` can delete the timer without keeping its timestamp
    return EVENT_BASE + int(key.split("_")[1]) * 1000


class Successive(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.items = ctx.get_list_state(ListStateDescriptor("items", Types.STRING()))
        self.per_tag = ctx.get_map_state(MapStateDescriptor("per_tag", Types.STRING(), Types.LONG()))
        self.max_v = ctx.get_reducing_state(ReducingStateDescriptor("max_v", lambda a, b: max(a, b), Types.LONG()))
        last_tag = ValueStateDescriptor("last_tag", Types.STRING())
        last_tag.enable_time_to_live(
            StateTtlConfig.new_builder(Time.days(TTL_DAYS))
            .set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)
            .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)
            .build()
        )
        self.last_tag = ctx.get_state(last_tag)

    def process_element(self, value, ctx):
        k, v, tag, op = value
        if op == "add":
            n = self.count.value()
            if n is None:
                ctx.timer_service().register_event_time_timer(timer_ts(k))
            self.count.update((n or 0) + 1)
            self.items.add(f"{tag}:{v}")
            self.per_tag.put(tag, (self.per_tag.get(tag) or 0) + v)
            self.max_v.add(v)
            self.last_tag.update(tag)
        elif op == "clear":
            for s in (self.count, self.items, self.per_tag, self.max_v, self.last_tag):
                s.clear()
            ctx.timer_service().delete_event_time_timer(timer_ts(k))
        elif op == "drop":
            self.per_tag.remove(tag)
        else:
            raise ValueError(f"unknown op {op!r} in {value!r}")
        yield k


def parse(line):
    k, v, tag, op = line.split(",")
    return k, int(v), tag, op


def main():
    p = _common.arg_parser(__doc__)
    p.add_argument(
        "--input", required=True, help="monitored directory; each --phase directory is moved into it in turn"
    )
    args = p.parse_args()
    if args.snapshot != "successive" or not args.phase:
        p.error("this job runs the successive protocol: --snapshot successive --phase ...")
    args.conf.append("python.execution-mode=thread")
    # Timers registered (and deleted) by Python code reach the Java timer service after a
    # bundle finishes; one-record bundles apply them before the next input or barrier.
    args.conf.append("python.fn-execution.bundle.size=1")

    port = _common.free_port()
    env = StreamExecutionEnvironment.get_execution_environment(_common.make_config(args, port))
    source = (
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), args.input)
        .monitor_continuously(Duration.of_seconds(1))
        .build()
    )
    (
        env.from_source(source, WatermarkStrategy.no_watermarks(), "lines")
        .uid("lines")
        .map(parse, output_type=Types.TUPLE([Types.STRING(), Types.LONG(), Types.STRING(), Types.STRING()]))
        .uid("parse")
        .name("parse")
        .key_by(lambda r: r[0], key_type=Types.STRING())
        .process(Successive(), output_type=Types.STRING())
        .uid("keyed-fn")
        .name("My Keyed Fn")
    )
    client = env.execute_async("datastream_successive")
    rest = _common.Rest(port, str(client.get_job_id()))
    # the counts come from each --phase (cumulative records)
    _common.finish(args, rest, client, [("My Keyed Fn", "numRecordsIn", None)])


if __name__ == "__main__":
    main()
