"""PyFlink process-mode state: descriptor files, PyFlink coder decoding, typed reads via stateInfo.

PROCESS_MODE_METADATA is the `_metadata` of a real savepoint (all state inline) that
tests/test_savepoint_rest_live.py's job produced on a standalone Flink 2.3 cluster: keyed by
k0..k19, three records (k, 10 * key + r, "t<(key + r) % 2>") per key, states declared as in
DESCRIPTORS. It keeps the PyFlink decoding tested without starting Flink.
"""

from __future__ import annotations

import base64
import json
import subprocess
import zlib
from pathlib import Path

import pytest

from statecat.catalog.cli import main as cli_main
from statecat.catalog.render import json_value
from statecat.readers import SavepointReader
from statecat.readers.codecs.pyflink import build_pyflink_decoder, coder_decoder
from statecat.statemeta.descriptors import (
    load_descriptors,
    parse_descriptors,
    parse_type,
)
from statecat.statemeta.errors import FormatError, StatecatError
from statecat.statemeta.model import load_state_meta
from statecat.statemeta.snapshotter.stateinfo import STATE_INFO_FILE, read_state_info
from statecat.statemeta.types import TypeDescriptor

PROCESS_MODE_METADATA = (
    "eNrtWm1sHMUZnrMdO4EknINxgQZyfKhSUu5j9z58Z5qPi3PBFucPfCaGlPS63puzF9/tbnf3kjgtUaQiLKTWUlVQqQQoUKRKbfqn"
    "UtMIAUGVCkl/8KMfAqlSfrSqIlFVUdNfVUXpzM7O7Oztrs/mo6ElJ53ubuaZd+Z5n2fe2V177OvzcQBALyCviPPZA2Ljkn5frGpa"
    "BpSa1UW4VJ1bqjYlvarp0JAszQAbdMkw4enX3pAb4vc+2Fv61ZG/fnnjPU6QU3y09tcXKoq6OBybMhTVillarGLVErHJlgXAwouv"
    "7Lt7b/HCVy4OHmlevTqwlmhbKlrLkOFwrKGo0AQb7I/3//LWb1/b88Tsj+CX/nVuf/ZOGigCYlCCWTlXE+fkNByqZYekdC4r5upz"
    "c/mMmM4KEMEecuD4Xbryxs8uRbj8COhdVxpwOGk19aRpSRaUJStuQNOK6024OH9MbCYVVW9ZSZQhK55KyOZRbv2RHvtHP1n2NJRq"
    "0KjgKM4MxzoGN6WjUNdQ8sw4RbhtcWlIEtNyXBRT+XQN5lNSbi6ZljPZbKEux/NzUI5ncrlavCDWcnEhW88MiRmYrmUzaPL3iRVC"
    "FkcyEpucKk0XZyanq5WZ4kypemCsMjM9tv/hmbHJier45IESiFamymMzbkfJHhc9VCw/XKpWStNjxfLY4dI0au0ChmbMJyRdkhdg"
    "oo6UW0Q/lISsNZuamrCWdNiylIaZmJNMmJAMQ1pK7F+yIHJOU7GUo7CImyrQUKSGcgIa967WWVEl3VzQkMtAt89EN9qJrLca8brq"
    "+XHlj/9eXtq587SVHO3/+8/NXKgj+5zPU+AjvTafcdz87Ecbv3UZ/FdfNxnks78IPhevbbuC22/+p/f3wJ8+3jy3/J58Dr7l1Mpz"
    "axt3608+GZ63fZ983v6t9Y37ovrJzL999uONv2PftXbKp1PBBUmqzQk5MV4XYCGeqQlSvCAUcvFaKpXL1tNQErMFAHbcSg/zLjAZ"
    "WFofl45KXGE1WqqlNGFiWjvGlVHPL0/d3HIZn149ETAw+wE7EmbWUcQrFjr157m52hs80/WBAX3JWtBUkqY4uvaoWtI8y3T0wdKj"
    "pQPOSTTz6FQJdI8Xp2z6wefNvnUsFV0BrZoFPgldYM4XmVw7IXL2HCQwPqDsc2nWkHTEpu3sCu7yzH2tTsyBieJ4qTJVHPHl9JBv"
    "RdRVtmiJQ5pSm5Ca0EQQyE0d0u6Ztd8jv6LWtVW07ymjS45VxC+uI3VlxbTWrH7kc6bKNq8qFmya12W59rLc5pHF0iypUZWaGop/"
    "XZ3PWilrSOZ1VT4DqtxTxYGMqh0pqRuaDE0TndnVlgmNuN1ncneMkTVfV3hPf/rUxEzM4JCrytHlua74f7iM+zQFvNMjIDwKVeu6"
    "dv8j2uG19z4FuhcF+9YN337iW+BTPc/e4Gj2xDPfiajPPLjZTNgyuuDN6L3RAd0Fejx9N+PnE/ZNkCXQxytIDR6yA9+yovcGSxgW"
    "UvaX1LAg0BbRHhTtpfBeOxjGbQHcxDdi0FNekNAOGvzwQ5to3zLoWRTSHZg+6TDl0BzVyNM2Va4zgOuTNlcOczd64yegvZhaOmV/"
    "Q2zTAmsjfPv72JAQwt/GqOU2VDvjSK/DuHcFpSbVgXAXlZaBeWm7ibSsj6ObciBdRFoGucsZ3oM4pu7DCtk/EE2n0RF3Kx0QwhVH"
    "ja54QT5xI1Tc7TgpuQ5cX0ZcUajnUdChDtBR6gM3MO+DP3vi8Bn7A3GIOywgZS97RgdYaJRYyA3iWggZJ5eixskJrE30xOT31xDd"
    "X0N0fw05fnPjB2sQ2R+E8onwElZqO506RM4HMOh5L8gXaYU69wUE7LRVY9S5DMzrcIQ4l/UFZDlGnMsgfNLSNGlpmjRnk0bvoPAQ"
    "ojhK9AUvyEd0D/XtME5uJzOeIb59FQXNdIDuor51A3NZ6Yp44vD5+ibxrTssIGFnPKMDjL2L+NYN4il9Q6z0DbHSZ1vRjelKkBrO"
    "pJzMZwTa4vjWjR+iwU+DUL46eQgrNUynDgmFr1Gir3pBPjl3Ut++joDZDhJlqG8ZmNfhh8S3rC9AhgzxLYPwvs1S32apb7OOb3dT"
    "eAhRbNfo616Qj2id+vY8Tm6ns6VOzeii+SKaJJZzOwMcVSeOcjGeSphilTDFKmHKMcleNiSE8G8w6nwbyscYUsZvY2S+A+OzlLGL"
    "5rffDsLY7QxgfJYwdjEexnnGOM8Y5x3GD7AhIeX8cYx6uw3lY/wLyvgCRnZy83OUsYvmNf41Yex2Bvj5OcLYxXiqRpZVjSyrGo6n"
    "+0fZkBCNf4BRF9pQvkKQoIwvYmSnErtCGbtonvGPCWO3M0DjFcLYxXg0zjCNM0xjWvrG2JAQjW/HqIttKJ/G36UF6x204QsdCD9G"
    "CxYD83z7ScFifQECP0YKFoPwBatAC1aBFqyCU7AmKDxE269i0DtekI/oWUr0XQQUOxAdpEQZmK/MewlR1heg6yAhyiD8cSbS40yk"
    "x5noEJ2l8BCi+E+f0Xe9IB/RW6iH38Pad7qh06mHXTSv6TjxsNsZIKpOPOxiPLtWYLtWYLvWua3rf4QNCSGM/8jQ/14bysf4EpX2"
    "EkpNp8I8TaVlYF7afxBpWV+AtNNEWgbhpc1TafNUWqckR79G4SFM8Z1A9JIX5CP6ECV6GQE73ePsoUQZmCf6S0KU9QUQ3UOIMghP"
    "NEeJ5ijRnEN0nsJDiJ7AoMtekI/obuphDWvfabeesK+K+65gbKcS9ib1uxuZ9/uiNxB/ZO8mW8EdF5CyE97hAZvlTbJZ3Ciegi+y"
    "gi+ygm8XBy6oZ3cV2O4qsN3llM1+d44QKa4GoXxaLDHUajX4PEZdaUP5zteTSFf6OvM3sME0QD70sRZqkRftP8QnRtjXKQM/BbQU"
    "SP/Q1dUFNh4G0ZpiypJRG5FUGTYasHYYbHGaDkqK/fsm+ltRFXOBb6m05sxWE7dEWYupQ7WGm3rrmiHjL5taqtyQ0MJqZbDVXdvM"
    "kg4tIJYRjSShkbRpJB0aSReapM/c8Jj7j+vOw1CUBGEtSajQ/0vAw08v/27jK48MnOsC3WVwA1pjU3KWkvUvRdYMmITHodyyFE1N"
    "skAH2bD7y6BHlZpo+LYyfiyabEjqfJI8j0R9A7pmWq4IRRnHscDo2ljz6753KiASysVJA6R9ScDrTrB1JwLWzf4rCIDjBthqP9HF"
    "S0+U1FaT79QtsGmkODE5MTZSLKPvLBaa+OC6sx/Igp/uG+Ak2GSBHjRh6T+fGxAB"
)

