"""``statecat serve [ROOT...]``: a JDBC/ODBC endpoint (Spark's Thrift server) and a Spark Connect
endpoint over the home's savepoints.

Dashboards and BI tools connect with Hive's JDBC driver or an ODBC driver for Spark/Hive, e.g.
``statecat beeline -u jdbc:hive2://127.0.0.1:10000/``; notebooks with Spark Connect
(``SparkSession.builder.remote("sc://127.0.0.1:15002")``, or ``statecat.catalog.session()``);
``statecat sql`` on the same home uses the server too. See ``catalog.servers.thrift_server``.
"""

from __future__ import annotations

import argparse
import logging

from statecat.catalog.cli.options import add_home_argument
from statecat.catalog.servers.thrift_server import (
    AUTH_MODES,
    DEFAULT_BIND,
    DEFAULT_CONNECT_PORT,
    DEFAULT_POLL_SECONDS,
    DEFAULT_PORT,
)

HELP = "serve the savepoint databases over JDBC/ODBC (Spark's Thrift server) and Spark Connect"
DESCRIPTION = (
    "Attaches the savepoints under the roots (and each new one once it is complete) and serves "
    "the home's catalog over the HiveServer2 protocol and Spark Connect until SIGTERM or Ctrl-C."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "roots",
        nargs="*",
        metavar="ROOT",
        help="savepoint directories, or directories holding savepoints, to attach and watch",
    )
    parser.add_argument(
        "--bind",
        default=DEFAULT_BIND,
        help=f"address to listen on (default {DEFAULT_BIND}); any other than loopback needs --auth",
    )
    parser.add_argument("--port", type=port_number, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument(
        "--connect-port",
        type=connect_port_number,
        default=DEFAULT_CONNECT_PORT,
        metavar="PORT",
        help=f"Spark Connect port (default {DEFAULT_CONNECT_PORT}); 0 serves JDBC only",
    )
    parser.add_argument(
        "--idle-timeout",
        type=positive_seconds,
        default=None,
        metavar="SECONDS",
        help="stop after this many seconds without a JDBC or Spark Connect client (default: never)",
    )
    parser.add_argument(
        "--poll",
        type=float,
        default=DEFAULT_POLL_SECONDS,
        metavar="SECONDS",
        help=f"seconds between looks for new savepoints (default {DEFAULT_POLL_SECONDS:g})",
    )
    parser.add_argument(
        "--auth",
        choices=AUTH_MODES,
        default=None,
        help="HiveServer2 authentication (hive.server2.authentication); default none on loopback. "
        "ldap, kerberos, custom and pam take their settings through --hiveconf",
    )
    parser.add_argument(
        "--hiveconf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a HiveServer2 setting, e.g. hive.server2.authentication.ldap.url=ldap://... (repeatable)",
    )
    add_home_argument(parser)


def port_number(text: str) -> int:
    """``--port N``: a TCP port a client can be told, 1 to 65535."""
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"expected a port between 1 and 65535, got {text!r}")
    return port


def connect_port_number(text: str) -> int:
    """``--connect-port N``: a port, or 0 for none."""
    return 0 if text.strip() == "0" else port_number(text)


def positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return seconds


def run(args: argparse.Namespace) -> int:
    from statecat.catalog.servers.thrift_server import check_exposure, parse_hiveconf, serve

    check_exposure(args.bind, args.auth, args.connect_port)  # before anything slow
    hiveconf = parse_hiveconf(args.hiveconf)
    # statecat's own loggers only: Py4J and Spark's Python side stay at their levels.
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s statecat serve: %(message)s"))
    statecat_log = logging.getLogger("statecat")
    statecat_log.addHandler(handler)
    statecat_log.setLevel(logging.INFO)
    return serve(
        home=args.home,
        roots=args.roots,
        bind=args.bind,
        port=args.port,
        poll_seconds=args.poll,
        auth=args.auth,
        hiveconf=hiveconf,
        connect_port=args.connect_port,
        idle_timeout=args.idle_timeout,
    )
