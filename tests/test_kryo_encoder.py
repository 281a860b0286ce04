"""Kryo values written back (readers/codecs/kryo_encoder.py), held to real Flink bytes.

Ground truth: every Kryo value of the Java type matrix's savepoints (tests/flink_jobs/java/
JavaTypeMatrix.java on Flink 1.20 = Kryo 2.24 and 2.3 = Kryo 5, hashmap and RocksDB), typed from the
job's own classes (runtime.java_job_jar, as tests/test_java_type_matrix.py builds it), read from
the canonical key-groups by framing alone: ``encode(decode(bytes)) == bytes`` for each, including
its Kryo back-references (Rec.fixed and Rec.alias are one Point; Strings the job shares). Edited
values decode back to exactly the edit, through the encoder and through EntryCodec, and wrong
values are refused naming their place. Layouts the job does not write (non-final elements in Kryo
5's one-class form, arrays of objects, BigInteger, BigDecimal, Date, Optional fields, long class
names, 9-byte varlongs) are checked on descriptors built here, by round trip and against bytes
worked out from Kryo's Output and serializers.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest

from statecat.readers import SavepointReader
from statecat.readers.backends.framing import parse_runs
from statecat.readers.codecs.decoders import LIST_ELEMENT_DELIMITER, build_decoder
from statecat.readers.codecs.encoders import build_encoder, encode
from statecat.readers.codecs.kryo import KryoString
from statecat.readers.codecs.values import EncodeError
from statecat.statemeta.errors import UnsupportedError
from statecat.statemeta.files.headers import read_stream_bytes
from statecat.statemeta.java.kryo import KRYO2, KRYO5
from statecat.statemeta.types import TypeDescriptor
from statecat.writers.entry_codec import MAP_VALUE_PRESENT, EntryCodec, StateRow
from tests.fixtures import runtime
from tests.fixtures.expected import load_expected, savepoint_dir

CASES = [f"java_type_matrix_{release}_{backend}" for release in ("1.20", "2.3") for backend in ("hashmap", "rocksdb")]
KRYO_STATES = ("kryo_value", "kryo_list", "kryo_map")  # JavaTypeMatrix$Rec as a value, list elements, map values
OPERATOR = "matrix-fn"
T = TypeDescriptor.of


@pytest.fixture(scope="module")
def jar():
    """The job's jar per case (runtime.java_job_jar: javac against PyFlink's jars)."""
    built: dict[str, str] = {}

    def of(case: str) -> str:
        version = load_expected(case)["flink_version"]
        if not runtime._installed(runtime.venv_dir(version), version):
            pytest.skip(
                f"the job's jar compiles against PyFlink {version}'s jars: no venv at {runtime.venv_dir(version)}"
            )
        if version not in built:
            built[version] = str(runtime.java_job_jar("java_type_matrix", version))
        return built[version]

    return of


def _state(case: str, jar: str, name: str):
    reader = SavepointReader(savepoint_dir(case), classpath=[jar])
    operator, state = reader.meta.find_state(name, OPERATOR)
    return reader.meta, operator, state


def _key_groups(meta, state):
    """(key-group, entries) of every non-empty key-group of ``state``, by framing alone."""
    for loc in state.keyed_locations:
        assert not loc.compressed
        starts = sorted(o for o in loc.offsets if o > 0)
        for i, start in enumerate(loc.offsets):
            if start <= 0:
                continue
            end = next((o for o in starts if o > start), loc.stream.size)
            data, _, _ = read_stream_bytes(meta.storage, loc.stream, start, end - start)
            for state_id, entries in parse_runs(data):
                if state_id == loc.state_id:
                    yield loc.start_key_group + i, entries


def _kryo_part(state) -> TypeDescriptor:
    """The Kryo descriptor of the state's values (a list's elements, a map's values)."""
    value = state.value
    return value.child("element") if value.kind == "list" else value.child("value") if value.kind == "map" else value


def _elements(decode, data: bytes) -> list[tuple[object, bytes]]:
    """The values of one entry's bytes, each with its own bytes: a list's elements (separated by
    0x2C) or the one value."""
    out, pos = [], 0
    while True:
        value, end = decode(data, pos)
        out.append((value, data[pos:end]))
        if end == len(data):
            return out
        assert data[end] == LIST_ELEMENT_DELIMITER
        pos = end + 1


def _stored_values(meta, state) -> list[bytes]:
    """Each Kryo value's stored bytes: a value, each element of a list, each non-null map value."""
    decode = build_decoder(_kryo_part(state))
    out = []
    for _, entries in _key_groups(meta, state):
        for _, data in entries:
            if state.value.kind == "map":
                assert data[:1] == MAP_VALUE_PRESENT  # the job puts no null Rec
                data = data[1:]
            out += [part for _, part in _elements(decode, data)]
    return out