DESCRIPTORS = {
    "format": "statecat.descriptors",
    "version": 1,
    "operators": {
        "stateful-fn": {
            "total_amount": "LONG",
            "items": "LIST<STRING>",
            "per_tag": "MAP<STRING, LONG>",
            "last": "ROW<tag STRING, v LONG>",
            "info": "PICKLED",
        }
    },
}


def _expected():
    by_key = {}
    for r in range(3):
        for k in range(20):
            by_key.setdefault(f"k{k}", []).append((k * 10 + r, f"t{(k + r) % 2}"))
    per_tag = {}
    for k, vs in by_key.items():
        acc = {}
        for v, t in vs:
            acc[t] = acc.get(t, 0) + v
        per_tag[k] = acc
    return {
        "total_amount": {k: sum(v for v, _ in vs) for k, vs in by_key.items()},
        "items": {k: [f"{t}:{v}" for v, t in vs] for k, vs in by_key.items()},
        "per_tag": per_tag,
        "last": {k: {"tag": vs[-1][1], "v": vs[-1][0]} for k, vs in by_key.items()},
    }


@pytest.fixture
def process_savepoint(tmp_path) -> Path:
    sp = tmp_path / "savepoint-pyflink"
    sp.mkdir()
    (sp / "_metadata").write_bytes(zlib.decompress(base64.b64decode("".join(PROCESS_MODE_METADATA))))
    return sp


