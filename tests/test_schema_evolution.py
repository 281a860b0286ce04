"""POJO and enum schema evolution between two savepoints of a real Java job (issue 26).

tests/flink_jobs/java/PojoEvolution.java in two versions (its `// V1` / `// V2` lines): v1 keeps
ValueState<Item> with Item {name, count, legacy int} and ValueState<Level> with Level {LOW, HIGH};
v2 drops `legacy`, adds `weight Double` and appends CRITICAL to Level. v1 reads part 1 of the input
and stops with savepoint sp1; v2, restored from sp1, reads part 2 and stops with sp2. Flink migrates
the state (PojoSerializer: a removed field is dropped, an added one starts null; EnumSerializer:
the appended constant keeps the old ordinals), so each savepoint's own serializer snapshot names
the fields and constants statecat must read: sp1's Item has v1's fields, sp2's v2's.

Ground truth: computed below from the input alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from statecat.readers import SavepointReader
from tests.fixtures import runtime
from tests.fixtures.generate import _run_job

pytestmark = pytest.mark.live_flink

SOURCE = runtime.JOBS / "java" / "PojoEvolution.java"
HELPERS = runtime.JOBS / "java" / "DataStreamPojo.java"  # freePort, REST waits, JSON
OPERATOR = "evolution-fn"
TIMEOUT = 60  # seconds a job waits for its records; the process gets 180 s more
MARK = re.compile(r"//\s*V([12])\s*$")

# (key, name, v, level). Part 1: k0..k7; part 2: k4..k7 again, k8 and k9 new, k0..k3 untouched.
PART1 = [(f"k{i % 8}", f"a{i}", 3 * i + 1, "HIGH" if i % 3 == 0 else "LOW") for i in range(20)]
PART2 = [(f"k{4 + i % 6}", f"b{i}", 5 * i + 2, ("CRITICAL", "LOW", "HIGH")[i % 3]) for i in range(12)]


def expected_v1(rows):
    """{key: (item dict, level)} after v1's function read `rows`."""
    out = {}
    for key, name, v, level in rows:
        item = out.get(key, ({"name": None, "count": 0, "legacy": 0}, None))[0]
        out[key] = ({"name": name, "count": item["count"] + 1, "legacy": item["legacy"] + v}, level)
    return out


def expected_v2(before, rows):
    """{key: (item dict, level)} after v2's function, restored from v1's `before`, read `rows`:
    `legacy` gone, `weight` null until the key's first v2 record."""
    out = {k: ({"name": i["name"], "count": i["count"], "weight": None}, lv) for k, (i, lv) in before.items()}
    for key, name, v, level in rows:
        item = out.get(key, ({"name": None, "count": 0, "weight": None}, None))[0]
        weight = (item["weight"] or 0.0) + v / 2.0
        out[key] = ({"name": name, "count": item["count"] + 1, "weight": weight}, level)
    return out


def version_source(version: int) -> str:
    """The job's source with the other version's marked lines dropped."""
    kept = []
    for line in SOURCE.read_text(encoding="utf-8").splitlines(keepends=True):
        m = MARK.search(line)
        if m is None or int(m.group(1)) == version:
            kept.append(line)
    return "".join(kept)


def compile_version(flink: str, version: int) -> Path:
    """javac of one version (with DataStreamPojo.java) against PyFlink's jars, cached per content
    under <flink cache>/classes/ like runtime.java_job_classes."""
    text = version_source(version)
    lib = runtime.pyflink_lib(flink)
    digest = hashlib.sha256(text.encode() + HELPERS.read_bytes()).hexdigest()[:16]
    classes = runtime.flink_cache_dir(flink) / "classes" / f"evolution-v{version}-{digest}"
    if (classes / "PojoEvolution.class").is_file():
        return classes
    classes.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="javac-", dir=classes.parent))
    try:
        src = tmp / "src"
        src.mkdir()
        (src / "PojoEvolution.java").write_text(text, encoding="utf-8")
        shutil.copy(HELPERS, src)
        out = tmp / "classes"
        subprocess.run(
            [runtime.jdk_tool("javac"), "-nowarn", "-d", str(out), "-cp", f"{lib}/*", *map(str, sorted(src.iterdir()))],
            check=True,
        )
        shutil.rmtree(classes, ignore_errors=True)
        out.rename(classes)  # atomic: a concurrent user sees no classes or all of them
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return classes


def run_version(flink, version, backend, rows, scratch, restore=None):
    """Runs one version on `rows` (restored from `restore`); returns its canonical savepoint."""
    scratch.mkdir()
    (scratch / "input").mkdir()
    (scratch / "input" / "events.txt").write_text("".join(f"{k},{n},{v},{lv}\n" for k, n, v, lv in rows))
    with runtime.heavy_lock():
        # in the lock: javac is a JVM too
        classes = compile_version(flink, version)
        opens = [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in runtime.JDK_OPENS]
        cp = f"{classes}{os.pathsep}{runtime.pyflink_lib(flink)}/*"
        java = [runtime.jdk_tool("java"), *opens, "-cp", cp, "PojoEvolution"]
        args = ["--input", str(scratch / "input"), "--records", str(len(rows)), "--work", str(scratch / "work")]
        args += ["--result", str(scratch / "result.json"), "--backend", backend, "--timeout", str(TIMEOUT)]
        if restore is not None:
            args += ["--restore", str(restore)]
        _run_job(java, f"PojoEvolution v{version}", args, scratch, timeout=TIMEOUT + 180)
    return Path(json.loads((scratch / "result.json").read_text())["savepoint"])


@pytest.fixture(
    scope="module",
    params=[("1.20.5", "hashmap"), ("2.3.0", "rocksdb")],
    ids=lambda p: f"{p[0]}-{p[1]}",
)
def savepoints(request, tmp_path_factory):
    """(sp1, sp2) of one Flink release and backend."""
    flink, backend = request.param
    base = tmp_path_factory.mktemp(f"evolution-{flink}-{backend}")
    sp1 = run_version(flink, 1, backend, PART1, base / "v1")
    sp2 = run_version(flink, 2, backend, PART2, base / "v2", restore=sp1)
    return sp1, sp2


def read_state(savepoint, state):
    """{key: value} of a keyed ValueState (one row per key, VoidNamespace)."""
    rows = []
    for batch in SavepointReader(str(savepoint)).batches(state, OPERATOR):
        rows += batch.to_pylist()
    assert all(r["namespace"] is None for r in rows), rows[:3]
    out = {r["key"]: r["value"] for r in rows}
    assert len(out) == len(rows), "a key twice"
    return out


def test_v1_item_has_exactly_the_v1_fields(savepoints):
    want = {k: item for k, (item, _) in expected_v1(PART1).items()}
    assert read_state(savepoints[0], "item") == want


def test_v2_item_has_exactly_the_v2_fields(savepoints):
    want = {k: item for k, (item, _) in expected_v2(expected_v1(PART1), PART2).items()}
    got = read_state(savepoints[1], "item")
    assert {k: set(v) for k, v in got.items()} == {k: {"name", "count", "weight"} for k in want}
    assert got == want


def test_enum_values_and_the_appended_constant(savepoints):
    v1 = expected_v1(PART1)
    assert read_state(savepoints[0], "level") == {k: lv for k, (_, lv) in v1.items()}
    want = {k: lv for k, (_, lv) in expected_v2(v1, PART2).items()}
    assert "CRITICAL" in want.values()
    assert read_state(savepoints[1], "level") == want