def _encoded(encoder, value) -> bytes:
    out = bytearray()
    encoder(value, out)
    return bytes(out)


# ----------------------------------------------------------------------------- real Flink bytes


@pytest.mark.parametrize("state_name", KRYO_STATES)
@pytest.mark.parametrize("case", CASES)
def test_every_stored_kryo_value_encodes_back_to_its_bytes(case, state_name, jar):
    meta, _, state = _state(case, jar(case), state_name)
    desc = _kryo_part(state)
    assert desc.kind == "kryo" and desc.attr("version") == (KRYO2 if "_1.20_" in case else KRYO5)
    decode, encoder = build_decoder(desc), build_encoder(desc)
    stored = _stored_values(meta, state)
    assert len(stored) >= 19
    for data in stored:
        value, _ = decode(data, 0)
        assert value["alias"] is value["fixed"]  # a back-reference decodes to the object it refers to
        assert _encoded(encoder, value) == data, value


@pytest.mark.parametrize("state_name", KRYO_STATES)
@pytest.mark.parametrize("case", CASES)
def test_the_whole_state_round_trips_through_the_entry_codec(case, state_name, jar):
    meta, operator, state = _state(case, jar(case), state_name)
    codec = EntryCodec(meta, operator, state)
    codec.writable()
    decode = build_decoder(_kryo_part(state))
    rows = 0
    for key_group, entries in _key_groups(meta, state):
        for row in codec.rows(key_group, entries):
            rows += 1
            written = codec.entries(key_group, row)
            assert sorted(k for k, _ in written) == sorted(k for k, _ in row.entries)
            (back,) = codec.rows(key_group, written)
            assert (back.key, back.namespace) == (row.key, row.namespace)
            # A map's entries come back in key order (RocksDB's), the heap backend stored them hashed.
            assert (sorted(back.value) if codec.kind == "map" else back.value) == (
                sorted(row.value) if codec.kind == "map" else row.value
            )
            # Arrow's rows share no objects, so only the decoder's values (which keep Kryo's
            # references) give the stored bytes back: the same row with them is written exactly.
            if codec.kind == "map":
                value = [(k, decode(data, 1)[0]) for (k, _), (_, data) in zip(row.value, row.entries)]
            else:
                ((_, data),) = row.entries
                value = [element for element, _ in _elements(decode, data)]
                value = value if codec.kind == "list" else value[0]
            assert codec.entries(key_group, StateRow(row.key, row.namespace, value)) == sorted(row.entries)
    assert rows == _expected_row_count(case, state_name)


def _expected_row_count(case: str, state_name: str) -> int:
    for op in load_expected(case)["operators"]:
        for state in op.get("states", []):
            if state["name"] == state_name:
                return len(state["rows"])
    raise KeyError(state_name)


@pytest.mark.parametrize("case", CASES)
def test_edited_values_decode_back_to_the_edit(case, jar):
    meta, _, state = _state(case, jar(case), "kryo_value")
    desc = _kryo_part(state)
    decode, encoder = build_decoder(desc), build_encoder(desc)
    for data in _stored_values(meta, state)[:5]:
        rec, _ = decode(data, 0)
        edits = {
            "a changed field": {**rec, "i": rec["i"] + 1, "l": -(1 << 62), "d": -0.0, "bo": not rec["bo"]},
            "changed strings": {
                **rec,
                "ascii": "x" * 40,  # the ASCII form in Kryo 2, a length and the bytes in Kryo 5
                "one": "",
                "uni": "naïve 𝄞 日本 " + "y" * 70,
                "none": "b",
            },
            "a list with an added element": {**rec, "list": [*rec["list"], "added"], "strs": [*rec["strs"], None]},
            "a map entry changed and one added": {
                **rec,
                "map": [(k, v + 1) for k, v in rec["map"]] + [("new", None)],
            },
            "null fields": {**rec, "none": None, "child": None, "boxed": None, "list": None, "map": None, "ints": None},
            "nested objects changed": {
                **rec,
                "fixed": {"x": 1, "y": 2},  # alias keeps the stored Point: two objects now
                "child": {"base": None, "weight": -1},
                "color": "GREEN",
                "stamp": {"at": -1, "by": ""},
            },
        }
        for what, edited in edits.items():
            got, _ = decode(_encoded(encoder, edited), 0)
            assert got == edited, what


