"""Time to the first answer, and memory: one home server for every client against a Spark session each.

    .venv/bin/python bench/first_answer.py [--clients 3] [--repeat 5]

On the bundled example (the savepoint and query of the README's main command, ``.ci/example``), in
a fresh statecat home under a scratch directory, prints one line per figure and then the ratios:

- ``statecat sql --attach EXAMPLE QUERY`` cold (no server: it starts the home's server in the
  background, and the home's metastore), then warm (the server running; median of ``--repeat``),
  and ``statecat sql --local`` (a Spark session of its own in the command's process);
- a notebook-like client (a fresh Python process: ``import statecat.catalog``, a session, the
  query, rows back; timed inside it from before the import): a Spark Connect client of the running
  server (``statecat.catalog.session()``) against a local session of its own
  (``statecat.catalog.servers.sessions.session``), ``--clients`` of each, median;
- memory (VmRSS summed over the process tree, from /proc) of the server with ``--clients`` Connect
  clients open at once and of those clients, against ``--clients`` local sessions, measured one at
  a time (each client after its answer, with its JVM and Python workers) and summed as if they ran
  together. The home's metastore serves both setups and is printed apart.

It starts several Spark JVMs one after another: run it alone on the machine (other benchmarks take
/tmp/statecat-heavy.lock with ``flock``). Everything it starts is stopped, its scratch directory removed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fixtures.expected import iter_states, load_expected  # noqa: E402

CASE = "sql_groupby_hashmap_2.3"
EXAMPLE = REPO / "tests" / "fixtures" / "cases" / CASE  # what .ci/example attaches
KEY = "key_662"
QUERY = "SELECT key, value.f0 AS count, value.f1 AS total FROM sql_groupby_hashmap_2_3.accstate WHERE key = 'key_662'"
TIMEOUT = 900

# A notebook's first cell, in a fresh process: prints {"seconds", "rows"} once answered, then
# stays (its session open) until its stdin closes, so that its memory can be read.
CLIENT = """
import time
started = time.perf_counter()
import json, sys
import statecat.catalog
if sys.argv[1] == "connect":
    spark = statecat.catalog.session()
else:
    from statecat.catalog.servers.sessions import session
    spark = session(quiet=True)
rows = [list(row) for row in statecat.catalog.sql(spark, sys.argv[2]).collect()]
print(json.dumps({"seconds": time.perf_counter() - started, "rows": rows}), flush=True)
sys.stdin.read()
spark.stop()
"""


def expected_row() -> list:
    state = next(st for _, st in iter_states(load_expected(CASE)) if st["name"] == "accState")
    value = next(row["value"] for row in state["rows"] if row["key"] == KEY)
    return [KEY, value["f0"], value["f1"]]


def statecat(home: Path, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    command = [sys.executable, "-m", "statecat.catalog.cli", "sql", "--home", str(home), "--format", "csv", *args]
    started = time.perf_counter()
    done = subprocess.run(command, env=env(home), capture_output=True, text=True, timeout=TIMEOUT, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"statecat sql {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds, done


def env(home: Path) -> dict[str, str]:
    return dict(os.environ, STATECAT_HOME=str(home), PYSPARK_PYTHON=sys.executable)


def answered(done: subprocess.CompletedProcess) -> list:
    """The csv answer's one row, typed like expected_row()."""
    key, count, total = done.stdout.splitlines()[-1].split(",")
    return [key, int(count), int(total)]


