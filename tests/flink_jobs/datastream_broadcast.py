"""PyFlink DataStream broadcast state fed by FileSources (non-keyed / operator state).

Two continuously monitored FileSources of text lines: `main` ("key,value") and `rules`
("rule,value"). The rules stream is broadcast with MapStateDescriptor("rules", STRING, LONG);
the BroadcastProcessFunction (uid "bcast-fn", name "Broadcast Fn") puts every rule into the
broadcast state (a later line for the same rule overwrites it) and reads it for main records.

Operator state in the savepoint: the broadcast state `rules` of every subtask, and the FLIP-27
FileSource state: `SourceReaderState` per reader subtask and the enumerator (coordinator) state
with the paths it has already processed.
"""

from pyflink.common import Duration, Types, WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.file_system import FileSource, StreamFormat
from pyflink.datastream.functions import BroadcastProcessFunction
from pyflink.datastream.state import MapStateDescriptor

import _common

RULES = MapStateDescriptor("rules", Types.STRING(), Types.LONG())


class ApplyRules(BroadcastProcessFunction):
    def process_element(self, value, ctx):
        key, v = value.split(",")
        factor = ctx.get_broadcast_state(RULES).get(key)
        yield f"{key},{int(v) * (factor or 1)}"

    def process_broadcast_element(self, value, ctx):
        rule, v = value.split(",")
        ctx.get_broadcast_state(RULES).put(rule, int(v))


def lines(env, path, uid):
    src = (
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), path)
        .monitor_continuously(Duration.of_seconds(1))
        .build()
    )
    return env.from_source(src, WatermarkStrategy.no_watermarks(), uid).uid(uid)


def main():
    p = _common.arg_parser(__doc__)
    p.add_argument("--main", required=True, help="directory of main lines")
    p.add_argument("--rules", required=True, help="directory of rule lines")
    p.add_argument(
        "--records",
        type=int,
        required=True,
        help="records the broadcast operator receives in total (main lines plus rule lines times parallelism)",
    )
    p.add_argument("--mode", choices=["process", "thread"], default="process")
    args = p.parse_args()
    args.conf.append(f"python.execution-mode={args.mode}")

    port = _common.free_port()
    env = StreamExecutionEnvironment.get_execution_environment(_common.make_config(args, port))
    rules = lines(env, args.rules, "rules-src").broadcast(RULES)
    (
        lines(env, args.main, "main-src")
        .connect(rules)
        .process(ApplyRules(), output_type=Types.STRING())
        .uid("bcast-fn")
        .name("Broadcast Fn")
    )
    client = env.execute_async("datastream_broadcast")
    rest = _common.Rest(port, str(client.get_job_id()))
    _common.finish(args, rest, client, [("Broadcast Fn", "numRecordsIn", args.records)])


if __name__ == "__main__":
    main()
