/*
 * The Java type matrix (issue 26): one keyed state per kind of Java value a DataStream job keeps,
 * written by Flink 1.20 and 2.x. Compiled by tests/fixtures/runtime.py with javac against the jars
 * PyFlink bundles and run with java -cp <classes>:<pyflink/lib>/* JavaTypeMatrix.
 *
 *   java ... JavaTypeMatrix --input DIR --records N --work DIR --result FILE
 *        [--backend hashmap|rocksdb] [--parallelism 2] [--max-parallelism 128] [--timeout S]
 *        [--conf KEY=VALUE]... [--restore DIR] [--output FILE] [--shape-subclasses true|false]
 *
 * Row state: RowSerializer's snapshot keeps no field names (ROW_NAMED or not), so a savepoint
 * shows the row's fields as f0..f3.
 *
 * Input: lines "key,n,x,s" (n the record's index, x an integer in [-500, 500), s a name, possibly
 * empty) in a continuously monitored directory (FileSource, uid "lines"), keyed by the String key;
 * the KeyedProcessFunction (uid "matrix-fn", name "Matrix Fn") updates every state per record
 * from (n, x, s) and c, the key's record count including this one. What each state holds, and
 * its expected content, is in tests/fixtures/java_kinds.py (JavaTypeMatrix), which mirrors
 * processElement in Python.
 *
 * Serialization config goes through `pipeline.serialization-config` (the one route both 1.20 and
 * 2.x have: 2.x dropped ExecutionConfig.registerKryoType and friends): Shape's subclasses are
 * registered POJO types, Stamp a registered Kryo type, Coded a Kryo type with its own serializer.
 *
 * Same protocol as DataStreamPojo.java / tests/flink_jobs/_common.py: REST-metric wait until the
 * keyed vertex's numRecordsIn equals --records, then stopWithSavepoint(false, dir, CANONICAL),
 * {"savepoint": path, "job_id": id} to --result. --output FILE (tests/fixtures/restore.py):
 * System.out goes to FILE and the function emits, per record, one JSON line printed by
 * print("out"): the record (key, n, x, s), the count and the Kryo value as the function read them
 * before its update ("count_before", "kryo_value_before": the Rec's serialized fields, null when
 * none), and the Kryo list and map after it ("kryo_list", "kryo_map"), each Rec as Rec.json()
 * gives it (by value: `fixed` and `alias` print alike whether or not they are one object).
 */

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.net.ConnectException;
import java.net.HttpURLConnection;
import java.net.ServerSocket;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;

import com.esotericsoftware.kryo.Kryo;
import com.esotericsoftware.kryo.Serializer;
import com.esotericsoftware.kryo.io.Input;
import com.esotericsoftware.kryo.io.Output;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.StateTtlConfig;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple0;
import org.apache.flink.api.java.tuple.Tuple5;
import org.apache.flink.api.java.tuple.Tuple25;
import org.apache.flink.api.common.typeinfo.BasicTypeInfo;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.java.typeutils.EitherTypeInfo;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.PipelineOptions;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.connector.file.src.reader.TextLineInputFormat;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.runtime.util.EnvironmentInformation;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.types.Either;
import org.apache.flink.types.Row;
import org.apache.flink.util.Collector;

public class JavaTypeMatrix {
    static final ObjectMapper JSON = new ObjectMapper();

    public enum Color { RED, GREEN, BLUE }

    /** Every primitive and its box (PojoSerializer: fields in name order, a null flag each). */
    public static class Prims {
        public int i;
        public long l;
        public short sh;
        public byte b;
        public char ch;
        public boolean bo;
        public float f;
        public double d;
        public Integer boxI;
        public Long boxL;
        public Short boxSh;
        public Byte boxB;
        public Character boxCh;
        public Boolean boxBo;
        public Float boxF;
        public Double boxD;

        public Prims() {}
    }

    /** java.time, java.sql and java.util.Date fields. */
    public static class Times {
        public LocalDate date;
        public LocalTime time;
        public LocalDateTime dateTime;
        public Instant instant;
        public java.sql.Date sqlDate;
        public java.sql.Time sqlTime;
        public java.sql.Timestamp sqlTimestamp;
        public java.util.Date utilDate;

        public Times() {}
    }

    /** Primitive and object arrays as POJO fields. */
    public static class ArrayFields {
        public int[] ints;
        public long[] longs;
        public double[] doubles;
        public byte[] bytes;
        public boolean[] booleans;
        public char[] chars;
        public String[] strings;
        public Integer[] boxes;