def _key(k):  # PyFlink keys by a one-field Row; readers may give the field itself
    return k["f0"] if isinstance(k, dict) else k


def _table(reader, name):
    return {_key(r["key"]): json_value(r["value"]) for r in reader.table(name, "stateful-fn").to_pylist()}


def test_without_descriptors_python_states_are_bytes_with_a_reason(process_savepoint):
    meta = load_state_meta(str(process_savepoint), use_state_info=False)
    op = meta.operator("stateful-fn")
    names = sorted(s.name for s in op.states if s.name.startswith("python-state-"))
    assert names == [
        "python-state-info",
        "python-state-items",
        "python-state-last",
        "python-state-per_tag",
        "python-state-total_amount",
    ]
    for name in names:
        state = op.state(name)
        assert state.decode_status == "raw"
        assert any("--descriptors FILE" in r for r in state.raw_reasons)
    rows = SavepointReader(meta).table("python-state-total_amount", "stateful-fn").to_pylist()
    assert len(rows) == 20 and all(isinstance(r["value"], bytes) for r in rows)
    per_tag = SavepointReader(meta).table("python-state-per_tag", "stateful-fn").to_pylist()
    assert len(per_tag) == 20 and all(isinstance(k, bytes) for r in per_tag for k, _ in r["value"])


