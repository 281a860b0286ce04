"""Spark's command-line tools from the pyspark wheel, and the JVMs statecat starts without the JDK's
"WARNING: Using incubator modules: jdk.incubator.vector".

pyspark ships ``spark-sql`` and ``beeline`` in its ``bin/``; ``tool_command`` and ``tool_env`` run
them with ``SPARK_HOME`` set, which they need to find Spark's jars when not started from an
activated virtualenv (pip's copies in the virtualenv's ``bin/`` look for a ``python3`` on PATH).

Spark's launcher gives every JVM it starts ``--add-modules=jdk.incubator.vector``
(``org.apache.spark.launcher.JavaModuleOptions``), and the JDK prints that warning on stderr for
it at startup; no JVM option turns the warning off. So statecat hands its JVMs a stderr that is a
pipe, and copies what comes through to its own stderr without that one line: for the JVM a Spark
session starts (``filtered_stderr`` around its launch) and for the tools it runs (``run_filtered``:
``statecat spark-sql``, ``statecat beeline``). Everything else the JVM writes passes unchanged and
at once (a partial line too, unless it may be the start of the warning).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from statecat.catalog.spark.extension import pyspark_home

INCUBATOR_WARNING = b"WARNING: Using incubator modules: "
_CHUNK = 1 << 16


def tool_command(tool: str, args: Sequence[str]) -> list[str]:
    """pyspark's ``bin/<tool>`` (``spark-sql``, ``beeline``) with ``args``."""
    return [os.path.join(pyspark_home(), "bin", tool), *args]


def tool_env(**settings: str) -> dict[str, str]:
    """This process's environment with ``SPARK_HOME`` (unless set) and ``settings``."""
    env = dict(os.environ)
    env.setdefault("SPARK_HOME", pyspark_home())
    env.update(settings)
    return env


def without_incubator_warning(pending: bytes, chunk: bytes, *, end: bool = False) -> tuple[bytes, bytes]:
    """``(text to pass on, text held back)`` after ``chunk`` arrived behind ``pending``: whole lines but
    the warning pass, and so does a partial last line unless it may still become the warning."""
    lines = (pending + chunk).split(b"\n")
    tail = lines.pop()
    passed = b"".join(line + b"\n" for line in lines if not line.startswith(INCUBATOR_WARNING))
    if tail and (end or not (tail.startswith(INCUBATOR_WARNING) or INCUBATOR_WARNING.startswith(tail))):
        if not tail.startswith(INCUBATOR_WARNING):
            passed += tail
        tail = b""
    return passed, tail


def forward(source: int, target: int) -> None:
    """Copies ``source`` to ``target`` (file descriptors) without the warning until ``source`` ends; then
    closes both. If ``target`` fails (a closed terminal), the rest is read and dropped, so that the
    writer never blocks on a full pipe."""
    pending = b""
    try:
        while True:
            chunk = os.read(source, _CHUNK)
            passed, pending = without_incubator_warning(pending, chunk, end=not chunk)
            if passed and target >= 0:
                try:
                    _write_all(target, passed)
                except OSError:
                    target = -1
            if not chunk:
                return
    finally:
        os.close(source)
        if target >= 0:
            os.close(target)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@contextlib.contextmanager
def filtered_stderr() -> Iterator[None]:
    """Processes started inside get a stderr that drops the warning, for as long as they run.

    Inside, file descriptor 2 is the write end of a pipe that a daemon thread copies to the real
    stderr; on leaving, this process gets its own stderr back and only the children keep the pipe.
    """
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all (a daemon): nothing to show, nothing to filter
        yield
        return
    read_end, write_end = os.pipe()
    thread = threading.Thread(target=forward, args=(read_end, os.dup(saved)), name="statecat-jvm-stderr", daemon=True)
    thread.start()
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def run_filtered(command: Sequence[str], env: dict[str, str] | None = None) -> int:
    """Runs ``command`` in the foreground with the warning dropped from its stderr; its exit status.

    Ctrl-C reaches the command from the terminal (spark-sql and beeline cancel a statement on it), so
    this process ignores it meanwhile; SIGTERM and SIGHUP sent to this process are passed on.
    """
    process = subprocess.Popen(list(command), env=env, stderr=subprocess.PIPE)
    assert process.stderr is not None

    def pass_on(signum: int, frame: Any) -> None:  # noqa: ARG001 - signal handler signature
        process.send_signal(signum)

    previous = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN)}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        previous[signum] = signal.signal(signum, pass_on)
    try:
        sys.stderr.flush()
        forward(os.dup(process.stderr.fileno()), os.dup(2))
        status = process.wait()
    finally:
        process.stderr.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 128 - status if status < 0 else status