@pytest.mark.parametrize("case", [CASES[0], CASES[3]])
def test_an_edited_row_is_written_through_the_entry_codec(case, jar):
    """Rows as an edit has them (Arrow's form, SQL-changed): a Rec value, a list with a new element,
    a map with an entry changed."""
    for name in KRYO_STATES:
        meta, operator, state = _state(case, jar(case), name)
        codec = EntryCodec(meta, operator, state)
        key_group, entries = next(iter(_key_groups(meta, state)))
        row = codec.rows(key_group, entries)[0]
        if codec.kind == "value":
            edited = {**row.value, "ascii": "edited", "fixed": {"x": 7, "y": 8}, "child": None}
        elif codec.kind == "list":
            edited = [*row.value, {**row.value[0], "uni": "added ✓"}]
        else:
            (user_key, rec), *rest = row.value
            edited = [(user_key, {**rec, "map": [("k", 1)], "list": []}), *rest, ("new key", rec)]
        written = codec.entries(key_group, StateRow(row.key, row.namespace, edited))
        (back,) = codec.rows(key_group, written)
        assert back.key == row.key
        assert (sorted(back.value) if codec.kind == "map" else back.value) == (
            sorted(edited) if codec.kind == "map" else edited
        ), name


@pytest.mark.parametrize(
    ("change", "place", "expected"),
    [
        ({"i": "x"}, "value.i", "an INT"),
        ({"b": 200}, "value.b", "within -128..127"),
        ({"ch": "ab"}, "value.ch", "a CHAR"),
        ({"color": "PURPLE"}, "value.color", "RED, GREEN, BLUE"),
        ({"ints": [1, None, 3]}, "value.ints[1]", "an INT"),
        ({"map": [("a", "x")]}, "value.map[0].value", "an INT"),
        ({"map": [("a", 1, 2)]}, "value.map[0]", "a (key, value) pair"),
        ({"list": "abc"}, "value.list", "a LIST"),
        ({"child": {"base": "b", "weight": 1 << 40}}, "value.child.weight", "an INT (32-bit integer) within"),
        ({"child": {"base": "b"}}, "value.child", "missing weight"),
        ({"fixed": "point"}, "value.fixed", "a JavaTypeMatrix$Point object"),
        ({"strs": ["a", 5]}, "value.strs[1]", "a STRING"),
        ({"stamp": {"at": None, "by": "x"}}, "value.stamp.at", "a BIGINT (64-bit integer)"),
    ],
)
def test_wrong_values_are_refused_naming_their_place(change, place, expected, jar):
    case = CASES[3]
    meta, _, state = _state(case, jar(case), "kryo_value")
    desc = _kryo_part(state)
    rec = build_decoder(desc)(_stored_values(meta, state)[0], 0)[0]
    with pytest.raises(EncodeError, match=f"expected .*{re.escape(expected)}.* for {re.escape(place)}, got"):
        encode(desc, {**rec, **change})


@pytest.mark.parametrize("case", CASES)
def test_states_without_an_encodable_class_stay_refused_with_the_reason(case, jar):
    meta, operator, state = _state(case, jar(case), "optional")  # Optional<String>: Optional's value is an Object
    with pytest.raises(UnsupportedError, match="known only at run time .*JSON text.*copied unchanged"):
        EntryCodec(meta, operator, state).writable()
    meta, operator, state = _state(case, jar(case), "custom")
    with pytest.raises(UnsupportedError, match="custom Kryo serializer JavaTypeMatrix\\$CodedSerializer"):
        EntryCodec(meta, operator, state).writable()
    without_jar = SavepointReader(savepoint_dir(case)).meta
    operator, state = without_jar.find_state("kryo_value", OPERATOR)
    with pytest.raises(UnsupportedError, match="pass the job's jar with --classpath"):
        EntryCodec(without_jar, operator, state).writable()


# ----------------------------------------------------------------------------- layouts the job does not write

STRING = T("string", java="java.lang.String")
INTEGER = T("int", java="java.lang.Integer")
LONG = T("long", java="long")
LONG_BOXED = T("long", java="java.lang.Long")


def _pojo(name, fields, *, final=True):
    return T("pojo", fields, java=name, final=final, **{"class": name})


def _list(java, element):
    return T("list", [("element", element)], java=java)


def _kryo(version, value, registrations=()):
    return T("kryo", [("value", value)], version=version, registrations=registrations, custom=(), classpath=())