def test_snapshot_with_descriptors_reads_typed_values_under_declared_names(process_savepoint, tmp_path):
    descriptors = tmp_path / "descriptors.json"
    descriptors.write_text(json.dumps(DESCRIPTORS))
    assert cli_main(["snapshot", str(process_savepoint), "--descriptors", str(descriptors)]) == 0
    doc = json.loads((process_savepoint / STATE_INFO_FILE).read_text())
    assert doc["descriptors"]["operators"] == DESCRIPTORS["operators"]
    states = {s["name"]: s for op in doc["operators"] for s in op["states"]}
    assert {"total_amount", "items", "per_tag", "last", "info"} <= set(states)
    assert not [n for n in states if n.startswith("python-state-")]
    assert states["total_amount"]["state_type"] == "VALUE"
    assert states["total_amount"]["stored_name"] == "python-state-total_amount"
    assert states["total_amount"]["declared"]["type"] == "LONG"
    assert states["total_amount"]["value"]["sql_type"] == "BIGINT"
    assert states["items"]["value"]["sql_type"] == "ARRAY<STRING>"
    assert states["per_tag"]["value"]["sql_type"] == "MAP<STRING, BIGINT>"
    assert states["per_tag"]["user_key"]["sql_type"] == "STRING"
    assert states["last"]["value"]["sql_type"] == "STRUCT<tag: STRING, v: BIGINT>"
    assert states["total_amount"]["table"] == "total_amount"  # unique in the job: no operator prefix
    assert all(states[n]["decode"]["status"] == "full" for n in ("total_amount", "items", "per_tag", "last", "info"))

    reader = SavepointReader(str(process_savepoint))  # plans from the stateInfo
    expected = _expected()
    for name, want in expected.items():
        assert _table(reader, name) == want, name
    info = SavepointReader(str(process_savepoint), unpickle=True).table("info", "stateful-fn").to_pylist()
    assert {_key(r["key"]): json.loads(r["value"]) for r in info} == {
        k: {"n": v[-1]}
        for k, v in {k: [int(x.split(":")[1]) for x in items] for k, items in expected["items"].items()}.items()
    }
    # without --unpickle, pickled values stay opaque (hex of the pickle bytes): no code runs
    assert all(isinstance(r["value"], str) for r in reader.table("info", "stateful-fn").to_pylist())


def test_descriptor_paths_agree(process_savepoint, tmp_path):
    """stateInfo with descriptors == deriving from the savepoint with the same descriptor file."""
    descriptors = tmp_path / "d.json"
    descriptors.write_text(json.dumps(DESCRIPTORS))
    derived = load_state_meta(str(process_savepoint), use_state_info=False, descriptors=str(descriptors))
    assert cli_main(["snapshot", str(process_savepoint), "--descriptors", str(descriptors)]) == 0
    planned = read_state_info(savepoint=str(process_savepoint))
    assert planned == derived
    a, b = SavepointReader(derived), SavepointReader(planned)
    for op, state in derived.states():
        assert a.table(state.name, op.id).equals(b.table(state.name, op.id)), state.name
    # a stale stateInfo falls back to deriving (typed only when descriptors are given again)
    doc = json.loads((process_savepoint / STATE_INFO_FILE).read_text())
    doc["savepoint"]["metadata_file"]["sha256"] = "f" * 64
    (process_savepoint / STATE_INFO_FILE).write_text(json.dumps(doc))
    assert load_state_meta(str(process_savepoint), descriptors=str(descriptors)) == derived
    assert load_state_meta(str(process_savepoint)).operator("stateful-fn").state("python-state-items")


def test_descriptor_mismatch_and_bad_files_are_clear(process_savepoint, tmp_path, capsys):
    bad = {"operators": {"stateful-fn": {"per_tag": "LONG"}}}  # a MapState declared as a value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    assert cli_main(["snapshot", str(process_savepoint), "--descriptors", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Flink stored a MAP state" in err and "python-state-per_tag" in err
    path.write_text(json.dumps({"operators": {"stateful-fn": {"x": "LIST<NOPE>"}}}))
    with pytest.raises(FormatError, match="unknown or malformed type"):
        load_descriptors(path)
    path.write_text("{")
    with pytest.raises(FormatError, match="cannot read the descriptor file"):
        load_descriptors(path)
    with pytest.raises(StatecatError, match="no such descriptor file"):
        load_descriptors(tmp_path / "missing.json")
    with pytest.raises(FormatError, match="LIST state declares"):
        parse_descriptors({"operators": {"op": {"s": {"type": "LONG", "state": "LIST"}}}})
    assert not (process_savepoint / STATE_INFO_FILE).exists()


