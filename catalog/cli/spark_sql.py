"""``statecat spark-sql [ARGS...]``: Spark's own SQL shell on the home's catalog.

It is pyspark's ``spark-sql`` with the home's ``conf/`` (``SPARK_CONF_DIR``): the shared metastore,
statecat's data source (Spark's Python workers run this interpreter), pushdown, and logs that show
an error once. Arguments after the command go to ``spark-sql`` unchanged (``-e``, ``-f``, ``--conf``).
"""

from __future__ import annotations

import argparse
import sys

from statecat.catalog.cli.options import add_home_argument

HELP = "Spark's SQL shell on the attached savepoints (shared catalog)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_home_argument(parser)
    # Parsed by cli.main: everything after statecat's own options (--home, --allow-root) goes to spark-sql.
    parser.set_defaults(passthrough=[])
    parser.usage = 'statecat spark-sql [--home DIR] [ARGS for spark-sql, e.g. -e "SELECT ..."]'


def run(args: argparse.Namespace) -> int:
    from statecat.catalog.servers import metastore
    from statecat.catalog.servers.sessions import resolve_home
    from statecat.catalog.servers.spark_tools import run_filtered, tool_command, tool_env
    from statecat.statemeta.errors import StatecatError

    home = resolve_home(args.home)
    if home is None:
        raise StatecatError(
            "a hive-site.xml on Spark's conf path names the metastore: run spark-sql itself",
            hint="Give --home or set STATECAT_HOME for statecat's own catalog",
        )
    conf_dir = metastore.write_client_conf(metastore.start(home))
    env = tool_env(
        SPARK_CONF_DIR=conf_dir, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, STATECAT_HOME=home
    )
    return run_filtered(tool_command("spark-sql", args.passthrough), env)
