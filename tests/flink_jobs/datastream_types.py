"""PyFlink DataStream (thread mode): a keyed ValueState per type PyFlink stores; INT and LONG keys.

Input: tab-separated lines (continuously monitored FileSource)

    k  b  i8  i16  i32  i64  f32  f64  ch  s  dec  name  score  mk  ms

(`score`, `ms` empty = None). Operator uid "types-fn", name "Types Fn", keyed by `k` as
Types.INT(); per record it overwrites one ValueState per declared type with a value built from
the record, appends Row(name, score) to the ListState `named_rows` and puts Row(i32, ms) under
`mk` in the MapState `rows_by_long`. Operator uid "long-keyed-fn", name "Long Keyed Fn", keyed by
`i64` as Types.LONG(): ValueState<LONG> `count`.

Types PyFlink refuses in thread mode are left out (tests/fixtures/README.md lists them with the
exception each raised): BIG_INT, SQL_DATE, SQL_TIME, SQL_TIMESTAMP, INSTANT, LOCAL_DATE,
LOCAL_TIME, LOCAL_DATE_TIME, PRIMITIVE_ARRAY(*), BASIC_ARRAY(*), OBJECT_ARRAY of a basic type and
LIST(*) as a ValueState type.
"""

from decimal import Decimal

from pyflink.common import Duration, Row, Types, WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.file_system import FileSource, StreamFormat
from pyflink.datastream.functions import KeyedProcessFunction, RuntimeContext
from pyflink.datastream.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

import _common


def parse(line):
    (k, b, i8, i16, i32, i64, f32, f64, ch, s, dec, name, score, mk, ms) = line.split("\t")
    return {
        "k": int(k),
        "b": b == "1",
        "i8": int(i8),
        "i16": int(i16),
        "i32": int(i32),
        "i64": int(i64),
        "f32": float(f32),
        "f64": float(f64),
        "ch": ch,
        "s": s,
        "dec": Decimal(dec),
        "name": name,
        "score": float(score) if score else None,
        "mk": int(mk),
        "ms": ms or None,
    }


# (state name, declared type, value of a parsed record r). Every Row / tuple / map built here is
# also built, from the same input, by tests/fixtures/datastream_kinds.py (DataStreamTypes).
VALUE_STATES = [
    ("v_boolean", Types.BOOLEAN(), lambda r: r["b"]),
    ("v_byte", Types.BYTE(), lambda r: r["i8"]),
    ("v_short", Types.SHORT(), lambda r: r["i16"]),
    ("v_int", Types.INT(), lambda r: r["i32"]),
    ("v_long", Types.LONG(), lambda r: r["i64"]),
    ("v_float", Types.FLOAT(), lambda r: r["f32"]),
    ("v_double", Types.DOUBLE(), lambda r: r["f64"]),
    ("v_char", Types.CHAR(), lambda r: r["ch"]),
    ("v_string", Types.STRING(), lambda r: r["s"]),
    ("v_big_dec", Types.BIG_DEC(), lambda r: r["dec"]),
    ("v_tuple", Types.TUPLE([Types.INT(), Types.STRING()]), lambda r: (r["i32"], r["ms"])),
    ("v_row", Types.ROW([Types.INT(), Types.STRING()]), lambda r: Row(r["i16"], r["ms"])),
    (
        "v_row_named",
        Types.ROW_NAMED(["name", "score"], [Types.STRING(), Types.DOUBLE()]),
        lambda r: Row(name=r["name"], score=r["score"]),
    ),
    ("v_map", Types.MAP(Types.STRING(), Types.INT()), lambda r: {"i8": r["i8"], "i16": r["i16"] if r["b"] else None}),
    (
        "v_object_array",
        Types.OBJECT_ARRAY(Types.ROW([Types.INT(), Types.STRING()])),
        lambda r: (Row(r["i8"], r["name"]), None, Row(r["i32"], r["ms"])),
    ),
]


class TypedStates(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext):
        self.values = [(ctx.get_state(ValueStateDescriptor(name, t)), fn) for name, t, fn in VALUE_STATES]
        self.named_rows = ctx.get_list_state(
            ListStateDescriptor("named_rows", Types.ROW_NAMED(["name", "score"], [Types.STRING(), Types.DOUBLE()]))
        )
        self.rows_by_long = ctx.get_map_state(
            MapStateDescriptor("rows_by_long", Types.LONG(), Types.ROW([Types.INT(), Types.STRING()]))
        )

    def process_element(self, line, ctx):
        r = parse(line)
        for st, fn in self.values:
            st.update(fn(r))
        self.named_rows.add(Row(name=r["name"], score=r["score"]))
        self.rows_by_long.put(r["mk"], Row(r["i32"], r["ms"]))
        yield r["k"]


class Count(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, line, ctx):
        self.count.update((self.count.value() or 0) + 1)
        yield ctx.get_current_key()


def main():
    p = _common.arg_parser(__doc__)
    p.add_argument("--input", required=True, help="directory with the tab-separated lines")
    p.add_argument("--records", type=int, required=True)
    p.add_argument("--mode", choices=["process", "thread"], default="thread")
    args = p.parse_args()
    args.conf.append(f"python.execution-mode={args.mode}")
    args.conf.append("python.fn-execution.bundle.size=1")  # as datastream_keyed.py

    port = _common.free_port()
    env = StreamExecutionEnvironment.get_execution_environment(_common.make_config(args, port))
    source = (
        FileSource.for_record_stream_format(StreamFormat.text_line_format(), args.input)
        .monitor_continuously(Duration.of_seconds(1))
        .build()
    )
    lines = env.from_source(source, WatermarkStrategy.no_watermarks(), "lines").uid("lines")
    (
        lines.key_by(lambda line: int(line.split("\t")[0]), key_type=Types.INT())
        .process(TypedStates(), output_type=Types.INT())
        .uid("types-fn")
        .name("Types Fn")
    )
    (
        lines.key_by(lambda line: int(line.split("\t")[5]), key_type=Types.LONG())
        .process(Count(), output_type=Types.LONG())
        .uid("long-keyed-fn")
        .name("Long Keyed Fn")
    )
    client = env.execute_async("datastream_types")
    rest = _common.Rest(port, str(client.get_job_id()))
    _common.finish(
        args,
        rest,
        client,
        [("Types Fn", "numRecordsIn", args.records), ("Long Keyed Fn", "numRecordsIn", args.records)],
    )


if __name__ == "__main__":
    main()
