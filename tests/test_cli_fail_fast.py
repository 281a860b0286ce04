"""Argument mistakes answer at once, before Spark starts; output is whole; statecat's JVMs are quiet.

Each mistake runs the real command in a fresh process and must exit 2 with one line naming what is
wrong, without starting a JVM (its ``java`` records any start: Spark alone takes several seconds)
and without creating the statecat home (so no Spark and no metastore was started). The rest checks what the commands
print: JSON ending in a newline, tables that do not cut cells, and the stderr filter that drops
the JDK's incubator-module warning from the JVMs statecat starts.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from statecat.catalog.cli import main
from statecat.catalog.cli.beeline import beeline_args
from statecat.catalog.cli.output import write_rows, write_table
from statecat.catalog.servers.spark_tools import forward, run_filtered, without_incubator_warning
from tests.fixtures.expected import savepoint_dir

CASE = "sql_groupby_hashmap_2.3"
STATECAT = [sys.executable, "-m", "statecat.catalog.cli"]
WARNING = "WARNING: Using incubator modules: jdk.incubator.vector"


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> dict[str, str]:
    base = tmp_path_factory.mktemp("fail_fast")
    (base / "empty").mkdir()
    (base / "not-a-savepoint").mkdir()
    (base / "not-a-savepoint" / "notes.txt").write_text("no _metadata here\n")
    (base / "bad.json").write_text('{"states": [')
    (base / "a-file").write_text("")
    return {
        "savepoint": str(savepoint_dir(CASE)),
        "empty": str(base / "empty"),
        "not_savepoint": str(base / "not-a-savepoint"),
        "bad_json": str(base / "bad.json"),
        "file": str(base / "a-file"),
        "out": str(base / "out"),
        "home": str(base / "home"),
    }


MISTAKES = {
    "sql attach of a missing path": (
        ["sql", "--attach", "/does/not/exist", "SELECT 1"],
        r"no such directory \(file /does/not/exist\)",
    ),
    "sql attach of a directory without savepoints": (
        ["sql", "--attach", "{empty}", "SELECT 1"],
        r"no savepoint under {empty}\. A savepoint is a directory holding _metadata",
    ),
    "sql attach with a missing descriptor file": (
        ["sql", "--attach", "{savepoint}", "--descriptors", "/does/not/exist.json", "SELECT 1"],
        r"no such descriptor file \(file /does/not/exist\.json\)",
    ),
    "sql attach with a broken descriptor file": (
        ["sql", "--attach", "{savepoint}", "--descriptors", "{bad_json}", "SELECT 1"],
        r"cannot read the descriptor file: .* \(file {bad_json}\)",
    ),
    "sql descriptors without attach": (
        ["sql", "--descriptors", "{bad_json}", "SELECT 1"],
        r"--descriptors applies to the savepoints --attach ROOT names",
    ),
    "sql negative limit": (["sql", "--limit", "-1", "SELECT 1"], r"argument --limit: expected a number of rows"),
    "sql unknown format": (["sql", "--format", "xml", "SELECT 1"], r"argument --format: invalid choice: 'xml'"),
    "sql empty query": (["sql", " "], r"the query is empty"),
    "sql on a home that is a file": (["sql", "--home", "{file}", "SELECT 1"], r"the statecat home {file} is not"),
    "attach of a missing path": (["attach", "/does/not/exist"], r"no such directory \(file /does/not/exist\)"),
    "attach of a directory that is not a savepoint": (
        ["attach", "{not_savepoint}"],
        r"no savepoint under {not_savepoint}\.",
    ),
    "attach with a missing descriptor file": (
        ["attach", "{savepoint}", "--descriptors", "/does/not/exist.json"],
        r"no such descriptor file",
    ),
    "serve of a missing root": (["serve", "/does/not/exist"], r"no such directory \(file /does/not/exist\)"),
    "serve on a port out of range": (["serve", "--port", "70000"], r"argument --port: expected a port between 1"),
    "serve polling never": (["serve", "--poll", "0", "{empty}"], r"--poll 0\.0 must be positive"),
    "serve beyond loopback without auth": (["serve", "--bind", "0.0.0.0"], r"--bind 0\.0\.0\.0 exposes .* --auth"),
    "serve with a malformed hiveconf": (["serve", "--hiveconf", "nokey"], r"--hiveconf 'nokey' is not KEY=VALUE"),
    "spark-sql on a home that is a file": (["spark-sql", "--home", "{file}", "-e", "SELECT 1"], r"is not a directory"),
    "beeline with no server on the home": (["beeline", "-e", "SELECT 1"], r"no `statecat serve` runs on the home"),
    "write from a missing snapshot on Spark": (
        ["write", "/does/not/exist", "--out", "{out}", "--engine", "spark"],
        r"no such file or directory \(file /does/not/exist\)",
    ),
    "write with a malformed set-uid on Spark": (
        ["write", "{savepoint}", "--out", "{out}", "--engine", "spark", "--set-uid", "nouid"],
        r"expected --set-uid OPERATOR=NEW_UID, got 'nouid'",
    ),
    "relocate to a path that is not a savepoint": (
        ["relocate", "/old/place", "{empty}"],
        r"not a savepoint: expected a _metadata file in the directory, found none \(file {empty}\)",
    ),
    "an unknown command": (["sqll", "SELECT 1"], r"argument COMMAND: invalid choice: 'sqll'"),
}


@pytest.mark.parametrize("name", list(MISTAKES))
def test_argument_mistakes_answer_before_spark_starts(name, places, tmp_path):
    args, message = MISTAKES[name]
    args = [a.format(**places) for a in args]
    message = message.format(**{k: re.escape(v) for k, v in places.items()})
    env, java_started = _recording_java(tmp_path)
    env["STATECAT_HOME"] = places["home"]
    done = subprocess.run([*STATECAT, *args], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2, done
    assert done.stdout == ""
    last = done.stderr.splitlines()[-1]
    assert re.search(message, last), done.stderr
    # statecat's own errors are one line; argparse's (a malformed option) come after the usage.
    assert re.match(r"statecat( [\w-]+)?: error: ", last) and "Traceback" not in done.stderr, done.stderr
    assert not java_started.exists(), f"a JVM was started: {java_started.read_text()}"
    assert not os.path.exists(places["home"]), "the home was created: Spark or the metastore started"


def _recording_java(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose ``java`` (on PATH and in JAVA_HOME) records its arguments and fails."""
    jdk = tmp_path / "recording-jdk"
    started = jdk / "started"
    (jdk / "bin").mkdir(parents=True, exist_ok=True)
    java = jdk / "bin" / "java"
    java.write_text(f'#!/bin/sh\necho "$@" >> "{started}"\nexit 1\n')
    java.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "STATECAT_HOME"}
    env["JAVA_HOME"] = str(jdk)
    env["PATH"] = f"{jdk / 'bin'}{os.pathsep}{env['PATH']}"
    return env, started