        public ArrayFields() {}
    }

    /** A POJO base class whose state holds subclass instances (Circle, Square: registered). */
    public static class Shape {
        public String name;
        public int id;

        public Shape() {}
    }

    public static class Circle extends Shape {
        public double radius;

        public Circle() {}
    }

    public static class Square extends Shape {
        public int side;

        public Square() {}
    }

    /** List and Map fields (typed explicitly: ListSerializer / MapSerializer, not Kryo). */
    public static class Bag {
        public List<String> tags;
        public Map<String, Integer> counts;
        public String note;
        public Integer maybe;
        public Color color;

        public Bag() {}
    }

    // ------------------------------------------------------------------ reached only through Kryo

    /** Final: Kryo's FieldSerializer writes it without a class tag where the field type is it. */
    public static final class Point {
        final int x;
        final int y;

        Point(int x, int y) {
            this.x = x;
            this.y = y;
        }

        Map<String, Object> json() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("x", x);
            m.put("y", y);
            return m;
        }
    }

    public static class Base {
        final String base;

        Base(String base) {
            this.base = base;
        }
    }

    /** Not final and with a superclass field: Kryo writes its class, then Base's field too. */
    public static class Labelled extends Base {
        final int weight;

        Labelled(String base, int weight) {
            super(base);
            this.weight = weight;
        }
    }

    /** Registered with Kryo (pipeline.serialization-config type kryo): a registration id. */
    public static class Stamp {
        final long at;
        final String by;

        Stamp(long at, String by) {
            this.at = at;
            this.by = by;
        }
    }

    /**
     * A value class, not a POJO (final fields, no no-arg constructor): GenericTypeInfo, Kryo's
     * FieldSerializer. `fixed` and `alias` are one object (a Kryo back-reference); `scratch`
     * (transient) and INSTANCES (static) are not serialized.
     */
    public static final class Rec {
        static int INSTANCES = 0;
        final int i;
        final long l;
        final short sh;
        final byte b;
        final char ch;
        final boolean bo;
        final float f;
        final double d;
        final Integer boxed;
        final String ascii;
        final String one;
        final String uni;
        final String none;
        final Color color;
        final Point fixed;
        final Point alias;
        final Labelled child;
        final ArrayList<String> list;
        final HashMap<String, Integer> map;
        final int[] ints;
        final String[] strs;
        final Stamp stamp;
        transient int scratch;

        Rec(long n, int x, String s, int c, List<String> names, Map<String, Integer> counts) {
            INSTANCES++;
            i = x;
            l = x * 3_000_000_007L;
            sh = (short) (x * 61);
            b = (byte) (x * 3);
            ch = (char) ('A' + Math.floorMod(x, 26));
            bo = Math.floorMod(x, 2) == 1;
            f = x * 0.5f;
            d = x / 7.0;
            boxed = Math.floorMod(x, 3) == 0 ? null : x * 2;
            ascii = "rec-" + c;
            one = s.isEmpty() ? "-" : s.substring(0, 1);
            uni = "zoë/" + s;
            none = Math.floorMod(x, 4) == 0 ? null : s;
            color = Color.values()[Math.floorMod(x, 3)];
            fixed = new Point(x, c);
            alias = fixed;
            child = Math.floorMod(x, 5) == 0 ? null : new Labelled("base-" + s, x * 10);
            list = new ArrayList<>(names);
            map = new HashMap<>(counts);
            ints = new int[] {x, c, -x};
            strs = new String[] {s, null, "end"};
            stamp = new Stamp(n, "st" + c);
            scratch = 99;
        }

        /** The serialized fields (superclass fields first), as tests/fixtures/matrix_kinds.py's rec(). */
        Map<String, Object> json() {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("i", i);
            m.put("l", l);
            m.put("sh", sh);
            m.put("b", b);
            m.put("ch", String.valueOf(ch));
            m.put("bo", bo);
            m.put("f", f);
            m.put("d", d);
            m.put("boxed", boxed);
            m.put("ascii", ascii);
            m.put("one", one);
            m.put("uni", uni);
            m.put("none", none);
            m.put("color", color == null ? null : color.name());
            m.put("fixed", fixed == null ? null : fixed.json());
            m.put("alias", alias == null ? null : alias.json());
            Map<String, Object> kid = null;
            if (child != null) {
                kid = new LinkedHashMap<>();
                kid.put("base", child.base);
                kid.put("weight", child.weight);
            }
            m.put("child", kid);
            m.put("list", list);
            m.put("map", map);
            m.put("ints", ints);
            m.put("strs", strs);
            Map<String, Object> st = null;
            if (stamp != null) {
                st = new LinkedHashMap<>();
                st.put("at", stamp.at);
                st.put("by", stamp.by);
            }
            m.put("stamp", st);
            return m;
        }
    }

    /** A Kryo type registered WITH its own serializer: its bytes are the serializer's. */
    public static final class Coded {
        final int code;
        final String label;

        Coded(int code, String label) {
            this.code = code;
            this.label = label;
        }
    }

    /**
     * Writes the code as a big-endian int and the label. read's raw Class parameter overrides both
     * Kryo 2.24's read(Kryo, Input, Class<T>) and Kryo 5's read(Kryo, Input, Class<? extends T>).
     */
    public static class CodedSerializer extends Serializer<Coded> implements java.io.Serializable {
        public CodedSerializer() {}

        @Override
        public void write(Kryo kryo, Output out, Coded v) {
            out.writeInt(v.code);
            out.writeString(v.label);
        }

        @Override
        @SuppressWarnings({"rawtypes", "unchecked"})
        public Coded read(Kryo kryo, Input in, Class type) {
            return new Coded(in.readInt(), in.readString());
        }
    }

    // ------------------------------------------------------------------ the function

    static final long TTL_DAYS = 3650;

    @SuppressWarnings({"unchecked", "rawtypes"})
    static final TypeInformation<Tuple25<Integer, Integer, Integer, Integer, Integer, Integer,
            Integer, Integer, Integer, Integer, Integer, Integer, Integer, Integer, Integer,
            Integer, Integer, Integer, Integer, Integer, Integer, Integer, Integer, Integer,
            String>> TUPLE25 = (TypeInformation) Types.TUPLE(
                    Types.INT, Types.INT, Types.INT, Types.INT, Types.INT, Types.INT, Types.INT,
                    Types.INT, Types.INT, Types.INT, Types.INT, Types.INT, Types.INT, Types.INT,
                    Types.INT, Types.INT, Types.INT, Types.INT, Types.INT, Types.INT, Types.INT,
                    Types.INT, Types.INT, Types.INT, Types.STRING);

    public static class MatrixFn extends KeyedProcessFunction<String, String, String> {
        // --shape-subclasses true: `shape` holds Circle / Square instances (PojoSerializer writes
        // them tagged, flag 0x08), else only Shape's own (the subclasses are registered either way)
        private final boolean shapeSubclasses;
        private final boolean emitStates;
        private transient ValueState<Integer> count;
        private transient ValueState<Prims> prims;
        private transient ValueState<String> text;
        private transient ListState<String> texts;
        private transient ValueState<BigDecimal> bigDec;
        private transient ValueState<BigInteger> bigInt;
        private transient ValueState<Times> times;
        private transient ValueState<Instant> instant;
        private transient ValueState<ArrayFields> arrays;
        private transient ValueState<int[]> ints;
        private transient ValueState<byte[]> bytes;
        private transient ValueState<String[]> strings;
        private transient ValueState<Integer[]> boxes;
        private transient ValueState<Tuple0> tuple0;
        private transient ValueState<Tuple5<String, Integer, Long, Double, Boolean>> tuple5;
        private transient ValueState<Tuple25<Integer, Integer, Integer, Integer, Integer, Integer,
                Integer, Integer, Integer, Integer, Integer, Integer, Integer, Integer, Integer,
                Integer, Integer, Integer, Integer, Integer, Integer, Integer, Integer, Integer,
                String>> tuple25;
        private transient ValueState<Row> row;
        private transient ValueState<Shape> shape;
        private transient ValueState<Color> color;
        private transient ValueState<Either<String, Long>> either;
        private transient ValueState<Bag> bag;
        private transient ValueState<Optional<String>> optional;
        private transient ValueState<Rec> kryoValue;
        private transient ListState<Rec> kryoList;
        private transient MapState<String, Rec> kryoMap;
        private transient ValueState<Coded> custom;
        private transient ValueState<Long> ttlCount;
        // the key's names so far and their counts (plain state: the Kryo values copy them)
        private transient ListState<String> names;
        private transient MapState<String, Integer> nameCounts;

        public MatrixFn(boolean shapeSubclasses, boolean emitStates) {
            this.shapeSubclasses = shapeSubclasses;
            this.emitStates = emitStates;
        }

        private <T> ValueState<T> value(String name, TypeInformation<T> type) {
            return getRuntimeContext().getState(new ValueStateDescriptor<>(name, type));
        }

        @Override
        public void open(OpenContext ctx) {
            count = value("count", Types.INT);
            prims = value("prims", Types.POJO(Prims.class));
            text = value("text", Types.STRING);
            texts = getRuntimeContext().getListState(new ListStateDescriptor<>("texts", Types.STRING));
            bigDec = value("big_dec", Types.BIG_DEC);
            bigInt = value("big_int", Types.BIG_INT);
            // typed explicitly: the reflective analysis gives java.time fields of a POJO Kryo
            Map<String, TypeInformation<?>> timeFields = new LinkedHashMap<>();
            timeFields.put("date", Types.LOCAL_DATE);
            timeFields.put("time", Types.LOCAL_TIME);
            timeFields.put("dateTime", Types.LOCAL_DATE_TIME);
            timeFields.put("instant", Types.INSTANT);
            timeFields.put("sqlDate", Types.SQL_DATE);
            timeFields.put("sqlTime", Types.SQL_TIME);
            timeFields.put("sqlTimestamp", Types.SQL_TIMESTAMP);
            timeFields.put("utilDate", BasicTypeInfo.DATE_TYPE_INFO);
            times = value("times", Types.POJO(Times.class, timeFields));
            instant = value("instant", Types.INSTANT);
            arrays = value("arrays", Types.POJO(ArrayFields.class));
            ints = value("ints", PrimitiveArrayTypeInfo.INT_PRIMITIVE_ARRAY_TYPE_INFO);
            bytes = value("bytes", PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO);
            strings = value("strings", Types.OBJECT_ARRAY(Types.STRING));
            boxes = value("boxes", Types.OBJECT_ARRAY(Types.INT));
            tuple0 = value("tuple0", Types.TUPLE());
            tuple5 = value("tuple5", Types.TUPLE(Types.STRING, Types.INT, Types.LONG, Types.DOUBLE,
                    Types.BOOLEAN));
            tuple25 = value("tuple25", TUPLE25);
            row = value("row", Types.ROW_NAMED(new String[] {"id", "label", "score", "flag"},
                    Types.INT, Types.STRING, Types.DOUBLE, Types.BOOLEAN));
            shape = value("shape", Types.POJO(Shape.class));
            color = value("color", Types.ENUM(Color.class));
            either = value("either", new EitherTypeInfo<>(Types.STRING, Types.LONG));
            Map<String, TypeInformation<?>> bagFields = new LinkedHashMap<>();
            bagFields.put("tags", Types.LIST(Types.STRING));
            bagFields.put("counts", Types.MAP(Types.STRING, Types.INT));
            bagFields.put("note", Types.STRING);
            bagFields.put("maybe", Types.INT);
            bagFields.put("color", Types.ENUM(Color.class));
            bag = value("bag", Types.POJO(Bag.class, bagFields));
            @SuppressWarnings({"unchecked", "rawtypes"})
            TypeInformation<Optional<String>> opt = (TypeInformation) Types.GENERIC(Optional.class);
            optional = value("optional", opt);
            TypeInformation<Rec> rec = Types.GENERIC(Rec.class);
            kryoValue = value("kryo_value", rec);
            kryoList = getRuntimeContext().getListState(new ListStateDescriptor<>("kryo_list", rec));
            kryoMap = getRuntimeContext().getMapState(
                    new MapStateDescriptor<>("kryo_map", Types.STRING, rec));
            custom = value("custom", Types.GENERIC(Coded.class));
            ValueStateDescriptor<Long> ttl = new ValueStateDescriptor<>("ttl_count", Types.LONG);
            ttl.enableTimeToLive(StateTtlConfig.newBuilder(Duration.ofDays(TTL_DAYS)).build());
            ttlCount = getRuntimeContext().getState(ttl);
            names = getRuntimeContext().getListState(new ListStateDescriptor<>("names", Types.STRING));
            nameCounts = getRuntimeContext().getMapState(
                    new MapStateDescriptor<>("name_counts", Types.STRING, Types.INT));
        }

        @Override
        public void processElement(String line, Context ctx, Collector<String> out)
                throws Exception {
            String[] f = line.split(",", -1);
            long n = Long.parseLong(f[1]);
            int x = Integer.parseInt(f[2]);
            String s = f[3];
            Integer old = count.value();
            int c = old == null ? 1 : old + 1;
            count.update(c);
            boolean nul = Math.floorMod(x, 3) == 0; // when the boxes and nullable fields are null

            Prims p = new Prims();
            p.i = x;
            p.l = x * 1_000_000_007L;
            p.sh = (short) (x * 37);
            p.b = (byte) (x * 5);
            p.ch = (char) ('a' + Math.floorMod(x, 26));
            p.bo = Math.floorMod(x, 2) == 0;
            p.f = x * 0.25f;
            p.d = x / 3.0;
            if (!nul) {
                p.boxI = c;
                p.boxL = n * -7L;
                p.boxSh = (short) -c;
                p.boxB = (byte) c;
                p.boxCh = s.isEmpty() ? '-' : s.charAt(0);
                p.boxBo = c % 2 == 0;
                p.boxF = c * 1.5f;
                p.boxD = c / 4.0;
            }
            prims.update(p);

            text.update(s);
            texts.add(s);
            bigDec.update(new BigDecimal("123456789012345678901234567890.123456789")
                    .add(BigDecimal.valueOf(x, 3)));
            bigInt.update(BigInteger.valueOf(x).multiply(BigInteger.TEN.pow(25))
                    .add(BigInteger.valueOf(c)));

            Times t = new Times();
            t.date = LocalDate.ofEpochDay(19_000 + x);
            t.time = LocalTime.ofNanoOfDay(((x + 500) * 86L) * 1_000_000_000L + c * 1_000_000L
                    + 123_000L);
            t.dateTime = LocalDateTime.of(t.date, t.time);
            t.instant = Instant.ofEpochSecond(1_700_000_000L + x * 3_600L, c * 1_000L);
            t.sqlDate = new java.sql.Date((19_000L + x) * 86_400_000L);
            t.sqlTime = new java.sql.Time(((x + 500) * 61L) * 1000L + c);
            java.sql.Timestamp ts = new java.sql.Timestamp((1_600_000_000L + x * 60L) * 1000L);
            ts.setNanos(c * 1_000_000 + 456_000);
            t.sqlTimestamp = ts;
            t.utilDate = nul ? null : new java.util.Date(1_650_000_000_000L + n);
            times.update(t);
            instant.update(Instant.ofEpochMilli(1_700_000_000_000L + n * 1_001L));

            ArrayFields a = new ArrayFields();
            a.ints = new int[] {x, c};
            a.longs = new long[] {n, x * 10_000_000_000L};
            a.doubles = new double[] {x / 2.0, -0.0, c};
            a.bytes = s.getBytes(StandardCharsets.UTF_8);
            a.booleans = new boolean[] {nul, !nul};
            a.chars = s.toCharArray();
            a.strings = new String[] {s, nul ? null : "x" + x};
            a.boxes = new Integer[] {c, nul ? null : x};
            arrays.update(a);
            int[] is = new int[c];
            for (int k = 0; k < c; k++) {
                is[k] = x + k;
            }
            ints.update(is);
            bytes.update(new byte[] {(byte) x, (byte) c, (byte) n});
            strings.update(new String[] {s, nul ? null : "zoë", ""});
            boxes.update(new Integer[] {x, nul ? null : c});

            tuple0.update(new Tuple0());
            tuple5.update(Tuple5.of(s, x, n, x / 8.0, c % 2 == 1));
            Tuple25<Integer, Integer, Integer, Integer, Integer, Integer, Integer, Integer,
                    Integer, Integer, Integer, Integer, Integer, Integer, Integer, Integer, Integer,
                    Integer, Integer, Integer, Integer, Integer, Integer, Integer, String> t25 =
                    new Tuple25<>();
            for (int k = 0; k < 24; k++) {
                t25.setField(x * k + c, k);
            }
            t25.setField(s, 24);
            tuple25.update(t25);
            row.update(Row.of(c, s.isEmpty() ? null : s, x / 16.0, nul ? null : x > 0));

            Shape sh;
            switch (shapeSubclasses ? Math.floorMod(x, 3) : 0) {
                case 1:
                    Circle ci = new Circle();
                    ci.radius = x / 2.0;
                    sh = ci;
                    break;
                case 2:
                    Square sq = new Square();
                    sq.side = c;
                    sh = sq;
                    break;
                default:
                    sh = new Shape();
            }
            sh.name = s.isEmpty() ? null : s;
            sh.id = x;
            shape.update(sh);
            color.update(Color.values()[Math.floorMod(x + c, 3)]);
            either.update(Math.floorMod(x, 2) == 0 ? Either.Left(s) : Either.Right(x * 1_000L));

            names.add(s);
            Integer nc = nameCounts.get(s);
            nameCounts.put(s, nc == null ? 1 : nc + 1);
            List<String> allNames = new ArrayList<>();
            for (String v : names.get()) {
                allNames.add(v);
            }
            Map<String, Integer> counts = new HashMap<>();
            for (Map.Entry<String, Integer> e : nameCounts.entries()) {
                counts.put(e.getKey(), e.getValue());
            }
            Bag g = new Bag();
            g.tags = allNames;
            g.counts = counts;
            g.note = s.isEmpty() ? null : "note " + s;
            g.maybe = nul ? null : x;
            g.color = nul ? null : Color.values()[Math.floorMod(c, 3)];
            bag.update(g);
            optional.update(s.isEmpty() ? Optional.empty() : Optional.of(s));

            Rec r = new Rec(n, x, s, c, allNames, counts);
            Rec before = emitStates ? kryoValue.value() : null;
            kryoValue.update(r);
            kryoList.add(r);
            kryoMap.put(s, r);
            custom.update(new Coded(0x5E000000 + (int) n, "coded-" + s));
            Long tc = ttlCount.value();
            ttlCount.update(tc == null ? 1L : tc + 1);
            if (!emitStates) {
                return;
            }
            Map<String, Object> o = new LinkedHashMap<>();
            o.put("key", ctx.getCurrentKey());
            o.put("n", n);
            o.put("x", x);
            o.put("s", s);
            o.put("count_before", old);
            o.put("kryo_value_before", before == null ? null : before.json());
            List<Object> list = new ArrayList<>();
            for (Rec e : kryoList.get()) {
                list.add(e.json());
            }
            o.put("kryo_list", list);
            Map<String, Object> map = new LinkedHashMap<>();
            for (Map.Entry<String, Rec> e : kryoMap.entries()) {
                map.put(e.getKey(), e.getValue().json());
            }
            o.put("kryo_map", map);
            out.collect(JSON.writeValueAsString(o));
        }
    }

    // ------------------------------------------------------------------ main

    public static void main(String[] argv) throws Exception {
        try {
            run(argv);
        } catch (Throwable t) {
            t.printStackTrace();
            System.err.flush();
            System.exit(1);
        }
        // The local environment's MiniCluster threads are not all daemons.
        System.exit(0);
    }

    static void run(String[] argv) throws Exception {
        Map<String, String> a = new LinkedHashMap<>();
        a.put("backend", "hashmap");
        a.put("parallelism", "2");
        a.put("max-parallelism", "128");
        a.put("timeout", "600");
        a.put("shape-subclasses", "false");
        List<String> extraConf = new ArrayList<>();
        for (int i = 0; i < argv.length; i += 2) {
            if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("bad argument " + argv[i]);
            }
            String k = argv[i].substring(2);
            if (k.equals("conf")) {
                extraConf.add(argv[i + 1]);
            } else {
                a.put(k, argv[i + 1]);
            }
        }
        for (String k : new String[] {"input", "records", "work", "result"}) {
            if (!a.containsKey(k)) {
                throw new IllegalArgumentException("--" + k + " is required");
            }
        }
        long records = Long.parseLong(a.get("records"));
        long timeoutMs = (long) (Double.parseDouble(a.get("timeout")) * 1000);
        Path work = Paths.get(a.get("work")).toAbsolutePath();
        Path io = work.resolve("io"); // RocksDB native libs extract here
        Files.createDirectories(io);
        int port = freePort();
        boolean v1 = EnvironmentInformation.getVersion().startsWith("1.");

        Map<String, String> conf = new LinkedHashMap<>();
        String checkpoints = work.resolve("checkpoints").toUri().toString();
        String savepoints = work.resolve("savepoints").toUri().toString();
        conf.put("state.backend.type", a.get("backend"));
        conf.put("execution.checkpointing.dir", checkpoints);
        conf.put("execution.checkpointing.savepoint-dir", savepoints);
        if (v1) {
            conf.put("state.backend", a.get("backend"));
            conf.put("state.checkpoints.dir", checkpoints);
            conf.put("state.savepoints.dir", savepoints);
        }
        conf.put("rest.bind-address", "127.0.0.1");
        conf.put("rest.address", "127.0.0.1");
        conf.put("rest.bind-port", String.valueOf(port));
        conf.put("rest.port", String.valueOf(port));
        // the metric fetcher caches for 10 s by default; its values are our sync condition
        conf.put("metrics.fetcher.update-interval", "200");
        conf.put("parallelism.default", a.get("parallelism"));
        conf.put("pipeline.max-parallelism", a.get("max-parallelism"));
        conf.put("io.tmp.dirs", io.toString());
        String restore = a.get("restore");
        if (restore != null) {
            conf.put("execution.state-recovery.path",
                    Paths.get(restore).toAbsolutePath().toUri().toString());
            conf.put("execution.state-recovery.ignore-unclaimed-state", "false");
            conf.put("execution.savepoint.ignore-unclaimed-state", "false");
            conf.put("execution.state-recovery.claim-mode", "NO_CLAIM");
        }
        for (String kv : extraConf) {
            int eq = kv.indexOf('=');
            conf.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        String output = a.get("output");
        if (output != null) {
            // the MiniCluster's tasks run in this JVM: the print sink writes here, whole lines
            System.setOut(new PrintStream(new FileOutputStream(output, true), true, "UTF-8"));
        }
        Configuration config = Configuration.fromMap(conf);
        // One entry per class: "<class>: {type: pojo|kryo[, kryo-type: registered, class: ...]}".
        config.set(PipelineOptions.SERIALIZATION_CONFIG, List.of(
                Circle.class.getName() + ": {type: pojo}",
                Square.class.getName() + ": {type: pojo}",
                Stamp.class.getName() + ": {type: kryo}",
                Coded.class.getName() + ": {type: kryo, kryo-type: registered, class: "
                        + CodedSerializer.class.getName() + "}"));

        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(config);
        FileSource<String> source = FileSource.forRecordStreamFormat(
                        new TextLineInputFormat(),
                        new org.apache.flink.core.fs.Path(
                                Paths.get(a.get("input")).toAbsolutePath().toUri()))
                .monitorContinuously(Duration.ofSeconds(1))
                .build();
        SingleOutputStreamOperator<String> keyed = env
                .fromSource(source, WatermarkStrategy.noWatermarks(), "lines")
                .uid("lines")
                .keyBy(line -> line.substring(0, line.indexOf(',')), Types.STRING)
                .process(new MatrixFn(Boolean.parseBoolean(a.get("shape-subclasses")), output != null),
                        Types.STRING)
                .uid("matrix-fn")
                .name("Matrix Fn");
        if (output != null) {
            keyed.print("out");
        }
        JobClient client = env.executeAsync("java_type_matrix");
        String jobId = client.getJobID().toString();
        try {
            if (restore != null) {
                waitForRestore(port, jobId, Paths.get(restore), timeoutMs);
            }
            waitForRecords(port, jobId, "Matrix Fn", records, timeoutMs);
        } catch (Exception e) {
            // a failed job takes its REST endpoint with it: its result carries Flink's exception
            Exception failure = null;
            try {
                client.getJobExecutionResult().get(10, TimeUnit.SECONDS);
            } catch (Exception cause) {
                failure = cause;
            }
            if (failure == null) {
                throw e;
            }
            IllegalStateException failed = new IllegalStateException(e.getMessage(), failure);
            failed.addSuppressed(e);
            throw failed;
        }
        String path = client.stopWithSavepoint(false, savepoints, SavepointFormatType.CANONICAL)
                .get(300, TimeUnit.SECONDS);
        if (path.startsWith("file:")) {
            path = Paths.get(java.net.URI.create(path)).toString();
        }
        Map<String, String> result = new LinkedHashMap<>();
        result.put("savepoint", path);
        result.put("job_id", jobId);
        Files.write(Paths.get(a.get("result")), JSON.writeValueAsBytes(result));
    }

    /** A free port below the kernel's ephemeral range (_common.free_port): a just-released
     * ephemeral port could be handed to any socket before Flink binds it. */
    static int freePort() throws IOException {
        int low = 32768;
        try {
            low = Integer.parseInt(Files.readString(Paths.get("/proc/sys/net/ipv4/ip_local_port_range"))
                    .trim().split("\\s+")[0]);
        } catch (IOException | NumberFormatException e) {
            // keep the usual default
        }
        java.util.Random random = new java.security.SecureRandom();
        int span = Math.max(low - 20000, 1);
        for (int i = 0; i < 50; i++) {
            int port = 20000 + random.nextInt(span);
            try (ServerSocket s = new ServerSocket(port, 1, java.net.InetAddress.getLoopbackAddress())) {
                return s.getLocalPort();
            } catch (IOException e) {
                // taken: try another
            }
        }
        throw new IOException("no free port below the ephemeral range for Flink's REST endpoint");
    }

    static JsonNode get(int port, String path) throws IOException {
        HttpURLConnection c =
                (HttpURLConnection) new URL("http://127.0.0.1:" + port + path).openConnection();
        c.setConnectTimeout(10_000);
        c.setReadTimeout(10_000);
        try (InputStream in = c.getInputStream()) {
            return JSON.readTree(new String(in.readAllBytes(), StandardCharsets.UTF_8));
        } finally {
            c.disconnect();
        }
    }

    /** ': <Flink's root exception of the job>', or ''. */
    static String rootException(int port, String jobId) {
        try {
            JsonNode root = get(port, "/jobs/" + jobId + "/exceptions").path("root-exception");
            return root.isMissingNode() || root.isNull() ? "" : ": " + root.asText();
        } catch (IOException e) {
            return "";
        }
    }

    static String jobState(int port, String jobId, String what) throws IOException {
        String state = get(port, "/jobs/" + jobId).get("state").asText();
        if (state.equals("FAILED") || state.equals("CANCELED") || state.equals("FINISHED")) {
            throw new IllegalStateException("job is " + state + " " + what
                    + rootException(port, jobId));
        }
        return state;
    }

    /** Waits until the job runs and checks that it restored from `dir` (_common.wait_for_restore). */
    static void waitForRestore(int port, String jobId, Path dir, long timeoutMs) throws Exception {
        String want = dir.toRealPath().toString();
        long deadline = System.currentTimeMillis() + timeoutMs;
        boolean reached = false;
        String last = "nothing yet";
        while (System.currentTimeMillis() < deadline) {
            try {
                String state = jobState(port, jobId, "instead of restored from " + dir);
                reached = true;
                last = state;
                if (state.equals("RUNNING")) {
                    JsonNode restored = get(port, "/jobs/" + jobId + "/checkpoints")
                            .path("latest").path("restored");
                    if (restored.isMissingNode() || restored.isNull()) {
                        throw new IllegalStateException("job runs but did not restore from " + dir
                                + ": no restored checkpoint in its statistics");
                    }
                    String got = restored.path("external_path").asText("");
                    if (got.startsWith("file:")) {
                        got = got.substring("file:".length());
                    }
                    String real = Paths.get(got).toRealPath().toString();
                    if (!real.equals(want)) {
                        throw new IllegalStateException("job restored from " + got + ", not from "
                                + dir);
                    }
                    return;
                }
            } catch (ConnectException e) {
                if (reached) {
                    throw new IllegalStateException("REST endpoint went away", e);
                }
                last = e.toString();
            } catch (IOException e) {
                last = e.toString();
            }
            Thread.sleep(200);
        }
        throw new IllegalStateException("timed out waiting for the job to run restored from "
                + dir + "; last: " + last);
    }

    /** Polls until vertex `name`'s numRecordsIn summed over subtasks equals `want`. */
    static void waitForRecords(int port, String jobId, String name, long want, long timeoutMs)
            throws Exception {
        long deadline = System.currentTimeMillis() + timeoutMs;
        boolean reached = false;
        String last = "nothing yet";
        while (System.currentTimeMillis() < deadline) {
            try {
                JsonNode job = get(port, "/jobs/" + jobId);
                reached = true;
                jobState(port, jobId, "before the savepoint");
                String vid = null;
                List<String> names = new ArrayList<>();
                for (JsonNode v : job.get("vertices")) {
                    names.add(v.get("name").asText());
                    if (v.get("name").asText().contains(name)) {
                        vid = v.get("id").asText();
                    }
                }
                if (vid == null) {
                    throw new IllegalStateException("no job vertex named like " + name + ": "
                            + names);
                }
                JsonNode rows = get(port, "/jobs/" + jobId + "/vertices/" + vid
                        + "/subtasks/metrics?get=numRecordsIn&agg=sum");
                if (rows.size() > 0) {
                    long sum = (long) Double.parseDouble(rows.get(0).get("sum").asText());
                    last = name + ".numRecordsIn = " + sum;
                    if (sum > want) {
                        throw new IllegalStateException(last + " > expected " + want);
                    }
                    if (sum == want) {
                        return;
                    }
                }
            } catch (ConnectException e) {
                // not up yet is fine; gone after having answered means the cluster shut down
                if (reached) {
                    throw new IllegalStateException("REST endpoint went away", e);
                }
                last = e.toString();
            } catch (IOException e) {
                last = e.toString(); // slow answer or not served yet: poll again
            }
            Thread.sleep(200);
        }
        throw new IllegalStateException("timed out waiting for all input to reach " + name
                + "; last: " + last);
    }
}
