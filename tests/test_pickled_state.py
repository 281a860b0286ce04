"""PyFlink thread-mode pickles in byte[] state: decoded only with the opt-in, declarable by real name.

Thread mode (pyflink/fn_execution/embedded/java_utils.to_java_typeinfo) stores TUPLE, ROW and
PICKLED values, AggregatingState accumulators of those types included, as ``pickle.dumps`` bytes
in Java ``byte[]`` state under the declared names. Ground truth: the cases' expected.json (from the
jobs' input): top-level pickles as the Python object, pickles inside lists and maps as
``{"hex": ...}`` plus their ``unpickled`` form.
"""

from __future__ import annotations

import json

import pytest

from statecat.catalog.cli import main as cli_main
from statecat.readers import SavepointReader
from statecat.readers.codecs import decoders
from statecat.readers.codecs.decoders import DecodeError, check_pickle_header
from statecat.statemeta.descriptors import pickled_notes, with_pyflink_pickles
from statecat.statemeta.errors import FormatError
from statecat.statemeta.model import load_state_meta
from tests.acceptance import _comparable, _json_of_pickle, canonical, find_operator
from tests.fixtures.expected import CASES, is_successive, iter_states, load_expected, savepoint_dir

# Thread-mode jobs with pickled values (the successive cases' job declares only typed states).
THREAD_CASES = [c for c in CASES if load_expected(c).get("execution_mode") == "thread" and not is_successive(c)]


def _pickled_states(case):
    expected = load_expected(case)
    states = [(op, st) for op, st in iter_states(expected) if st.get("value_encoding") == "pickle"]
    assert states, f"{case} has no pickled states"
    return states


def _parsed(value):
    """A value read with unpickling: pickles are JSON text, at the top or inside lists / map values."""
    if isinstance(value, str):
        return json.loads(value)
    if isinstance(value, list):
        return [_parsed(v) if not isinstance(v, tuple) else [v[0], _parsed(v[1])] for v in value]
    return value


def _expected_unpickled(row):
    """expected.json's value with its pickles as objects: ``unpickled`` where the case gives it, else
    each ``{"hex": ...}`` of the exact pickle bytes read by the test's own unpickler."""

    def objects(value):
        if isinstance(value, dict) and set(value) == {"hex"}:
            return _json_of_pickle(bytes.fromhex(value["hex"]))
        if isinstance(value, list):
            return [objects(v) for v in value]
        return value

    return {**row, "value": row["unpickled"] if "unpickled" in row else objects(row["value"])}


@pytest.mark.parametrize("case", THREAD_CASES)
def test_unpickle_decodes_thread_mode_pickles_as_expected(case):
    reader = SavepointReader(savepoint_dir(case), unpickle=True)
    for expected_op, expected_state in _pickled_states(case):
        op = find_operator(reader.meta, expected_op)
        state = op.state(expected_state["name"])
        assert "PICKLED" in state.value.describe(), state.value.describe()
        rows = [
            {
                "key": canonical(r["key"]),
                "namespace": canonical(r["namespace"]),
                "value": canonical(_parsed(r["value"])),
            }
            for r in reader.table(state.name, op.id).to_pylist()
        ]
        columns = ["key", "namespace", "value"]
        want = [_expected_unpickled(r) for r in expected_state["rows"]]
        assert _comparable(rows, columns) == _comparable(want, columns), f"{case} {state.name}"


@pytest.mark.parametrize("case", THREAD_CASES)
def test_without_unpickle_pickles_stay_bytes_with_a_reason_and_no_code_runs(case, monkeypatch):
    def refuse(self):
        raise AssertionError("unpickled without the opt-in")

    monkeypatch.setattr(decoders._PyFlinkUnpickler, "load", refuse)
    reader = SavepointReader(savepoint_dir(case))
    for expected_op, expected_state in _pickled_states(case):
        op = find_operator(reader.meta, expected_op)
        state = op.state(expected_state["name"])
        notes = pickled_notes(state)
        assert notes and "--unpickle" in notes[0], state.notes
        rows = reader.table(state.name, op.id).to_pylist()
        assert len(rows) == len(expected_state["rows"])
        for row in rows:
            value = row["value"]
            parts = [value] if isinstance(value, bytes) else [v[1] if isinstance(v, tuple) else v for v in value]
            assert all(p is None or (isinstance(p, bytes) and p[:1] == b"\x80") for p in parts), value


def test_only_pyflink_thread_mode_byte_arrays_are_taken_for_pickles():
    """Java byte[] states elsewhere (source splits, process-mode states, SQL) are left alone."""
    for case in CASES:
        meta = load_state_meta(savepoint_dir(case))
        marked = with_pyflink_pickles(meta, unpickle=True)
        changed = {(op.label, s.name) for op, s in marked.states() if "PICKLED" in s.value.describe()}
        want = set()
        for expected_op, expected_state in iter_states(load_expected(case)):
            if expected_state.get("value_encoding") == "pickle" and case in THREAD_CASES:
                want.add((find_operator(meta, expected_op).label, expected_state["name"]))
        assert changed == want, case
        if not want:
            assert marked is meta


def test_pickle_header_is_checked_before_unpickling():
    import pickle

    for protocol in (2, 3, 4, 5):
        check_pickle_header(pickle.dumps((1, "a"), protocol=protocol))
        check_pickle_header(pickle.dumps(None, protocol=protocol))
    for bad in (
        b"",
        b"hello world",
        b"\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00N.",
        b"\x80\x09N.",
        pickle.dumps(1, protocol=4)[:-1],
    ):
        with pytest.raises(DecodeError, match="not one"):
            check_pickle_header(bad)