@pytest.mark.parametrize(
    "text,canonical,sql",
    [
        ("LONG", "LONG", "BIGINT"),
        ("list<string>", "LIST<STRING>", "ARRAY<STRING>"),
        ("MAP<STRING, LIST<INT>>", "MAP<STRING, LIST<INT>>", "MAP<STRING, ARRAY<INT>>"),
        ("ROW<a LONG, b ROW<c STRING>>", "ROW<a LONG, b ROW<c STRING>>", "STRUCT<a: BIGINT, b: STRUCT<c: STRING>>"),
        ("ROW<LONG, STRING>", "ROW<LONG, STRING>", "STRUCT<f0: BIGINT, f1: STRING>"),
        ("TUPLE<LONG, DOUBLE>", "TUPLE<LONG, DOUBLE>", "STRUCT<f0: BIGINT, f1: DOUBLE>"),
        ("PRIMITIVE_ARRAY<BYTE>", "BYTES", "BINARY"),
        ("PICKLED_BYTE_ARRAY", "PICKLED", "STRING"),
        ("INTEGER", "INT", "INT"),
    ],
)
def test_type_grammar(text, canonical, sql):
    t = parse_type(text)
    assert t.text() == canonical
    assert t.result_type().sql_type() == sql


@pytest.mark.parametrize("bad", ["", "LIST", "MAP<STRING>", "LIST<STRING", "FOO", "LONG LONG", "ROW<>"])
def test_type_grammar_rejects(bad):
    with pytest.raises(FormatError):
        parse_type(bad)


def test_coder_layouts_by_hand():
    import struct

    long_ = coder_decoder(parse_type("LONG"))
    assert long_(struct.pack(">q", -5), 0) == (-5, 8)
    s = "héllo".encode()
    assert coder_decoder(parse_type("STRING"))(struct.pack(">i", len(s)) + s, 0) == ("héllo", 4 + len(s))
    # ROW<a LONG, b STRING> with b null: mask byte = row kind bits 00, a=0, b=1 -> 0b0001_0000
    row = coder_decoder(parse_type("ROW<a LONG, b STRING>"))
    assert row(bytes([0x10]) + struct.pack(">q", 7), 0) == ({"a": 7, "b": None}, 9)
    # bag of byte arrays: [int32 len][v1 v2] 0x2C [int32 len][v3], then the next entry (0x00...)
    bag = build_pyflink_decoder(
        TypeDescriptor.of("pyflink", [("value", TypeDescriptor.of("list"))], layout="bag_all", coder="LONG")
    )
    buf = (
        struct.pack(">i", 16)
        + struct.pack(">qq", 1, 2)
        + b"\x2c"
        + struct.pack(">i", 8)
        + struct.pack(">q", 3)
        + b"\x00\x00\x00\x09"
    )
    assert bag(buf, 0) == ([1, 2, 3], len(buf) - 4)


