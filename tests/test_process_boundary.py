"""Where statecat's Spark sessions meet the rest of the machine: installs, the temp dir, stderr.

- An editable install (``pip install -e``) hides ``pyspark_statecat`` from Spark's discovery of
  ``pyspark_*`` modules; statecat's own sessions still find the ``flinkstate`` source.
- A session leaves nothing in the system temp directory (Hive's ``<uuid>_resources`` included).
- A query Spark rejects prints one line (no JSON log record), exit 2; so do a damaged state file
  found by a read in a Python worker and Java errors Py4J returns. A bug keeps its traceback.

Every case runs real Spark in a fresh process. The editable install is built by pip with build
isolation (setuptools from PyPI or pip's cache), as a user's ``pip install -e .`` would be.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.fixtures.expected import load_expected, savepoint_dir

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TIMEOUT = 300
CASE = "sql_groupby_hashmap_2.3"
ACC_QUERY = "SELECT key, value.f0 AS f0, value.f1 AS f1 FROM sql_groupby_hashmap_2_3.accstate"
# What the JVM itself (not Spark's logging) prints on stderr when Spark adds an incubator module.
JVM_LAUNCHER_LINES = ("WARNING: Using incubator modules:",)

pytestmark = pytest.mark.spark


def _statecat_command(python: Path | None = None) -> list[str]:
    if python is not None:
        return [str(python), "-m", "statecat.catalog.cli"]
    exe = BIN / "statecat"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "statecat.catalog.cli"]


def _expected_acc_rows() -> dict:
    state = next(s for op in load_expected(CASE)["operators"] for s in op["states"] if s["name"] == "accState")
    return {r["key"]: (r["value"]["f0"], r["value"]["f1"]) for r in state["rows"]}


def _editable_venv(tmp_path: Path) -> Path:
    """A virtualenv with statecat installed editable from a copy of the sources, its dependencies
    taken from this venv (a .pth file), and no regular statecat install anywhere on its path."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (source / name).write_bytes((REPO / name).read_bytes())
    for package in ("catalog", "statemeta", "readers", "writers"):
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT)
    site = next((venv / "lib").glob("python3*/site-packages"))
    ours = Path(next(p for p in sys.path if p.endswith("site-packages") and Path(p, "pyspark").is_dir()))
    deps = tmp_path / "deps"
    deps.mkdir()
    for entry in ours.iterdir():
        name = entry.name
        if (
            name.startswith(("statecat", "pyspark_statecat", "__editable__", "_distutils_hack"))
            or name.endswith(".pth")
            or name == "__pycache__"
        ):
            continue
        (deps / name).symlink_to(entry)
    (site / "statecat_test_deps.pth").write_text(f"{deps}\n")
    python = venv / "bin" / "python"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--editable",
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return python


