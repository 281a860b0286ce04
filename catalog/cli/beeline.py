"""``statecat beeline [ARGS...]``: Hive's beeline (shipped in pyspark) on the home's ``statecat serve``.

pyspark's ``bin/beeline`` needs ``SPARK_HOME`` to find its jars, which a shell outside the
virtualenv does not have; this runs it with ``SPARK_HOME`` set, from any shell. Without ``-u``
it connects to the server running on the home (``HOME/serve.json``). Arguments after the command
go to beeline unchanged (``-u URL``, ``-e "SQL"``, ``-f FILE``, ``--outputformat=csv2``).
"""

from __future__ import annotations

import argparse

from statecat.catalog.cli.options import add_home_argument

HELP = "Hive's beeline client on the home's `statecat serve` (or -u URL)"

_URL_OPTIONS = ("-u", "--url")
_HELP_OPTIONS = ("-h", "--help")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_home_argument(parser)
    # Parsed by cli.main: everything after statecat's own options (--home, --allow-root) goes to beeline.
    parser.set_defaults(passthrough=[])
    parser.usage = 'statecat beeline [--home DIR] [ARGS for beeline, e.g. -e "SELECT ..."]'


def beeline_args(args: list[str], server_url: str | None) -> list[str] | None:
    """``args`` with ``-u`` of the home's server when they name no URL; None when one is needed and
    no server runs."""
    if any(a in _URL_OPTIONS or a.startswith("--url=") for a in args) or any(a in _HELP_OPTIONS for a in args):
        return args
    return None if server_url is None else ["-u", server_url, *args]


def run(args: argparse.Namespace) -> int:
    from statecat.catalog.servers.spark_tools import run_filtered, tool_command, tool_env
    from statecat.catalog.servers.thrift_server import live_server, serve_home
    from statecat.statemeta.errors import StatecatError

    home = serve_home(args.home)
    server = live_server(home)
    command = beeline_args(args.passthrough, server.local_url if server is not None else None)
    if command is None:
        raise StatecatError(
            f"no `statecat serve` runs on the home {home}",
            hint="Start one (`statecat serve ROOT`), give the home it runs on (--home DIR), "
            "or give the server's URL (-u jdbc:hive2://HOST:PORT/)",
        )
    return run_filtered(tool_command("beeline", command), tool_env())
