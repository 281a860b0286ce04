"""The Java type matrix (issue 26): every state of tests/flink_jobs/java/JavaTypeMatrix.java's
savepoints (Flink 1.20 and 2.3, hashmap and RocksDB) reads back as its input says, through the
Python API and `statecat read`; Kryo states with the job's jar (`--classpath`).

Ground truth: tests/fixtures/matrix_kinds.py (expected.json, from the input alone). Known reader
gaps are strict xfails (matrix_kinds.READER_GAPS, KRYO_GAPS below).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from statecat.catalog.cli import main as cli_main
from statecat.readers import SavepointReader
from tests.acceptance import canonical
from tests.fixtures import runtime
from tests.fixtures.expected import CASES, iter_states, load_expected, savepoint_dir
from tests.fixtures.matrix_kinds import READER_GAPS

MATRIX_CASES = [c for c in CASES if c.startswith("java_type_matrix_")]
OPERATOR = "matrix-fn"

# Kryo states the decoder, given the job's jar, did not yet read as expected when these tests were
# written; strict, so each entry goes when its decoder change lands.
KRYO_GAPS: dict[str, str] = {}


def _states(case, want):
    return [(op, st) for op, st in iter_states(load_expected(case)) if op["uid"] == OPERATOR and want(st)]


def _params(want, gaps):
    return [
        pytest.param(
            case,
            st,
            id=f"{case}:{st['name']}",
            marks=[pytest.mark.xfail(strict=True, reason=gaps[st["name"]])] if st["name"] in gaps else [],
        )
        for case in MATRIX_CASES
        for _, st in _states(case, want)
    ]


PLAIN = _params(lambda st: st.get("serializer") != "kryo", READER_GAPS)
KRYO = _params(lambda st: st.get("serializer") == "kryo" and st["classpath"], KRYO_GAPS)
CUSTOM = [
    pytest.param(case, st, id=f"{case}:{st['name']}")
    for case in MATRIX_CASES
    for _, st in _states(case, lambda st: st.get("custom_serializer"))
]


def _by_key(rows):
    """{key: value} of decoded rows (every matrix state has VoidNamespace: one row per key)."""
    assert all(r["namespace"] is None for r in rows)
    out = {r["key"]: canonical(r["value"]) for r in rows}
    assert len(out) == len(rows), "a key twice"
    return out


def _assert_rows(got: dict, state: dict):
    want = {r["key"]: r["value"] for r in state["rows"]}
    assert sorted(got) == sorted(want), state["name"]
    wrong = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
    assert not wrong, f"{state['name']}: {len(wrong)} keys differ, e.g. {next(iter(wrong.items()))} (got, expected)"


def _api_rows(case, state, classpath=None):
    reader = SavepointReader(savepoint_dir(case), classpath=classpath)
    return _by_key(reader.table(state["name"], OPERATOR).to_pylist())


def _cli_rows(case, state, extra=()):
    out, err = io.StringIO(), io.StringIO()
    argv = ["read", str(savepoint_dir(case)), "--operator", OPERATOR, "--state", state["name"], "--format", "jsonl"]
    with redirect_stdout(out), redirect_stderr(err):
        code = cli_main([*argv, *extra])
    assert code == 0, err.getvalue()
    return _by_key([json.loads(line) for line in out.getvalue().splitlines()]), err.getvalue()


@pytest.fixture(scope="module")
def jars():
    """The job's jar per Flink version (runtime.java_job_jar: javac against PyFlink's jars)."""
    built = {}

    def jar(case):
        version = load_expected(case)["flink_version"]
        if not runtime._installed(runtime.venv_dir(version), version):
            pytest.skip(
                f"the job's jar compiles against PyFlink {version}'s jars: no venv at {runtime.venv_dir(version)}"
            )
        if version not in built:
            built[version] = runtime.java_job_jar("java_type_matrix", version)
        return built[version]

    return jar


def test_the_matrix_is_committed():
    # both releases, both backends
    assert {(load_expected(c)["flink_version"], load_expected(c)["backend"]) for c in MATRIX_CASES} == {
        ("1.20.5", "hashmap"),
        ("1.20.5", "rocksdb"),
        ("2.3.0", "hashmap"),
        ("2.3.0", "rocksdb"),
    }


@pytest.mark.parametrize("case,state", PLAIN)
def test_state_decodes_through_the_python_api(case, state):
    _assert_rows(_api_rows(case, state), state)


@pytest.mark.parametrize("case,state", PLAIN)
def test_state_decodes_through_statecat_read(case, state):
    got, _ = _cli_rows(case, state)
    _assert_rows(got, state)


@pytest.mark.parametrize("case,state", KRYO)
def test_kryo_state_decodes_with_the_jobs_jar_through_the_python_api(case, state, jars):
    _assert_rows(_api_rows(case, state, classpath=[jars(case)]), state)


@pytest.mark.parametrize("case,state", KRYO)
def test_kryo_state_decodes_with_the_jobs_jar_through_statecat_read(case, state, jars):
    got, _ = _cli_rows(case, state, ["--classpath", str(jars(case))])
    _assert_rows(got, state)


@pytest.mark.parametrize("case", MATRIX_CASES)
def test_without_the_jar_read_says_why_kryo_values_are_bytes(case):
    # the installed command, as a user runs it: the reason once on stderr, the values bytes
    state = next(st for _, st in _states(case, lambda st: st["name"] == "kryo_value"))
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("statecat")), "read", str(savepoint_dir(case)), "--state", "kryo_value"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stderr.count(state["kryo_class"]) == 1 and "--classpath" in proc.stderr, proc.stderr
    values = [json.loads(line)["value"] for line in proc.stdout.splitlines()]
    assert len(values) == len(state["rows"]) and all(set(v) == {"hex"} for v in values)


@pytest.mark.parametrize("case,state", CUSTOM)
def test_a_custom_kryo_serializer_keeps_bytes_with_its_reason(case, state, jars):
    reader = SavepointReader(savepoint_dir(case), classpath=[jars(case)])
    info = reader.meta.find_state(state["name"], reader.meta.operator(OPERATOR).id)[1]
    assert info.decode_status == "raw"
    assert any(state["custom_serializer"] in reason for reason in info.raw_reasons), info.raw_reasons
    got = _by_key(reader.table(state["name"], OPERATOR).to_pylist())
    assert sorted(got) == sorted(state["value_hex_contains"])
    for key, part in state["value_hex_contains"].items():
        assert part in got[key]["hex"], key  # the serializer's own bytes, as the job wrote them