def test_editable_install_sessions_find_the_flinkstate_source(tmp_path):
    python = _editable_venv(tmp_path)
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import pkgutil, statecat; print(statecat.__file__); "
            "print([m.name for m in pkgutil.iter_modules() if m.name.startswith('pyspark_')])",
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    location, discoverable = probe.stdout.splitlines()
    # The premise: statecat comes from the editable source, and Spark's discovery cannot see it.
    assert location.startswith(str(tmp_path / "src")), location
    assert "pyspark_statecat" not in discoverable
    env = dict(os.environ, PYSPARK_PYTHON=str(python))
    env.pop("STATECAT_HOME", None)
    done = subprocess.run(
        _statecat_command(python)
        + [
            "sql",
            "--home",
            str(tmp_path / "home"),
            "--attach",
            str(savepoint_dir(CASE)),
            "--format",
            "json",
            ACC_QUERY,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert {r["key"]: (r["f0"], r["f1"]) for r in rows} == _expected_acc_rows()


SESSION_SCRIPT = textwrap.dedent("""
    import sys
    from statecat.catalog.servers.sessions import session

    savepoint, home = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)
    spark = session(home)
    # Python workers read state; the Hive client makes its session state.
    assert spark.read.format("flinkstate").option("path", savepoint).option("state", "accState").load().count() > 0
    spark.sql("SHOW DATABASES").collect()
    jvm = spark.sparkContext._gateway.proc
    spark.stop()
    jvm.stdin.close()  # the gateway JVM exits at end of input, running Spark's cleanup hooks
    jvm.wait(timeout=120)
""")


# What a statecat home holds after a session: the catalog, its metastore server's files, Spark's conf.
HOME_ENTRIES = {
    "metastore_db",
    "derby.log",
    "spark-warehouse",
    "metastore.json",
    "metastore.lock",
    "metastore.log",
    "conf",
    "scratch",
}


@pytest.mark.parametrize("where", ["home", "statecat_home_env"])
def test_a_session_leaves_nothing_in_the_temp_dir(tmp_path, where):
    temp = tmp_path / "tmp"
    work = tmp_path / "work"
    temp.mkdir()
    work.mkdir()
    home = tmp_path / "home"
    args = [str(savepoint_dir(CASE))] + ([str(home)] if where == "home" else [])
    # TMPDIR for Python, java.io.tmpdir for the JVM: both point at the fresh directory.
    env = dict(
        os.environ,
        TMPDIR=str(temp),
        JAVA_TOOL_OPTIONS=f"-Djava.io.tmpdir={temp}",
        PYSPARK_PYTHON=sys.executable,
        STATECAT_HOME=str(home if where == "statecat_home_env" else tmp_path),
    )
    done = subprocess.run(
        [sys.executable, "-c", SESSION_SCRIPT, *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    from statecat.catalog.servers.metastore import stop

    assert stop(str(home))  # the session's home runs the shared metastore server, here stopped
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in temp.iterdir()) == []
    assert sorted(p.name for p in work.iterdir()) == []  # the working directory does not matter
    # The metastore and its Derby log stay where the catalog lives; nothing else is left there.
    catalog_dir = home
    assert {p.name for p in catalog_dir.iterdir()} <= HOME_ENTRIES
    assert not (home / "metastore.json").exists()
    assert (catalog_dir / "metastore_db").is_dir() and (catalog_dir / "derby.log").is_file()


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith(JVM_LAUNCHER_LINES)]


def test_a_query_spark_rejects_prints_one_line(tmp_path):
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    done = subprocess.run(
        _statecat_command() + ["sql", "--home", str(tmp_path / "home"), "SELECT * FROM no_such_table"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    lines = _error_lines(done.stderr)
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("statecat: error: [TABLE_OR_VIEW_NOT_FOUND]") and "no_such_table" in lines[0]
    assert len(lines[0]) < 300 and "{" not in done.stderr
    assert done.stdout == ""


def test_a_damaged_state_file_read_through_sql_prints_one_line(tmp_path):
    """The read fails in a Python worker: statecat's message, without Spark's task-failure logs."""
    savepoint = tmp_path / "damaged" / "savepoint"
    shutil.copytree(savepoint_dir(CASE), savepoint)
    (savepoint / "stateInfo").unlink(missing_ok=True)
    state_files = [p for p in savepoint.iterdir() if p.name != "_metadata"]
    assert state_files
    for f in state_files:
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    done = subprocess.run(
        _statecat_command()
        + [
            "sql",
            "--home",
            str(tmp_path / "home"),
            "--attach",
            str(tmp_path / "damaged"),
            "SELECT count(*) FROM damaged.accstate",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    lines = _error_lines(done.stderr)
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith(
        f"statecat: error: cannot read savepoint {savepoint}, operator GroupAggregate[3], state 'accState': "
    ), lines[0]


COMMAND_SCRIPT = textwrap.dedent("""
    import sys
    from statecat.catalog import cli
    from statecat.catalog.cli import sql as cmd_sql
    from statecat.catalog.cli.options import cli_session

    def run(args):
        WORK

    cmd_sql.run = run  # `statecat sql` as a command whose work raises
    sys.exit(cli.main(["sql", "SELECT 1"]))
""")


def test_a_java_error_from_a_statecat_session_prints_one_line(tmp_path):
    # A Java exception PySpark does not convert reaches Python as a Py4JJavaError.
    script = COMMAND_SCRIPT.replace(
        "WORK", 'cli_session(sys.argv[1]).sparkContext._jvm.java.lang.Class.forName("no.Such")'
    )
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "home")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert _error_lines(done.stderr) == ["statecat: error: java.lang.ClassNotFoundException: no.Such"], done.stderr[
        -3000:
    ]


def test_a_bug_keeps_its_traceback(tmp_path):
    """Only Spark's errors are turned into one line: a Python error in statecat's code is not."""
    # Spark's error types are imported (so the CLI checks them), then a plain Python bug.
    script = COMMAND_SCRIPT.replace("WORK", "import py4j.protocol, pyspark.errors; None.no_such_attribute")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "AttributeError" in done.stderr
