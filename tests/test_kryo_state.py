"""Kryo state typed from the job's classes (statemeta/java/kryo.py, readers/codecs/kryo.py) beyond the type
matrix's decoding checks (tests/test_java_type_matrix.py): the classpath carried by descriptor
files, stateInfo, the key view and attached Spark tables; what is said without the jar; and the
must-reject inputs (every truncation and seeded mutations of real Kryo values, hostile class
names) failing as DecodeError, never as a crash or a wrong value.

Real savepoints: the java_type_matrix fixtures (tests/flink_jobs/java/JavaTypeMatrix.java on
Flink 2.3 = Kryo 5 and 1.20 = Kryo 2.24); their jar is the job's own classes (runtime.java_job_jar).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys

import pytest

from statecat.readers import SavepointReader
from statecat.readers.codecs.decoders import DecodeError, build_decoder
from statecat.statemeta.errors import StatecatError
from statecat.statemeta.java.kryo import KryoTypes, NotKryoDecodable, kryo_version
from tests.fixtures.expected import load_expected, savepoint_dir
from tests.fixtures.runtime import java_job_jar

CASES = {"java_type_matrix_2.3_hashmap": "2.3.0", "java_type_matrix_1.20_rocksdb": "1.20.5"}
OPERATOR = "matrix-fn"
STATECAT = [sys.executable, "-m", "statecat.catalog.cli"]


@pytest.fixture(scope="module")
def jars() -> dict[str, str]:
    return {case: str(java_job_jar("java_type_matrix", version)) for case, version in CASES.items()}


def _expected_rows(case: str, state: str) -> dict:
    for op in load_expected(case)["operators"]:
        for st in op.get("states", []):
            if st["name"] == state:
                return {row["key"]: row["value"] for row in st["rows"]}
    raise KeyError(state)


def _raw_values(case: str, state: str) -> list[bytes]:
    """The state's real Kryo bytes, as statecat shows them without the jar."""
    reader = SavepointReader(savepoint_dir(case))
    rows = [row for batch in reader.batches(state, OPERATOR) for row in batch.to_pylist()]
    return [row["value"] for row in rows]