class Client:
    """A notebook-like client process, alive (session open) until closed."""

    def __init__(self, kind: str, home: Path):
        self.process = subprocess.Popen(
            [sys.executable, "-c", CLIENT, kind, QUERY],
            env=env(home),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = self.process.stdout.readline() if self.process.stdout else ""
        if not line:
            raise SystemExit(f"the {kind} client exited {self.process.wait()} without an answer")
        answer = json.loads(line)
        self.seconds, self.rows = answer["seconds"], answer["rows"]

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        try:
            self.process.wait(120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# --------------------------------------------------------------------------- memory from /proc


def children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited while listed
            continue
        tree.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return tree


def rss_mb(pid: int) -> float:
    """VmRSS of the process and all its descendants, in MB."""
    tree = children()
    total_kb, pending = 0, [pid]
    while pending:
        current = pending.pop()
        pending += tree.get(current, [])
        try:
            status = Path(f"/proc/{current}/status").read_text()
        except OSError:
            continue
        total_kb += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total_kb / 1024


def wait_group_gone(pgid: int, timeout: float = 60.0) -> None:
    """Waits for the process group (a server started in a session of its own) to exit."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        members = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                members.append(stat)
        if not members:
            return
        time.sleep(0.2)


# --------------------------------------------------------------------------- the figures


def median(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float]) -> str:
    return f"[{min(values):.2f} .. {max(values):.2f} s]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=3, help="notebook-like clients of each kind (default 3)")
    parser.add_argument("--repeat", type=int, default=5, help="warm `statecat sql` runs (default 5)")
    args = parser.parse_args()

    from statecat.catalog.servers import metastore
    from statecat.catalog.servers.home_server import stop_server
    from statecat.catalog.servers.thrift_server import read_server_info

    scratch = Path(tempfile.mkdtemp(prefix="statecat-first-answer-"))
    home = scratch / "home"
    expected = expected_row()
    wrong: list[str] = []
    clients: list[Client] = []
    try:
        print(f"example: {EXAMPLE.relative_to(REPO)} ({os.cpu_count()} cores); query: {QUERY}")
        cold, done = statecat(home, "--attach", str(EXAMPLE), QUERY)
        server = read_server_info(str(home))
        if server is None:
            raise SystemExit("statecat sql answered but no server runs on the home")
        if answered(done) != expected:
            wrong.append(f"statecat sql cold: {done.stdout!r}")
        print(f"statecat sql, cold (starts the home's server and metastore): {cold:.2f} s")

        warm = []
        for _ in range(args.repeat):
            seconds, done = statecat(home, "--attach", str(EXAMPLE), QUERY)
            warm.append(seconds)
            if answered(done) != expected:
                wrong.append(f"statecat sql warm: {done.stdout!r}")
        print(f"statecat sql, warm (server running): {median(warm):.2f} s median of {args.repeat} {spread(warm)}")

        local_sql, done = statecat(home, "--local", "--attach", str(EXAMPLE), QUERY)
        if answered(done) != expected:
            wrong.append(f"statecat sql --local: {done.stdout!r}")
        print(f"statecat sql --local (a Spark session of its own): {local_sql:.2f} s")

        for _ in range(args.clients):  # all open at once, as notebooks stay open
            clients.append(Client("connect", home))
        connect_seconds = [c.seconds for c in clients]
        connect_clients_mb = [rss_mb(c.process.pid) for c in clients]
        server_mb = rss_mb(server.pid)
        wrong += [f"Connect client: {c.rows}" for c in clients if c.rows != [expected]]
        for client in clients:
            client.close()
        clients.clear()
        print(
            f"notebook-like client, Spark Connect to the running server: first answer {median(connect_seconds):.2f} s "
            f"median of {args.clients} {spread(connect_seconds)}"
        )

        local_seconds, local_mb = [], []
        for _ in range(args.clients):  # one at a time: each is a JVM of its own
            client = Client("local", home)
            clients.append(client)
            local_seconds.append(client.seconds)
            local_mb.append(rss_mb(client.process.pid))
            if client.rows != [expected]:
                wrong.append(f"local session: {client.rows}")
            client.close()
            clients.clear()
        print(
            f"notebook-like client, a local session of its own: first answer {median(local_seconds):.2f} s "
            f"median of {args.clients} {spread(local_seconds)}"
        )

        running_metastore = metastore.running(str(home))
        print(f"memory: the server (Python, JVM, workers) with {args.clients} Connect clients open: {server_mb:.0f} MB")
        print(
            f"memory: a Connect client process: {median(connect_clients_mb):.0f} MB median "
            f"({', '.join(f'{mb:.0f}' for mb in connect_clients_mb)})"
        )
        print(
            f"memory: a local session (Python, JVM, workers), after its answer: {median(local_mb):.0f} MB median "
            f"({', '.join(f'{mb:.0f}' for mb in local_mb)})"
        )
        shared = server_mb + sum(connect_clients_mb)
        separate = sum(local_mb)
        print(f"memory: 1 server + {args.clients} Connect clients: {shared:.0f} MB")
        print(f"memory: {args.clients} local sessions (measured one at a time, summed): {separate:.0f} MB")
        if running_metastore is not None:
            metastore_mb = rss_mb(running_metastore.supervisor_pid)
            print(f"memory: the home's metastore (both setups use it; not counted): {metastore_mb:.0f} MB")

        print(f"ratio: statecat sql cold / warm: {cold / median(warm):.1f}x")
        print(f"ratio: statecat sql --local / warm: {local_sql / median(warm):.1f}x")
        print(
            f"ratio: first answer, local session / Connect client: {median(local_seconds) / median(connect_seconds):.1f}x"
        )
        print(
            f"ratio: memory, {args.clients} local sessions / (1 server + {args.clients} Connect clients): "
            f"{separate / shared:.2f}x; per extra client, local session / Connect client: "
            f"{median(local_mb) / median(connect_clients_mb):.1f}x"
        )
        print(f"answers agree with expected.json ({expected}): {'yes' if not wrong else 'NO: ' + '; '.join(wrong)}")
    finally:
        for client in clients:
            client.close()
        started = read_server_info(str(home))
        stop_server(str(home))
        if started is not None:
            wait_group_gone(started.pid)  # its JVM deletes Spark's temp files on the way out
        metastore.stop(str(home))
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
