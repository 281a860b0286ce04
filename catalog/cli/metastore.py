"""``statecat metastore [status|start|stop|conf]``: the shared metastore server of a statecat home.

Every statecat process starts the server when it needs it and the server stops itself when no
client has been connected for a while (see ``catalog.servers.metastore``); this command shows it, starts or stops
it by hand, and prints the Spark conf directory that makes plain Spark programs join it.
"""

from __future__ import annotations

import argparse
import sys

from statecat.catalog.cli.options import add_home_argument

HELP = "show, start or stop the home's shared metastore server"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        nargs="?",
        choices=("status", "start", "stop", "conf"),
        default="status",
        help="status (default); start; stop; conf: start it and print the Spark conf directory, "
        "for SPARK_CONF_DIR=$(statecat metastore conf) spark-sql",
    )
    add_home_argument(parser)


def run(args: argparse.Namespace) -> int:
    from statecat.catalog.servers import metastore
    from statecat.catalog.servers.sessions import resolve_home
    from statecat.statemeta.errors import StatecatError

    home = resolve_home(args.home)
    if home is None:
        raise StatecatError(
            "a hive-site.xml on Spark's conf path names the metastore; statecat does not run one",
            hint="Give --home or set STATECAT_HOME for statecat's own shared metastore",
        )
    out = sys.stdout
    if args.action == "stop":
        stopped = metastore.stop(home)
        out.write(f"stopped the metastore of {home}\n" if stopped else f"no metastore running for {home}\n")
        return 0
    server: metastore.MetastoreServer | None  # started here, else looked up below
    if args.action in ("start", "conf"):
        server = metastore.start(home)
        if args.action == "conf":
            out.write(metastore.write_client_conf(server) + "\n")
            return 0
    server = metastore.running(home)
    if server is None:
        out.write(f"no metastore running for {home} (statecat starts it when a command needs it)\n")
        return 0 if args.action == "status" else 1
    out.write(
        f"metastore of {home}: {server.uri} (pid {server.server_pid}), "
        f"{metastore.connected_clients(server.port)} connection(s), since {server.started_at}\n"
    )
    return 0
