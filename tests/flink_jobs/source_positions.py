"""PyFlink job whose savepoint lands while its FLIP-27 sources are half-way through their input.

Two pipelines, parallelism 1, python.execution-mode=thread:

  FileSource (text lines of --input, monitored continuously) -> throttle -> keyBy(const)
      -> "File Count": ValueState count (LONG) and last (STRING, the last line seen)
  NumberSequenceSource(0, --numbers - 1) -> throttle -> keyBy(const)
      -> "Number Count": ValueState count (LONG) and max (LONG)

The throttle (a thread-mode map chained to the source, so it blocks the source's own thread)
keeps each source reading slowly; the job is stopped with a canonical savepoint once both
counters passed --min-records. The keyed counts in the savepoint are, by the barrier's
consistency, the records each source had emitted when its reader position was snapshotted.

Restoring (tests/fixtures/restore.py, kind SourcePositionsOutput): `--restore DIR --output FILE`
(tests/flink_jobs/_common.py). With --output each counter emits, per record, one JSON line of what
it sees after its update, printed by a print sink `out` chained to it:
  {"source": "file", "line": <the line>, "count": <count>}
  {"source": "number", "number": <n>, "count": <count>, "max": <max>}
The print sinks are new stateless operators; every stateful one keeps its uid. A restored job
waits, through REST, until
- the number pipeline has FINISHED: the restored split is read to its end (the range is bounded)
  and every record went through Number Count and its print sink (one task). Not its numRecordsIn:
  a finished task's metrics are unregistered, the REST metric store may keep a value from before
  its last records;
- File Count received exactly --records lines (numRecordsIn, counted from zero after a restore;
  the FileSource is unbounded, it keeps monitoring --input),
then stops with a canonical savepoint (_common.finish): the stop's barrier follows every counted
line through the print sink. The restored FileSource reader reopens its split, and the enumerator
hands out its pending splits, by the absolute paths the savepoint holds: those files must exist
for the run. Without --restore / --output the job is unchanged.
"""

import json
import os
import time

from pyflink.common import Duration, Types, WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.file_system import FileSource, StreamFormat
from pyflink.datastream.connectors.number_seq import NumberSequenceSource
from pyflink.datastream.functions import KeyedProcessFunction, MapFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor

import _common


class Throttle(MapFunction):
    def __init__(self, seconds):
        self.seconds = seconds

    def map(self, value):
        time.sleep(self.seconds)  # a rate limit, not a synchronisation
        return value


class CountLines(KeyedProcessFunction):
    def __init__(self, emit_states=False):
        self.emit_states = emit_states

    def open(self, ctx: RuntimeContext):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.last = ctx.get_state(ValueStateDescriptor("last", Types.STRING()))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        self.last.update(value)
        if self.emit_states:
            yield json.dumps({"source": "file", "line": value, "count": self.count.value()}, sort_keys=True)
        else:
            yield value


class CountNumbers(KeyedProcessFunction):
    def __init__(self, emit_states=False):
        self.emit_states = emit_states

    def open(self, ctx: RuntimeContext):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.max = ctx.get_state(ValueStateDescriptor("max", Types.LONG()))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        self.max.update(max(self.max.value() if self.max.value() is not None else -1, value))
        if self.emit_states:
            yield json.dumps(
                {"source": "number", "number": value, "count": self.count.value(), "max": self.max.value()},
                sort_keys=True,
            )
        else:
            yield value


def main():
    p = _common.arg_parser(__doc__)
    p.add_argument("--input", required=True, help="directory of text files")
    p.add_argument("--numbers", type=int, required=True)
    p.add_argument("--throttle-ms", type=float, default=3.0)
    p.add_argument("--min-records", type=int, default=800)
    p.add_argument("--records", type=int, help="with --restore: the lines File Count must receive")
    args = p.parse_args()
    if args.restore and args.records is None:
        p.error("--restore needs --records")
    args.parallelism = 1
    args.conf += [
        "python.execution-mode=thread",
        # small network buffers: few records wait between the source and the counters
        "taskmanager.memory.segment-size=4kb",
        "taskmanager.network.memory.buffers-per-channel=1",
        "taskmanager.network.memory.floating-buffers-per-gate=1",
    ]
    port = _common.free_port()
    env = StreamExecutionEnvironment.get_execution_environment(_common.make_config(args, port))
    pause = args.throttle_ms / 1000.0

    files = (
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), args.input)
        .monitor_continuously(Duration.of_seconds(1))
        .build()
    )
    emit = bool(args.output)
    file_count = (
        env.from_source(files, WatermarkStrategy.no_watermarks(), "lines")
        .uid("file-src")
        .map(Throttle(pause), output_type=Types.STRING())
        .uid("file-throttle")
        .key_by(lambda line: "all", key_type=Types.STRING())
        .process(CountLines(emit_states=emit), output_type=Types.STRING())
        .uid("file-count")
        .name("File Count")
    )

    numbers = NumberSequenceSource(0, args.numbers - 1)
    number_count = (
        env.from_source(numbers, WatermarkStrategy.no_watermarks(), "numbers")
        .uid("number-src")
        .map(Throttle(pause), output_type=Types.LONG())
        .uid("number-throttle")
        .key_by(lambda n: "all", key_type=Types.STRING())
        .process(CountNumbers(emit_states=emit), output_type=Types.STRING() if emit else Types.LONG())
        .uid("number-count")
        .name("Number Count")
    )
    if emit:
        file_count.print("out")
        number_count.print("out")

    client = env.execute_async("source_positions")
    rest = _common.Rest(port, str(client.get_job_id()))
    if args.restore:
        _common.wait_for_restore(rest, args.restore, args.timeout)

        def numbers_finished():
            job = rest.job()
            if job["state"] in ("FAILED", "CANCELED", "FINISHED"):
                raise RuntimeError(f"job is {job['state']} before the savepoint{_common.root_exception(rest)}")
            [vertex] = [v for v in job["vertices"] if "Number Count" in v["name"]]
            return vertex["status"] == "FINISHED" or vertex["status"]

        _common.wait_until(numbers_finished, args.timeout, "the number pipeline to finish its split")
        return _common.finish(args, rest, client, [("File Count", "numRecordsIn", args.records)])

    def far_enough():
        if rest.job()["state"] in ("FAILED", "CANCELED", "FINISHED"):
            raise RuntimeError("job ended before the savepoint")
        seen = []
        for name in ("File Count", "Number Count"):
            m = rest.vertex_metric(rest.vertex_id(name), "numRecordsIn")
            if m is None or m["sum"] < args.min_records:
                return seen + [(name, m)]
        return True

    _common.wait_until(far_enough, args.timeout, f"both counters to pass {args.min_records} records")
    path = _common.stop_with_savepoint(client, "file://" + os.path.join(os.path.abspath(args.work), "savepoints"))
    if path.startswith("file:"):
        path = path[len("file:") :]
    with open(args.result, "w") as f:
        json.dump({"savepoint": path, "job_id": str(client.get_job_id())}, f)


if __name__ == "__main__":
    main()