CROSS_CHECK = r"""
import datetime, decimal, json, sys
from pyflink.common import Row, Types
from pyflink.common.time import Instant
from pyflink.fn_execution import coders
from pyflink.datastream.state import ValueStateDescriptor, ListStateDescriptor, MapStateDescriptor
from pyflink.datastream.state import ReducingStateDescriptor, AggregatingStateDescriptor
from pyflink.datastream.functions import AggregateFunction


class Avg(AggregateFunction):
    def create_accumulator(self): return 0, 0
    def add(self, value, acc): return acc[0] + value, acc[1] + 1
    def get_result(self, acc): return acc[0] / acc[1]
    def merge(self, a, b): return a[0] + b[0], a[1] + b[1]


cases = [
    (Types.LONG(), -42), (Types.INT(), 7), (Types.SHORT(), -3), (Types.BYTE(), 5), (Types.BOOLEAN(), True),
    (Types.DOUBLE(), 2.5), (Types.FLOAT(), 1.5), (Types.STRING(), "zürich ✓"), (Types.CHAR(), "c"),
    (Types.BIG_INT(), 123456789012), (Types.BIG_DEC(), decimal.Decimal("12.3400")),
    (Types.SQL_DATE(), datetime.date(2024, 2, 29)), (Types.SQL_TIME(), datetime.time(13, 14, 15, 123000)),
    (Types.SQL_TIMESTAMP(), datetime.datetime(2024, 1, 2, 3, 4, 5, 678000)),
    (Types.INSTANT(), Instant(1700000000, 123456000)),
    (Types.PRIMITIVE_ARRAY(Types.BYTE()), b"\x00\x01\xff"),
    (Types.PRIMITIVE_ARRAY(Types.INT()), [1, 2, 3]),
    (Types.LIST(Types.STRING()), ["a", None, "c"]),
    (Types.BASIC_ARRAY(Types.LONG()), [1, None]),
    (Types.MAP(Types.STRING(), Types.LONG()), {"x": 1, "y": None}),
    (Types.TUPLE([Types.LONG(), Types.STRING()]), (1, "one")),
    (Types.ROW_NAMED(["a", "b", "c"], [Types.LONG(), Types.STRING(), Types.DOUBLE()]), Row(a=1, b=None, c=2.0)),
    (Types.ROW([Types.INT()] * 9), Row(*([None] + list(range(8))))),
]
out = []
for t, v in cases:
    impl = coders.from_type_info(t).get_impl()
    out.append({"hex": impl.encode(v).hex()})
sys.path.append(sys.argv[1])
from statecat.statemeta.descriptors import descriptors_from_pyflink, type_from_pyflink
for (t, v), o in zip(cases, out):
    o["type"] = type_from_pyflink(t)
doc = descriptors_from_pyflink({"op": [
    ValueStateDescriptor("v", Types.LIST(Types.STRING())), ListStateDescriptor("l", Types.LONG()),
    MapStateDescriptor("m", Types.STRING(), Types.ROW([Types.LONG()])),
    ReducingStateDescriptor("r", lambda a, b: a, Types.DOUBLE()),
    AggregatingStateDescriptor("a", Avg(), Types.TUPLE([Types.LONG(), Types.LONG()])),
    ValueStateDescriptor("p", Types.PICKLED_BYTE_ARRAY())]})
print(json.dumps({"values": out, "descriptors": doc}))
"""

EXPECTED_VALUES = [
    -42,
    7,
    -3,
    5,
    True,
    2.5,
    1.5,
    "zürich ✓",
    "c",
    123456789012,
    "12.3400",
    (__import__("datetime").date(2024, 2, 29).toordinal() - __import__("datetime").date(1970, 1, 1).toordinal()),
    "13:14:15.123",
    1704164645678000,
    1700000000123456,
    b"\x00\x01\xff",
    [1, 2, 3],
    ["a", None, "c"],
    [1, None],
    [("x", 1), ("y", None)],
    {"f0": 1, "f1": "one"},
    {"a": 1, "b": None, "c": 2.0},
    {f"f{i}": (None if i == 0 else i - 1) for i in range(9)},
]


@pytest.fixture(scope="module")
def pyflink_python() -> Path:
    """The PyFlink 2.3 virtualenv's python, created here when missing (not left to other tests' order)."""
    from tests.fixtures.runtime import ensure_venv

    return ensure_venv("2.3.0")


@pytest.mark.live_flink
def test_decoders_match_pyflinks_own_coders(pyflink_python):
    """Bytes written by PyFlink's coders (the fast ones the workers use) decode to the same values."""
    import sysconfig

    proc = subprocess.run(
        [str(pyflink_python), "-c", CROSS_CHECK, sysconfig.get_paths()["purelib"]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for case, want in zip(result["values"], EXPECTED_VALUES, strict=True):
        data = bytes.fromhex(case["hex"])
        value, end = coder_decoder(parse_type(case["type"]))(data, 0)
        assert end == len(data), case
        assert value == want, case
    assert result["descriptors"]["operators"]["op"] == {
        "v": "VALUE<LIST<STRING>>",
        "l": "LIST<LONG>",
        "m": "MAP<STRING, ROW<f0 LONG>>",
        "r": "REDUCING<DOUBLE>",
        "a": "AGGREGATING<TUPLE<LONG, LONG>>",
        "p": "PICKLED",
    }
