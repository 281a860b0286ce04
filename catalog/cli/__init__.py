"""The ``statecat`` command: this package holds the dispatcher and one module per command.

Each command module (``inspect.py``, ``read.py``, ``spark_sql.py`` for ``spark-sql``, ...) has
``HELP`` (its line in ``statecat --help``), optionally ``DESCRIPTION``, ``add_arguments(parser)`` and
``run(args) -> int``; ``COMMANDS`` lists them in help order. What
several commands share lives in ``options.py`` (arguments) and ``output.py`` (tables, CSV, JSON).

The CLI is the top of the house: it may import every other part of statecat (``statemeta``,
``readers``, ``catalog.spark``, ``catalog.servers``, ``catalog.lake``, ``catalog.report``), and
nothing imports it. Only the command being run is imported, and Spark inside its ``run`` only, so
that a mistake in the arguments answers at once; commands that start Spark check their paths,
names and options before they do.

Errors statecat raises on purpose (``StatecatError``) and errors Spark reports for a query or a
savepoint (see ``catalog.spark.errors``) print as one line on stderr with exit code 2; a write that
SIGINT or SIGTERM stopped (``Interrupted``) prints one line and exits 130 or 143; nothing else is
caught, so a bug still shows its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType

from statecat.catalog.spark.errors import spark_error_message, spark_error_types
from statecat.statemeta.errors import Interrupted, StatecatError

COMMANDS = [
    "inspect",
    "read",
    "key",
    "history",
    "diff",
    "write",
    "report",
    "snapshot",
    "watch",
    "savepoint",
    "attach",
    "detach",
    "relocate",
    "sql",
    "serve",
    "spark-sql",
    "beeline",
    "metastore",
    "materialize",
]
EXIT_USER_ERROR = 2


def _command_module(name: str) -> ModuleType:
    return importlib.import_module(f"statecat.catalog.cli.{name.replace('-', '_')}")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; given ``command``, only that command's module is imported.

    The others are bare choices then: their modules import pyarrow, numba or Spark's helpers, and a
    mistake in the arguments of one command should answer at once (``statecat --help`` imports all).
    """
    from statecat import __version__

    parser = argparse.ArgumentParser(prog="statecat", description="Apache Flink savepoints as SQL databases, on Spark.")
    parser.add_argument("--version", action="version", version=f"statecat {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        if command is not None and name != command:
            subparsers.add_parser(name)
            continue
        module = _command_module(name)
        sub = subparsers.add_parser(name, help=module.HELP, description=getattr(module, "DESCRIPTION", None))
        module.add_arguments(sub)
        sub.add_argument(
            "--allow-root",
            action="append",
            default=[],
            metavar="DIR",
            help="also read state files under DIR (repeatable); by default a snapshot's handles may "
            "only name files inside its own directory (or, for chk-N, its job directory)",
        )
        sub.set_defaults(run=module.run)
    return parser


# Commands that hand their arguments on to another program: statecat's own options come first.
PASSTHROUGH_COMMANDS = {"spark-sql", "beeline"}
_OPTIONS_WITH_VALUE = ("--home", "--allow-root")


def _command_word(argv: list[str]) -> int | None:
    """Where the command is in ``argv``: the first word that is not an option (``statecat`` itself has
    no option that takes a value)."""
    return next((i for i, a in enumerate(argv) if not a.startswith("-")), None)


def _split_passthrough(argv: list[str]) -> tuple[list[str], list[str] | None]:
    command = _command_word(argv)
    if command is None or argv[command] not in PASSTHROUGH_COMMANDS:
        return argv, None
    i = command + 1
    while i < len(argv):
        if argv[i] in _OPTIONS_WITH_VALUE and i + 1 < len(argv):
            i += 2
        elif argv[i].split("=", 1)[0] in _OPTIONS_WITH_VALUE and "=" in argv[i]:
            i += 1
        else:
            break
    rest = argv[i:]
    return argv[:i], rest[1:] if rest[:1] == ["--"] else rest


def main(argv: list[str] | None = None) -> int:
    argv, passthrough = _split_passthrough(sys.argv[1:] if argv is None else list(argv))
    at = _command_word(argv)
    # An unknown word imports no command module: argparse lists the choices.
    command = None if at is None else argv[at] if argv[at] in COMMANDS else ""
    args = build_parser(command).parse_args(argv)
    if passthrough is not None:
        args.passthrough = passthrough
    try:
        if args.allow_root:
            from statecat.statemeta.files.storage import allow_roots_for_process  # pyarrow: only when needed

            # Through the environment the roots also reach Spark's Python workers started later.
            allow_roots_for_process(args.allow_root)
        return args.run(args) or 0
    except StatecatError as exc:
        print(f"statecat: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except spark_error_types() as exc:  # evaluated only when an exception gets here
        message = spark_error_message(exc)
        if message is None:
            raise
        print(f"statecat: error: {message}", file=sys.stderr)
        return EXIT_USER_ERROR
    except BrokenPipeError:
        return 0
    except Interrupted as exc:  # SIGINT or SIGTERM during a write: its message says what is left
        print(f"statecat: {exc.message}", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        return 130