POINT = _pojo("x.Point", [("x", T("int", java="int")), ("y", T("int", java="int"))])
LABEL = _pojo("x.Label", [("text", STRING)], final=False)  # not final: written with its class
COLOR = T("enum", java="x.Color", constants=("RED", "GREEN"), final=True, **{"class": "x.Color"})
ANY = T("kryo_any", java="java.lang.Object")
HOLDER = _pojo(
    "x.Holder",
    [
        ("labels", _list("java.util.List", LABEL)),  # an interface: written as ArrayList
        ("nested", _list("java.util.ArrayList", _list("java.util.List", STRING))),
        ("boxes", _list("[Ljava.lang.Integer;", INTEGER)),
        ("label_array", _list("[Lx.Label;", LABEL)),
        ("longs", _list("[J", LONG)),
        ("big", T("bigint", java="java.math.BigInteger")),
        ("dec", T("bigdec", java="java.math.BigDecimal")),
        ("when", T("date", java="java.util.Date")),
        ("maybe", T("nullable", [("value", STRING)], java="java.util.Optional")),
        ("colors", _list("java.util.ArrayList", COLOR)),
        ("payload", ANY),
        ("counts", T("map", [("key", STRING), ("value", LONG_BOXED)], java="java.util.Map")),
    ],
)
FULL = {
    "labels": [{"text": "a"}, None, {"text": "b"}],
    "nested": [["x", "y"], [], None],
    "boxes": [1, None, -3],
    "label_array": [{"text": "c"}, None],
    "longs": [-(1 << 63), (1 << 63) - 1, 0, -1],
    "big": "-123456789012345678901234567890",
    "dec": "-0.00100",
    "when": -86_400_000_000 * 365,  # before 1970: a varlong of 9 bytes
    "maybe": "present",
    "colors": ["RED", "RED", "GREEN"],
    "payload": None,
    "counts": [("a", 1), ("b", None)],
}
EMPTY = {
    "labels": [],
    "nested": [[]],
    "boxes": [],
    "label_array": [],
    "longs": [],
    "big": "0",
    "dec": "0",
    "when": 0,
    "maybe": None,  # Optional.empty()
    "colors": [],
    "payload": None,
    "counts": [],
}
NULLS = {**EMPTY, **dict.fromkeys(["labels", "nested", "boxes", "label_array", "longs", "big", "dec", "when"])}
NULLS |= {"labels": [None, None], "colors": None, "counts": None}


@pytest.mark.parametrize("version", [KRYO2, KRYO5])
@pytest.mark.parametrize("value", [FULL, EMPTY, NULLS], ids=["full", "empty", "nulls"])
def test_layouts_the_job_does_not_write_round_trip(version, value):
    desc = _kryo(version, HOLDER, registrations=((85, "x.Holder"),))
    data = encode(desc, value)
    got, end = build_decoder(desc)(data, 0)
    assert end == len(data) and got == value
    assert _encoded(build_encoder(desc), got) == data  # and the decoded value gives the same bytes


def test_a_kryo_value_inside_another_serializers_value_is_written_too():
    kryo = _kryo(KRYO5, POINT, registrations=((85, "x.Point"),))
    for desc, value in [
        (T("tuple", [("f0", kryo), ("f1", T("long"))]), {"f0": {"x": 1, "y": -1}, "f1": 5}),
        (T("map", [("key", kryo), ("value", kryo)]), [({"x": 1, "y": 2}, {"x": 3, "y": 4})]),
    ]:
        assert build_decoder(desc)(encode(desc, value), 0)[0] == value


def _h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


ARRAY_LIST = "01 00 " + b"java.util.ArrayList"[:-1].hex() + "f4"  # by name, name id 0, ASCII form
LONG_NAME = "org.example.very.long.package.name.Thing"


