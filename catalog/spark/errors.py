"""Errors from Spark's JVM as the one line the CLI prints.

A query Spark rejects (analysis, parsing), a savepoint a read finds damaged (statecat's own error,
raised in a Python worker) and a failure inside Spark itself (a Java exception Py4J hands back) are
the user's to act on. A Python exception in a worker that is not statecat's own is a bug and keeps
its traceback.
"""

from __future__ import annotations

import sys

QUERY_ERROR_MARKER = "StatecatQueryError: "  # source.py's error, as it reaches the driver in a worker's traceback


def spark_error_types() -> tuple[type[BaseException], ...]:
    """The exception types a Spark call raises for a JVM-side error; none until Spark was imported."""
    types: list[type[BaseException]] = []
    if "pyspark.errors" in sys.modules:
        from pyspark.errors.exceptions.captured import CapturedException

        types.append(CapturedException)
    if "pyspark.errors.exceptions.connect" in sys.modules:  # a Spark Connect client's errors
        from pyspark.errors.exceptions.connect import SparkConnectException

        types.append(SparkConnectException)
    if "py4j.protocol" in sys.modules:
        from py4j.protocol import Py4JJavaError

        types.append(Py4JJavaError)
    return tuple(types)


def spark_error_message(exc: BaseException) -> str | None:
    """The line of a Spark error a user acts on: statecat's own message when a read failed, else Spark's.

    None for a worker's Python exception that is not statecat's: a bug, to be shown whole.
    """
    text = str(exc)
    if QUERY_ERROR_MARKER in text:
        return text[text.rindex(QUERY_ERROR_MARKER) + len(QUERY_ERROR_MARKER) :].splitlines()[0].strip()
    if type(exc).__name__ == "PythonException":
        return None
    java = getattr(exc, "java_exception", None)
    if java is not None and not hasattr(exc, "getCondition"):  # a Py4JJavaError: Spark did not convert it
        try:
            text = str(java.toString())
        except Exception:  # noqa: BLE001 - the JVM is gone; Py4J's own text still names the call
            pass
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("\tat ")]
    return lines[0].lstrip(": ") if lines else type(exc).__name__