def _descriptors(tmp_path, states, operator="keyed-fn"):
    path = tmp_path / "descriptors.json"
    path.write_text(json.dumps({"format": "statecat.descriptors", "version": 1, "operators": {operator: states}}))
    return str(path)


def test_descriptor_file_declares_thread_mode_states_by_their_real_names(tmp_path):
    case = "datastream_thread_2.3"
    declared = {
        "count": "LONG",
        "items": "LIST<STRING>",
        "per_tag": "MAP<STRING, LONG>",
        "max_v": "REDUCING<LONG>",
        "avg": "AGGREGATING<TUPLE<LONG, LONG>>",
        "info": "PICKLED",
    }
    path = _descriptors(tmp_path, declared)
    plain = SavepointReader(savepoint_dir(case), descriptors=path)
    op = plain.meta.operator("keyed-fn")
    assert {s.name for s in op.states} >= set(declared)  # thread mode keeps the declared names
    for name in declared:
        assert any("declared" in n and "descriptor file" in n for n in op.state(name).notes), name
    assert op.state("avg").value.attr("declared") == "TUPLE<LONG, LONG>"
    assert op.state("count").value.describe() == "LONG"  # Java-typed states keep their serializer
    expected = {s["name"]: s["rows"] for _, s in iter_states(load_expected(case))}
    unpickled = SavepointReader(savepoint_dir(case), descriptors=path, unpickle=True)
    for name in ("avg", "info"):
        rows = {r["key"]: json.loads(r["value"]) for r in unpickled.table(name, "keyed-fn").to_pylist()}
        assert rows == {r["key"]: r["value"] for r in expected[name]}, name


def test_declaring_bytes_keeps_a_byte_array_bytes_even_with_unpickle(tmp_path):
    path = _descriptors(tmp_path, {"avg": "BYTES"})
    reader = SavepointReader(savepoint_dir("datastream_thread_2.3"), descriptors=path, unpickle=True)
    assert reader.meta.operator("keyed-fn").state("avg").value.describe() == "BYTES"
    assert all(isinstance(r["value"], bytes) for r in reader.table("avg", "keyed-fn").to_pylist())
    # the undeclared pickled state next to it is still decoded
    assert all(isinstance(r["value"], str) for r in reader.table("info", "keyed-fn").to_pylist())


@pytest.mark.parametrize(
    "states,message",
    [
        ({"avg": "LONG"}, "declared LONG, but Flink stored byte[]"),
        ({"count": "TUPLE<LONG, LONG>"}, "stores as a pickle in byte[], but Flink stored LONG"),
        ({"per_tag": "LONG"}, "declared a VALUE state, but Flink stored a MAP state"),
    ],
)
def test_thread_mode_declarations_that_contradict_the_savepoint_are_clear_errors(tmp_path, states, message):
    with pytest.raises(FormatError, match=message.replace("[", r"\[").replace("]", r"\]")) as err:
        SavepointReader(savepoint_dir("datastream_thread_2.3"), descriptors=_descriptors(tmp_path, states))
    assert "keyed-fn" in str(err.value)


def test_cli_read_unpickles_only_with_the_flag(capsys):
    sp = str(savepoint_dir("datastream_thread_2.3"))
    expected = {s["name"]: s["rows"] for _, s in iter_states(load_expected("datastream_thread_2.3"))}
    assert cli_main(["read", sp, "--state", "avg", "--unpickle"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["key"]: json.loads(r["value"]) for r in rows} == {r["key"]: r["value"] for r in expected["avg"]}
    assert cli_main(["read", sp, "--state", "avg"]) == 0
    captured = capsys.readouterr()
    assert all(set(json.loads(line)["value"]) == {"hex"} for line in captured.out.splitlines())
    assert "pickles" in captured.err and "--unpickle" in captured.err


def test_a_value_that_is_not_a_pickle_is_an_error_not_unpickled(tmp_path, monkeypatch):
    """A state taken for pickles whose bytes are not one: one clear error, nothing unpickled."""
    calls = []
    monkeypatch.setattr(decoders._PyFlinkUnpickler, "load", lambda self: calls.append(1))
    decode = decoders.build_decoder(
        with_pyflink_pickles(load_state_meta(savepoint_dir("datastream_thread_2.3")), unpickle=True)
        .operator("keyed-fn")
        .state("avg")
        .value,
        unpickle=True,
    )
    data = b"not a pickle."
    with pytest.raises(DecodeError, match="not one"):
        decode(len(data).to_bytes(4, "big") + data, 0)
    assert not calls


SPARK_READ = """
import json, sys
from statecat.catalog.servers.sessions import session
spark = session(sys.argv[1], quiet=True)
frame = (spark.read.format("flinkstate").option("path", sys.argv[2]).option("state", "avg")
         .option("unpickle", sys.argv[3]).load())
print(json.dumps({"type": frame.schema["value"].dataType.simpleString(),
                  "rows": [[r["key"], r["value"] if isinstance(r["value"], str) else r["value"].hex()]
                           for r in frame.collect()]}))
spark.stop()
"""


@pytest.mark.spark
def test_flinkstate_source_unpickles_only_with_the_option(tmp_path):
    import os
    import subprocess
    import sys

    sp = str(savepoint_dir("datastream_thread_2.3"))
    expected = {
        r["key"]: r["value"]
        for _, s in iter_states(load_expected("datastream_thread_2.3"))
        if s["name"] == "avg"
        for r in s["rows"]
    }
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    out = {}
    for flag in ("true", "false"):
        done = subprocess.run(
            [sys.executable, "-c", SPARK_READ, str(tmp_path / "home"), sp, flag],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        out[flag] = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["true"]["type"] == "string"
    assert {k: json.loads(v) for k, v in out["true"]["rows"]} == expected
    assert out["false"]["type"] == "binary"
    assert all(v.startswith("8004") for _, v in out["false"]["rows"])
