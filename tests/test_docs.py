"""The documentation site's code runs: every fenced block in docs/ is run here, or says on the line
above it why it is not (`<!-- not run: REASON -->`), and the site builds without a warning.

Runnable blocks are ```python (run by this interpreter) and ```console blocks of `$ statecat ...`
commands, each followed by the output the page shows, if any; a command's real stdout must be that
output, modulo trailing whitespace. They run in a scratch directory that links the repository's
`tests/` and `sql_examples/`, so the pages' relative fixture paths work and what they write lands
in the scratch directory, with a statecat home of their own.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
NOT_RUN = re.compile(r"^\s*<!-- not run: (?P<reason>\S.*?) -->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<info>[\w-]*)\s*$")
RUNNABLE = ("python", "console")
# Commands that start Spark (20-40 s each): the pages may run only a few of them, the rest say why not.
MAX_SPARK_BLOCKS = 3
BLOCK_TIMEOUT = 300


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    info: str
    body: str
    not_run: str | None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def doc_blocks() -> list[Block]:
    blocks = []
    for path in sorted(DOCS.rglob("*.md")):
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            opening = FENCE.match(lines[i])
            if opening is None:
                i += 1
                continue
            indent = opening["indent"]
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            body = "\n".join(line.removeprefix(indent) for line in lines[i + 1 : end])
            marker = NOT_RUN.match(lines[i - 1]) if i > 0 else None
            page = str(path.relative_to(DOCS))
            blocks.append(Block(page, i + 1, opening["info"], body, marker["reason"] if marker else None))
            i = end + 1
    return blocks


@dataclass(frozen=True)
class Command:
    text: str
    expected: list[str]


def console_commands(body: str) -> list[Command]:
    """`$ ` lines (continued while a line ends in a backslash or a quote is open), each with the lines
    after it up to the next command as its expected output."""
    commands: list[Command] = []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            raise AssertionError(f"output before any command: {lines[i]!r}")
        text = lines[i][2:]
        while _incomplete(text):
            i += 1
            text += "\n" + lines[i]
        i += 1
        expected = []
        while i < len(lines) and not lines[i].startswith("$ "):
            expected.append(lines[i])
            i += 1
        commands.append(Command(text, expected))
    return commands


def _incomplete(text: str) -> bool:
    if text.endswith("\\"):
        return True
    try:
        shlex.split(text, comments=True)
    except ValueError:  # a quote still open: the command goes on on the next line
        return True
    return False


def starts_spark(block: Block) -> bool:
    if block.info != "console":
        return False
    for command in console_commands(block.body):
        words = shlex.split(command.text, comments=True)
        if words[1] in ("sql", "serve", "spark-sql", "beeline"):
            return True
        if words[1] == "write" and "--sql" in words:
            return True
        if words[1] == "materialize" and "spark" in words:
            return True
    return False


BLOCKS = doc_blocks()
RUN_BLOCKS = [
    pytest.param(block, id=block.id, marks=[pytest.mark.spark] if starts_spark(block) else [])
    for block in BLOCKS
    if block.not_run is None
]


def test_every_block_runs_or_says_why():
    assert BLOCKS, "no code blocks found under docs/"
    problems = []
    for block in BLOCKS:
        if block.not_run is not None:
            continue
        if block.info not in RUNNABLE:
            problems.append(f"{block.id}: a ```{block.info or '(no language)'} block needs <!-- not run: REASON -->")
        elif block.info == "console":
            for command in console_commands(block.body):
                if not command.text.startswith("statecat "):
                    problems.append(f"{block.id}: only `$ statecat ...` commands run: {command.text!r}")
    assert not problems, "\n".join(problems)
    spark_blocks = [block.id for block in BLOCKS if block.not_run is None and starts_spark(block)]
    assert len(spark_blocks) <= MAX_SPARK_BLOCKS, f"blocks that start Spark: {spark_blocks}"


@pytest.fixture
def workspace(tmp_path):
    for name in ("tests", "sql_examples"):
        (tmp_path / name).symlink_to(REPO / name, target_is_directory=True)
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["STATECAT_HOME"] = str(tmp_path / "statecat-home")
    env["MPLBACKEND"] = "Agg"
    return tmp_path, env


@pytest.mark.parametrize("block", RUN_BLOCKS)
def test_block_runs(block, workspace):
    cwd, env = workspace
    if block.info == "python":
        done = _run([sys.executable, "-c", block.body], cwd, env)
        assert done.returncode == 0, f"{block.id} failed:\n{done.stderr}"
        return
    for command in console_commands(block.body):
        done = _run(["bash", "-c", command.text], cwd, env)
        assert done.returncode == 0, f"{block.id}: `{command.text}` exited {done.returncode}:\n{done.stderr}"
        if command.expected:
            shown = [line.rstrip() for line in command.expected]
            assert [line.rstrip() for line in done.stdout.splitlines()] == shown, f"{block.id}: `{command.text}`"


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT)


def test_site_builds_without_warnings(tmp_path):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    mkdocs = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")]
    done = subprocess.run(mkdocs, cwd=REPO, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()