@pytest.mark.parametrize(
    ("version", "node", "value", "expected"),
    [
        # Output.writeString: 2-63 ASCII characters (Kryo 5: 2-32) as they are, the last with bit 8;
        # else the length + 1 as a flagged varint and each UTF-16 unit in 1-3 bytes.
        (KRYO2, STRING, "ab", "01 61e2"),
        (KRYO5, STRING, "ab", "01 61e2"),
        (KRYO2, STRING, "a" * 40, "01" + "61" * 39 + "e1"),
        (KRYO5, STRING, "a" * 40, "01 a9" + "61" * 40),
        (KRYO2, STRING, "a" * 70, "01 c7 01" + "61" * 70),  # 71: 0xC0 | 71 & 0x3F, then 71 >> 6
        (KRYO5, STRING, "b", "01 82 62"),
        (KRYO5, STRING, "", "01 81"),
        (KRYO5, STRING, "é€𝄞", "01 85 c3a9 e282ac eda0b4 edb49e"),
        # A Long: its null marker, then a zigzag varlong whose ninth byte holds 8 bits.
        (KRYO5, LONG_BOXED, -(1 << 63), "01" + "ff" * 9),
        (KRYO2, LONG_BOXED, 1 << 62, "01" + "80" * 9),
        # Enums: Kryo 2 gives a constant a reference id (its second use refers back); Kryo 5 does not.
        (KRYO2, _list("java.util.ArrayList", COLOR), ["GREEN", "GREEN"], ARRAY_LIST + "01 02  01 02  04"),
        (KRYO5, _list("java.util.ArrayList", COLOR), ["GREEN", "GREEN"], ARRAY_LIST + "01 03  02  02"),
        # Kryo 5: non-final elements as one class (Label by name, id 1) with a has-nulls byte.
        (
            KRYO5,
            _list("java.util.ArrayList", LABEL),
            [{"text": "ab"}, None],
            ARRAY_LIST + "01 83  01 01 " + b"x.Label"[:-1].hex() + "ec 01  01 01 61e2  00",
        ),
        # Kryo 5 writes a class name with writeAscii, whatever its length (> 32 here).
        (KRYO5, _pojo(LONG_NAME, [], final=False), {}, "01 00" + LONG_NAME[:-1].encode().hex() + "e7 01"),
    ],
)
def test_bytes_as_kryos_output_writes_them(version, node, value, expected):
    holder = _pojo("x.H", [("v", node)])
    data = encode(_kryo(version, holder, registrations=((85, "x.H"),)), {"v": value})
    assert data.hex() == _h("57 01" + expected).hex()  # the holder: registration 85, a new object


def test_back_references_are_python_identity():
    point = {"x": 1, "y": 2}
    holder = _pojo("x.H", [("a", POINT), ("b", POINT), ("c", POINT), ("s", STRING), ("t", STRING)])
    desc = _kryo(KRYO5, holder, registrations=((85, "x.H"),))
    text = "shared"
    same = encode(desc, {"a": point, "b": point, "c": dict(point), "s": text, "t": text})
    # a: new (reference 1), b: reference 1, c: an equal copy, new; s: new (reference 3), t: reference 3
    assert same.hex() == _h("57 01  01 02 04  03  01 02 04  01 7368617265e4  05").hex()
    value = build_decoder(desc)(same, 0)[0]
    assert value["a"] is value["b"] and value["c"] is not value["a"] and value["s"] is value["t"]
    # One-character Strings Kryo wrote separately decode as separate objects (Python shares "b").
    separate = encode(desc, {"a": point, "b": point, "c": point, "s": KryoString("b"), "t": KryoString("b")})
    value = build_decoder(desc)(separate, 0)[0]
    assert value["s"] is not value["t"] and encode(desc, value) == separate


def test_an_unregistered_class_is_named_once_per_value():
    holder = _pojo("x.H", [("a", LABEL), ("b", LABEL)])
    data = encode(_kryo(KRYO2, holder, registrations=((85, "x.H"),)), {"a": {"text": "p"}, "b": {"text": "q"}})
    # x.Label by name (name id 0) the first time, by the name id after; each a new object.
    assert data.hex() == _h("57 01  01 00 782e4c616265ec 01 01 82 70  01 00 01 01 82 71").hex()


def test_a_value_of_a_class_known_only_at_run_time_is_written_only_as_null():
    desc = _kryo(KRYO5, _pojo("x.H", [("payload", ANY), ("items", _list("java.util.ArrayList", ANY))]))
    assert build_decoder(desc)(encode(desc, {"payload": None, "items": [None]}), 0)[0] == {
        "payload": None,
        "items": [None],
    }
    with pytest.raises(EncodeError, match=r"expected NULL for value\.payload, got '\"x\"'.*JSON text"):
        encode(desc, {"payload": '"x"', "items": []})
    with pytest.raises(EncodeError, match=r"for value\.items\[1\]"):
        encode(desc, {"payload": None, "items": [None, "1"]})
    with pytest.raises(UnsupportedError, match="known only at run time"):
        build_encoder(_kryo(KRYO5, T("nullable", [("value", ANY)], java="java.util.Optional")))


def test_a_date_takes_a_datetime_and_refuses_sub_millisecond_digits():
    desc = _kryo(KRYO2, _pojo("x.H", [("when", T("date", java="java.util.Date"))]))
    at = dt.datetime(1969, 7, 20, 20, 17, 40, tzinfo=dt.UTC)
    micros = (at - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    assert build_decoder(desc)(encode(desc, {"when": at}), 0)[0] == {"when": micros}
    with pytest.raises(EncodeError, match=r"whole milliseconds.* for value\.when"):
        encode(desc, {"when": micros + 1})