def _statecat(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*STATECAT, *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_descriptor_file_carries_the_classpath_relative_to_itself(case, jars, tmp_path):
    shutil.copy(jars[case], tmp_path / "job.jar")
    (tmp_path / "descriptors.json").write_text(json.dumps({"classpath": ["job.jar"]}))
    reader = SavepointReader(savepoint_dir(case), descriptors=str(tmp_path / "descriptors.json"))
    got = {row["key"]: row["value"] for b in reader.batches("kryo_value", OPERATOR) for row in b.to_pylist()}
    assert got.keys() == _expected_rows(case, "kryo_value").keys()
    assert all(value["stamp"] is not None for value in got.values())  # a registered class (id 86+)


def test_stateinfo_keeps_the_classpath_and_the_typed_kryo_columns(jars, tmp_path):
    case = "java_type_matrix_2.3_hashmap"
    copy = tmp_path / "savepoint"
    shutil.copytree(savepoint_dir(case), copy)
    (tmp_path / "descriptors.json").write_text(json.dumps({"classpath": [jars[case]]}))
    proc = _statecat("snapshot", str(copy), "--descriptors", str(tmp_path / "descriptors.json"))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((copy / "stateInfo").read_text())
    assert doc["descriptors"]["classpath"] == [jars[case]]
    # Read back without any classpath: the stateInfo's descriptors already type the Kryo state.
    reader = SavepointReader(str(copy))
    _, state = reader.find("kryo_value", OPERATOR)
    assert state.decode_status == "full"
    rows = [row for b in reader.batches("kryo_value", OPERATOR) for row in b.to_pylist()]
    assert {row["key"] for row in rows} == _expected_rows(case, "kryo_value").keys()


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_key_view_decodes_kryo_with_the_jar_and_says_why_without(case, jars):
    key = sorted(_expected_rows(case, "kryo_value"))[0]
    with_jar = _statecat("key", savepoint_dir(case), key, "--format", "json", "--classpath", jars[case])
    assert with_jar.returncode == 0, with_jar.stderr
    rows = {row["state"]: row["value"] for row in json.loads(with_jar.stdout)["rows"]}
    assert isinstance(rows["kryo_value"], dict) and rows["kryo_value"]["color"] in ("RED", "GREEN", "BLUE")
    assert "--classpath" not in with_jar.stderr
    without = _statecat("key", savepoint_dir(case), key, "--format", "json")
    assert without.returncode == 0, without.stderr
    assert without.stderr.count("Kryo-serialized JavaTypeMatrix$Rec") == 1, without.stderr
    assert "pass the job's jar with --classpath" in without.stderr


def test_state_meta_says_why_kryo_is_bytes():
    from statecat.catalog.spark.tables import STATE_META_COLUMNS, state_meta_rows
    from statecat.statemeta.model import load_state_meta

    meta = load_state_meta(savepoint_dir("java_type_matrix_2.3_hashmap"))
    names = [name for name, _ in STATE_META_COLUMNS]
    by_state = {dict(zip(names, row))["state_name"]: dict(zip(names, row)) for row in state_meta_rows(meta)}
    reason = by_state["kryo_value"]["raw_reasons"]
    assert "Kryo-serialized JavaTypeMatrix$Rec" in reason and "pass the job's jar with --classpath" in reason
    assert "custom Kryo serializer" not in reason


def test_a_missing_classpath_entry_is_refused_before_reading(tmp_path):
    proc = _statecat(
        "read", savepoint_dir("java_type_matrix_2.3_hashmap"), "--state", "kryo_value", "--classpath", "nosuch.jar"
    )
    assert proc.returncode == 2
    assert "nosuch.jar" in proc.stderr and "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------- must-reject inputs


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_truncation_of_a_real_kryo_value_is_a_decode_error(case, jars):
    reader = SavepointReader(savepoint_dir(case), classpath=[jars[case]])
    _, state = reader.find("kryo_value", OPERATOR)
    decode = build_decoder(state.value)
    for value in _raw_values(case, "kryo_value")[:3]:
        whole, end = decode(value, 0)
        assert end == len(value) and whole["ascii"].startswith("rec-")
        for cut in range(len(value)):
            with pytest.raises(DecodeError):
                decode(value[:cut], 0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_seeded_mutations_of_real_kryo_values_fail_cleanly(case, jars):
    reader = SavepointReader(savepoint_dir(case), classpath=[jars[case]])
    _, state = reader.find("kryo_value", OPERATOR)
    decode = build_decoder(state.value)
    values = _raw_values(case, "kryo_value")
    rng = random.Random(26)
    outcomes = {"decoded": 0, "refused": 0}
    for _ in range(3000):
        data = bytearray(rng.choice(values))
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            decode(bytes(data), 0)
            outcomes["decoded"] += 1
        except (DecodeError, StatecatError):
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0 and sum(outcomes.values()) == 3000


def test_class_names_from_the_bytes_are_never_paths(jars):
    from statecat.statemeta.java.classpath import ClassPath

    with ClassPath([jars["java_type_matrix_2.3_hashmap"]]) as cp:
        types = KryoTypes(cp, kryo_version(6))
        for hostile in ("../../etc/passwd", "/etc/passwd", "a..b", "x/y", "", "[" * 300 + "I"):
            with pytest.raises(NotKryoDecodable):
                types.of_class(hostile)


# ----------------------------------------------------------------------------- Spark


@pytest.mark.spark
def test_sql_attach_with_the_classpath_types_kryo_tables_on_spark_workers(jars, tmp_path):
    case = "java_type_matrix_2.3_hashmap"
    home = tmp_path / "home"
    env = {**os.environ, "STATECAT_HOME": str(home)}
    expected = _expected_rows(case, "kryo_value")
    key = sorted(expected)[0]
    query = f"SELECT key, value.color, value.fixed.x, size(value.list) FROM {{db}}.kryo_value WHERE key = '{key}'"
    root = tmp_path / "root"
    shutil.copytree(savepoint_dir(case), root / "matrix")
    proc = _statecat(
        "sql", "--attach", str(root), "--classpath", jars[case], "--format", "json", query.format(db="matrix"), env=env
    )
    assert proc.returncode == 0, proc.stderr
    (row,) = [json.loads(line) for line in proc.stdout.splitlines()]
    want = expected[key]
    assert list(row.values()) == [key, want["color"], want["fixed"]["x"], len(want["list"])]
    assert "--classpath" not in proc.stderr
    # The same savepoint attached without the jar (another home): bytes, and the reason said once.
    other = {**os.environ, "STATECAT_HOME": str(tmp_path / "home2")}
    proc = _statecat(
        "sql", "--attach", str(root), "--format", "json", "SELECT key, value FROM matrix.kryo_value LIMIT 1", env=other
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("Kryo-serialized JavaTypeMatrix$Rec") == 1, proc.stderr
    assert "pass the job's jar with --classpath" in proc.stderr
