"""The CLI and the real ``spark-sql``, each in a fresh process, on one statecat home in a tmp dir.

``statecat attach`` registers the fixture savepoints; then ``spark-sql`` (the script shipped with
pyspark, which knows nothing of statecat but the auto-registered data source) lists the databases
and answers every sql_examples/ file; ``statecat sql`` runs the README's main command.
They share the home's metastore server (tests/test_shared_metastore.py runs them at the same time).
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.expected import CASES_DIR
from tests.test_sql_examples import EXAMPLES, check_largest_keys, example_sql, expected_rows

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# Two savepoints of the GROUP BY job besides 2.3's, for the examples across savepoints (09, 10).
CASES = [
    "sql_groupby_hashmap_2.3",
    "sql_window_2.3",
    "sql_join_2.3",
    "sql_groupby_hashmap_1.20",
    "sql_groupby_rocksdb_2.3",
]
MAIN_QUERY = (
    "SELECT key, value.f0 AS count, value.f1 AS total FROM sql_groupby_hashmap_2_3.accstate WHERE key = 'key_662'"
)
TIMEOUT = 300


def _env(home: Path) -> dict:
    env = dict(os.environ)
    env.update(PYSPARK_PYTHON=sys.executable, STATECAT_HOME=str(home))
    return env


def _statecat(*args, home: Path, cwd: Path):
    exe = BIN / "statecat"
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "statecat.catalog.cli"]
    return subprocess.run(
        command + list(args), cwd=cwd, env=_env(home), capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    home = tmp_path_factory.mktemp("cli_home")
    done = _statecat("attach", *[str(CASES_DIR / c) for c in CASES], home=home, cwd=home)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    for case in CASES:
        assert any(line.startswith(case.replace(".", "_") + "\t") and line.endswith("\tattached") for line in lines)
    return home


def spark_sql_text(value) -> str:
    """A value as spark-sql prints it (tab-separated columns)."""
    if value is None:
        return "NULL"
    if isinstance(value, dt.datetime):
        text = value.strftime("%Y-%m-%d %H:%M:%S")
        if value.microsecond:
            text += f".{value.microsecond:06d}".rstrip("0")
        return text
    return str(value)


@pytest.mark.spark
def test_spark_sql_lists_the_attached_databases_and_answers_every_example(home, tmp_path):
    script = tmp_path / "examples.sql"
    script.write_text(
        "SHOW DATABASES;\n"
        + "".join(example_sql(name).rstrip() + ";\n" for name in EXAMPLES)
        + "EXPLAIN SELECT count(*) FROM sql_groupby_hashmap_2_3.accstate;\n"
    )
    # Plain spark-sql, told only the home's Spark conf directory (the README's way).
    conf = _statecat("metastore", "conf", home=home, cwd=tmp_path)
    assert conf.returncode == 0, conf.stderr[-3000:]
    done = subprocess.run(
        [
            str(BIN / "spark-sql"),
            "--master",
            "local[2]",
            "-S",
            "--conf",
            "spark.sql.session.timeZone=UTC",
            "--conf",
            "spark.ui.enabled=false",
            "-f",
            str(script),
        ],
        cwd=tmp_path,
        env={**_env(home), "SPARK_CONF_DIR": conf.stdout.strip()},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    databases = [
        "default",
        "sql_groupby_hashmap_1_20",
        "sql_groupby_hashmap_2_3",
        "sql_groupby_rocksdb_2_3",
        "sql_join_2_3",
        "sql_window_2_3",
        "statecat",
    ]
    assert lines[: len(databases)] == databases
    position = len(databases)
    for name in EXAMPLES:
        expected = expected_rows(name)
        if name.startswith("06_"):
            got = [tuple(line.split("\t")) for line in lines[position : position + 10]]
            check_largest_keys([(k, int(s), int(n), int(b)) for k, s, n, b in got], expected)
            position += 10
            continue
        want = ["\t".join(spark_sql_text(v) for v in row) for row in expected]
        assert lines[position : position + len(want)] == want, name
        position += len(want)
    # conf/ gives spark-sql statecat's extension too: state tables are scanned as columns.
    assert "statecat columnar scan" in "\n".join(lines[position:])


@pytest.mark.spark
def test_readme_main_command_prints_the_key_662_aggregate(home, tmp_path):
    done = _statecat("sql", "--attach", str(CASES_DIR / "sql_groupby_hashmap_2.3"), MAIN_QUERY, home=home, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "+---------+-------+-------+",
        "| key     | count | total |",
        "+---------+-------+-------+",
        "| key_662 | 1     | 336   |",
        "+---------+-------+-------+",
        "1 row",
    ]
    assert not (tmp_path / "metastore_db").exists()  # STATECAT_HOME holds the metastore, not the cwd
    assert "Using incubator modules" not in done.stderr  # the JDK's warning is filtered from Spark's JVM


@pytest.mark.spark
def test_statecat_sql_tables_show_whole_paths(home, tmp_path):
    done = _statecat("sql", "SELECT database, path FROM statecat.savepoints ORDER BY database", home=home, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in done.stdout.splitlines()[3:-2]]
    assert rows == sorted([c.replace(".", "_"), str(CASES_DIR / c / "savepoint")] for c in CASES)


@pytest.mark.spark
def test_statecat_sql_unknown_savepoint_is_a_one_line_error(home, tmp_path):
    done = _statecat("sql", "SELECT * FROM sql_groupby_hashmap_2_4.accstate", home=home, cwd=tmp_path)
    assert done.returncode == 2
    assert (
        "statecat: error: unknown savepoint database 'sql_groupby_hashmap_2_4'. "
        "Did you mean 'sql_groupby_hashmap_2_3' or 'sql_groupby_hashmap_1_20' or 'sql_groupby_rocksdb_2_3'?"
    ) in done.stderr


def test_sql_output_formats():
    from statecat.catalog.cli.output import write_rows as write
    from statecat.catalog.render import json_value as plain

    columns = ["key", "value", "raw"]
    rows = [["key_662", plain({"f0": 1, "f1": 336}), plain(b"\x01\xff")], ["k", plain({("a",): 2}), None]]
    out = io.StringIO()
    write(out, "json", columns, rows)
    assert [json.loads(line) for line in out.getvalue().splitlines()] == [
        {"key": "key_662", "value": {"f0": 1, "f1": 336}, "raw": {"hex": "01ff"}},
        {"key": "k", "value": [[["a"], 2]], "raw": None},
    ]
    out = io.StringIO()
    write(out, "csv", columns, rows)
    assert out.getvalue().splitlines() == [
        "key,value,raw",
        'key_662,"{""f0"": 1, ""f1"": 336}","{""hex"": ""01ff""}"',
        'k,"[[[""a""], 2]]",',
    ]


def test_repo_stays_clean_of_spark_scratch():
    for name in ("metastore_db", "spark-warehouse", "derby.log"):
        assert not (REPO / name).exists(), name
