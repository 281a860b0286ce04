"""``statecat spark-sql [ARGS...]``: Spark's own SQL shell on the home's catalog.

It is pyspark's ``spark-sql`` with the home's ``conf/`` (``SPARK_CONF_DIR``): the shared metastore,
statecat's data source (Spark's Python workers run this interpreter), pushdown, and logs that show
an error once. Arguments after the command go to ``spark-sql`` unchanged (``-e``, ``-f``, ``--conf``).
"""

from __future__ import annotations

import argparse
import os

from statecat.catalog.cli.options import add_home_argument

HELP = "Spark's SQL shell on the attached savepoints (shared catalog)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_home_argument(parser)
    # Parsed by cli.main: everything after statecat's own options (--home, --allow-root) goes to spark-sql.
    parser.set_defaults(passthrough=[])
    parser.usage = 'statecat spark-sql [--home DIR] [ARGS for spark-sql, e.g. -e "SELECT ..."]'


def spark_sql_command(args: list[str]) -> list[str]:
    import pyspark

    return [os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-sql"), *args]


def spark_sql_env(home: str, conf_dir: str) -> dict[str, str]:
    import sys

    env = dict(os.environ)
    env.update(
        SPARK_CONF_DIR=conf_dir, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, STATECAT_HOME=home
    )
    return env


def run(args: argparse.Namespace) -> int:
    from statecat.catalog.servers import metastore
    from statecat.catalog.servers.sessions import resolve_home
    from statecat.statemeta.errors import StatecatError

    home = resolve_home(args.home)
    if home is None:
        raise StatecatError(
            "a hive-site.xml on Spark's conf path names the metastore: run spark-sql itself",
            hint="Give --home or set STATECAT_HOME for statecat's own catalog",
        )
    conf_dir = metastore.write_client_conf(metastore.start(home))
    command = spark_sql_command(args.passthrough)
    os.execvpe(command[0], command, spark_sql_env(home, conf_dir))