def test_a_port_in_use_is_refused_before_spark_starts(places, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env, java_started = _recording_java(tmp_path)
        done = subprocess.run(
            [*STATECAT, "serve", "--home", places["home"], "--port", str(port), places["empty"]],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
    assert done.returncode == 2
    assert done.stderr.startswith(f"statecat: error: cannot serve on 127.0.0.1:{port}: "), done.stderr
    assert not java_started.exists(), f"a JVM was started: {java_started.read_text()}"


def test_choosing_a_command_imports_neither_spark_nor_the_readers():
    """The error path is fast because the CLI imports only the command asked for, and it lazily."""
    code = (
        "import sys\n"
        "from statecat.catalog.cli import build_parser\n"
        "build_parser('sql').parse_args(['sql', 'SELECT 1'])\n"
        "print(sorted(m for m in ('pyspark', 'py4j', 'numba', 'statecat.readers') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_help_still_lists_every_command(capsys):
    from statecat.catalog.cli import COMMANDS

    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    listing = capsys.readouterr().out
    for command in COMMANDS:
        assert re.search(rf"^\s+{re.escape(command)}\s+\S", listing, re.MULTILINE), command


def test_every_json_output_ends_with_a_newline(tmp_path, capsys):
    savepoint = tmp_path / "savepoint"
    shutil.copytree(savepoint_dir(CASE), savepoint)
    commands = {
        "inspect": ["inspect", str(savepoint), "--json"],
        "read": ["read", str(savepoint), "--state", "accState", "--limit", "2", "--format", "jsonl"],
        "key": ["key", str(savepoint), "key_662", "--format", "json"],
        "history": ["history", str(tmp_path), "key_662", "--format", "json"],
        "diff": ["diff", str(savepoint), str(savepoint), "--format", "jsonl"],
        "snapshot": ["snapshot", str(savepoint), "--json"],
        "write": ["write", str(savepoint), "--out", str(tmp_path / "written"), "--format", "json"],
    }
    for name, args in commands.items():
        assert main(args) == 0, name
        out = capsys.readouterr().out
        assert out.endswith("\n"), (name, out[-80:])
        if name in ("read", "diff"):  # JSON lines
            assert all(json.loads(line) is not None for line in out.splitlines()), name
        else:
            assert json.loads(out) is not None, name
    out = io.StringIO()
    write_rows(out, "json", ["key"], [["key_662"]])  # `statecat sql --format json`
    assert out.getvalue() == '{"key": "key_662"}\n'


def test_tables_never_cut_a_cell():
    path = "/a/very/long/path/" + "x" * 200 + "/savepoint"
    out = io.StringIO()
    write_table(out, ["database", "path"], [["db", path], ["other", "two\nlines\tand a tab"]])
    lines = out.getvalue().splitlines()
    assert f"| db       | {path} |" in lines
    escaped = "two\\nlines\\tand a tab"  # as typed: backslash-n, backslash-t
    assert f"| other    | {escaped:<{len(path)}} |" in lines
    assert lines[-1] == "2 rows"
    assert len({len(line) for line in lines[:-1]}) == 1  # every row one line, as wide as the header


def test_the_incubator_warning_line_is_dropped_and_nothing_else():
    warning = WARNING.encode() + b"\n"
    assert without_incubator_warning(b"", warning + b"kept\nprompt> ") == (b"kept\nprompt> ", b"")
    # A partial line that may become the warning waits for the rest; one that cannot passes at once.
    assert without_incubator_warning(b"", b"WARNING: Using") == (b"", b"WARNING: Using")
    assert without_incubator_warning(b"WARNING: Using", b" incubator modules: jdk.in") == (
        b"",
        b"WARNING: Using incubator modules: jdk.in",
    )
    assert without_incubator_warning(b"WARNING: Using incubator modules: jdk.in", b"cubator.vector\nnext\n") == (
        b"next\n",
        b"",
    )
    assert without_incubator_warning(b"", b"WARNING: other\n") == (b"WARNING: other\n", b"")
    assert without_incubator_warning(b"WARN", b"", end=True) == (b"WARN", b"")
    source, sink = os.pipe(), os.pipe()
    os.write(source[1], b"first\n" + warning + b"last")
    os.close(source[1])
    forward(source[0], sink[1])  # closes both ends it was given
    assert os.read(sink[0], 1000) == b"first\nlast"
    os.close(sink[0])


def test_run_filtered_passes_the_exit_status_and_all_but_the_warning(capfd):
    script = f"echo '{WARNING}' >&2; echo out; echo err >&2; exit 3"
    assert run_filtered(["sh", "-c", script]) == 3
    captured = capfd.readouterr()
    assert captured.out == "out\n"
    assert captured.err == "err\n"


def test_beeline_connects_to_the_home_s_server_unless_given_a_url():
    url = "jdbc:hive2://127.0.0.1:10000/"
    assert beeline_args(["-e", "SELECT 1"], url) == ["-u", url, "-e", "SELECT 1"]
    assert beeline_args(["-u", "jdbc:hive2://h:1/", "-e", "SELECT 1"], url) == [
        "-u",
        "jdbc:hive2://h:1/",
        "-e",
        "SELECT 1",
    ]
    assert beeline_args(["--help"], None) == ["--help"]
    assert beeline_args(["-e", "SELECT 1"], None) is None
