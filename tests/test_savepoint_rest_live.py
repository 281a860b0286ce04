"""`statecat savepoint --rest` against a real standalone Flink cluster (PyFlink's distribution).

Starts JobManager + TaskManager with start-cluster.sh on loopback (free ports, everything in a tmp
dir), submits a PyFlink DataStream job in the default `process` mode whose keyed states are all
`python-state-*` byte arrays, waits (REST metrics) until it has processed its whole input, takes
a savepoint with `statecat savepoint --rest ... --descriptors FILE` (the descriptor file written
by the job itself with statecat's PyFlink helper) and reads the states back, typed and under their
declared names, through the savepoint's stateInfo. The cluster is always stopped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from statecat.catalog.cli import main as cli_main
from statecat.catalog.render import json_value
from statecat.readers import SavepointReader
from statecat.statemeta.snapshotter.stateinfo import STATE_INFO_FILE

pytestmark = pytest.mark.live_flink

VENV = Path(os.environ.get("STATECAT_PYFLINK_VENV_2_3", Path.home() / ".cache/statecat/pyflink-2.3.0"))
PYTHON = VENV / "bin" / "python"
KEYS = 20
RECORDS_PER_KEY = 3
START_TIMEOUT = 120
SUBMIT_TIMEOUT = 240
PROCESS_TIMEOUT = 180


def _pyflink_home() -> Path | None:
    found = list(VENV.glob("lib/python3*/site-packages/pyflink"))
    return found[0] if found and (found[0] / "bin" / "start-cluster.sh").exists() else None


JOB = r'''
"""Keyed PyFlink job, process mode: every state a python-state-* byte array in Java."""
import sys
sys.path.append(sys.argv[3])  # statecat's site-packages, for its descriptor-file helper only
from pyflink.common import Duration, Types, WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.file_system import FileSource, StreamFormat
from pyflink.datastream.functions import KeyedProcessFunction
from pyflink.datastream.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from statecat.statemeta.descriptors import write_descriptor_file

TOTAL = ValueStateDescriptor("total_amount", Types.LONG())
ITEMS = ListStateDescriptor("items", Types.STRING())
PER_TAG = MapStateDescriptor("per_tag", Types.STRING(), Types.LONG())
LAST = ValueStateDescriptor("last", Types.ROW_NAMED(["tag", "v"], [Types.STRING(), Types.LONG()]))
INFO = ValueStateDescriptor("info", Types.PICKLED_BYTE_ARRAY())


class Fn(KeyedProcessFunction):
    def open(self, ctx):
        self.total = ctx.get_state(TOTAL)
        self.items = ctx.get_list_state(ITEMS)
        self.per_tag = ctx.get_map_state(PER_TAG)
        self.last = ctx.get_state(LAST)
        self.info = ctx.get_state(INFO)

    def process_element(self, value, ctx):
        from pyflink.common import Row
        _, v, tag = value
        self.total.update((self.total.value() or 0) + v)
        self.items.add(f"{tag}:{v}")
        self.per_tag.put(tag, (self.per_tag.get(tag) or 0) + v)
        self.last.update(Row(tag=tag, v=v))
        self.info.update({"n": v})
        yield value[0]


def parse(line):
    k, v, tag = line.split(",")
    return k, int(v), tag


write_descriptor_file(sys.argv[2], {"stateful-fn": [TOTAL, ITEMS, PER_TAG, LAST, INFO]})
env = StreamExecutionEnvironment.get_execution_environment()
source = (FileSource.for_record_stream_format(StreamFormat.text_line_format(), sys.argv[1])
          .monitor_continuously(Duration.of_seconds(1)).build())
(env.from_source(source, WatermarkStrategy.no_watermarks(), "lines").uid("lines")
    .map(parse, output_type=Types.TUPLE([Types.STRING(), Types.LONG(), Types.STRING()])).uid("parse")
    .key_by(lambda r: r[0], key_type=Types.STRING())
    .process(Fn(), output_type=Types.STRING()).uid("stateful-fn").name("stateful-fn")
    .print())
env.execute_async("statecat-rest-test")
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def _wait(cond, timeout: float, what: str, interval: float = 0.5):
    """Polls a real condition until it holds (returns its value) or the timeout passes."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except OSError as exc:  # REST endpoint not up yet
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def _input_rows():
    rows = []
    for r in range(RECORDS_PER_KEY):
        for k in range(KEYS):
            rows.append((f"k{k}", k * 10 + r, f"t{(k + r) % 2}"))
    return rows


class Cluster:
    def __init__(self, home: Path, work: Path):
        self.home = home
        self.work = work
        self.conf = work / "conf"
        self.rest_port = _free_port()
        self.url = f"http://127.0.0.1:{self.rest_port}"
        self.env = dict(
            os.environ,
            FLINK_CONF_DIR=str(self.conf),
            FLINK_LOG_DIR=str(work / "log"),
            FLINK_PID_DIR=str(work / "pid"),
            TMPDIR=str(work / "tmp"),
        )
        self.env.pop("FLINK_HOME", None)
        if not self.env.get("JAVA_HOME") and shutil.which("java"):
            self.env["JAVA_HOME"] = str(Path(os.path.realpath(shutil.which("java"))).parents[1])

    def configure(self):
        shutil.copytree(self.home / "conf", self.conf)
        original = (self.home / "conf" / "config.yaml").read_text()
        java_opts = re.search(r"^\s+all:\s*(.+)$", original, re.M).group(1).strip()
        for d in ("log", "pid", "tmp", "io", "web"):
            (self.work / d).mkdir()
        conf = {
            "env.java.opts.all": java_opts,
            "env.pid.dir": str(self.work / "pid"),
            "jobmanager.rpc.address": "localhost",
            "jobmanager.rpc.port": _free_port(),
            "jobmanager.bind-host": "localhost",
            "jobmanager.memory.process.size": "1024m",
            "taskmanager.host": "localhost",
            "taskmanager.bind-host": "localhost",
            "taskmanager.memory.process.size": "1536m",
            "taskmanager.numberOfTaskSlots": 1,
            "parallelism.default": 1,
            "rest.address": "127.0.0.1",
            "rest.bind-address": "127.0.0.1",
            "rest.port": self.rest_port,
            "metrics.fetcher.update-interval": 200,
            "state.backend.type": "hashmap",
            "execution.checkpointing.dir": f"file://{self.work}/checkpoints",
            "execution.checkpointing.savepoint-dir": f"file://{self.work}/savepoints",
            # periodic retained checkpoints (chk-N) for the watcher test
            "execution.checkpointing.interval": "2 s",
            "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
            "io.tmp.dirs": str(self.work / "io"),
            "web.tmpdir": str(self.work / "web"),
            "python.executable": str(PYTHON),
            "python.client.executable": str(PYTHON),
        }
        (self.conf / "config.yaml").write_text("".join(f"{k}: {v}\n" for k, v in conf.items()))
        (self.conf / "workers").write_text("localhost\n")
        (self.conf / "masters").write_text(f"localhost:{self.rest_port}\n")

    def start(self):
        subprocess.run(
            ["bash", str(self.home / "bin" / "start-cluster.sh")],
            env=self.env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=START_TIMEOUT,
        )
        _wait(lambda: _get(f"{self.url}/taskmanagers")["taskmanagers"], START_TIMEOUT, "a registered TaskManager")

    def pids(self) -> list[int]:
        pids = []
        for f in (self.work / "pid").glob("*.pid"):
            pids += [int(p) for p in f.read_text().split() if p.strip().isdigit()]
        return pids

    def stop(self):
        pids = self.pids()
        # A TaskManager's Python workers (beam_boot and its tee) can outlive it, orphaned.
        started = _descendants(pids)
        try:
            subprocess.run(
                ["bash", str(self.home / "bin" / "stop-cluster.sh")],
                env=self.env,
                timeout=120,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            pass
        # Only the daemons this test started (their pid files live in our own pid dir).
        deadline = time.monotonic() + 60
        for pid in pids:
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        for pid, start in started:
            stat = _stat(pid)
            if stat is not None and stat[1] == start and _alive(pid):
                os.kill(pid, signal.SIGKILL)

    def log_tail(self) -> str:
        out = []
        for f in sorted((self.work / "log").glob("*")):
            lines = f.read_text(errors="replace").splitlines()
            hits = [ln for ln in lines if "Exception" in ln or "ERROR" in ln][:10]
            out.append(f"--- {f.name}\n" + "\n".join(hits + lines[-15:]))
        return "\n".join(out)


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of a process, None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _descendants(roots: list[int]) -> list[tuple[int, int]]:
    """(pid, start time) of every live process below ``roots`` (from /proc, so Linux only); the
    start time tells a pid reused later apart."""
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in Path("/proc").iterdir():
        stat = _stat(int(entry.name)) if entry.name.isdigit() else None
        if stat is not None:
            children.setdefault(stat[0], []).append((int(entry.name), stat[1]))
    found, frontier = [], list(roots)
    while frontier:
        below = [child for pid in frontier for child in children.get(pid, [])]
        found += below
        frontier = [pid for pid, _ in below]
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def cluster():
    home = _pyflink_home()
    if home is None or not PYTHON.exists() or shutil.which("java") is None:
        pytest.skip(f"needs Java and the PyFlink 2.3 distribution in {VENV}")
    work = Path(tempfile.mkdtemp(prefix="statecat-rest-"))
    c = Cluster(home, work)
    try:
        c.configure()
        c.start()
        yield c
    except Exception:
        print(c.log_tail(), file=sys.stderr)
        raise
    finally:
        c.stop()
        shutil.rmtree(work, ignore_errors=True)


def _submit(cluster: Cluster) -> tuple[str, Path]:
    work = cluster.work
    (work / "input").mkdir()
    rows = _input_rows()
    (work / "input" / "part-0.csv").write_text("".join(f"{k},{v},{t}\n" for k, v, t in rows))
    (work / "job.py").write_text(JOB)
    descriptors = work / "descriptors.json"
    statecat_site = sysconfig.get_paths()["purelib"]
    proc = subprocess.run(
        [
            "bash",
            str(cluster.home / "bin" / "flink"),
            "run",
            "-d",
            "-py",
            str(work / "job.py"),
            str(work / "input"),
            str(descriptors),
            statecat_site,
        ],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=SUBMIT_TIMEOUT,
        cwd=work,
    )
    found = re.search(r"JobID ([0-9a-f]{32})", proc.stdout + proc.stderr)
    assert found, f"job submission failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return found.group(1), descriptors


def _records_in(cluster: Cluster, job_id: str) -> int:
    job = _get(f"{cluster.url}/jobs/{job_id}")
    if job["state"] in ("FAILED", "CANCELED", "FINISHED"):
        raise AssertionError(f"job is {job['state']}:\n{cluster.log_tail()}")
    vertex = next(v for v in job["vertices"] if "stateful-fn" in v["name"])
    rows = _get(f"{cluster.url}/jobs/{job_id}/vertices/{vertex['id']}/subtasks/metrics?get=numRecordsIn&agg=sum")
    return int(float(rows[0]["sum"])) if rows else 0


@pytest.fixture(scope="module")
def job(cluster):
    """The stateful job, submitted once, with all its input processed."""
    job_id, descriptors = _submit(cluster)
    total = KEYS * RECORDS_PER_KEY
    _wait(lambda: _records_in(cluster, job_id) >= total, PROCESS_TIMEOUT, "all input at the stateful operator")
    assert _records_in(cluster, job_id) == total
    return job_id, descriptors


def test_savepoint_via_rest_is_read_through_its_state_info(cluster, job, tmp_path, capsys):
    job_id, descriptors = job

    target = cluster.work / "savepoints-statecat"
    code = cli_main(
        [
            "savepoint",
            "--rest",
            cluster.url,
            "--job",
            job_id,
            "--target",
            f"file://{target}",
            "--descriptors",
            str(descriptors),
            "--timeout",
            "180",
            "--json",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    result = json.loads(out.strip().splitlines()[-1])
    savepoint = Path(result["state_info"]).parent
    assert savepoint.parent == target and (savepoint / STATE_INFO_FILE).is_file()
    doc = json.loads((savepoint / STATE_INFO_FILE).read_text())
    declared = {s["name"]: s for op in doc["operators"] for s in op["states"] if s.get("declared")}
    assert set(declared) == {"total_amount", "items", "per_tag", "last", "info"}
    assert declared["total_amount"]["stored_name"] == "python-state-total_amount"
    assert declared["per_tag"]["value"]["sql_type"] == "MAP<STRING, BIGINT>"

    if os.environ.get("STATECAT_TEST_KEEP_SAVEPOINT"):  # for debugging: keep a copy of the fresh bytes
        shutil.copytree(savepoint, os.environ["STATECAT_TEST_KEEP_SAVEPOINT"], dirs_exist_ok=True)
        shutil.copy(descriptors, os.environ["STATECAT_TEST_KEEP_SAVEPOINT"])
    reader = SavepointReader(str(savepoint))
    assert reader.meta.operator("stateful-fn").state("total_amount").state_type == "VALUE"
    rows = _input_rows()
    by_key: dict[str, list] = {}
    for k, v, t in rows:
        by_key.setdefault(k, []).append((v, t))

    def key(k):  # PyFlink keys by a one-field Row: Java's RowSerializer, read as {"f0": ...}
        return k["f0"] if isinstance(k, dict) else k

    def table(name):
        return {key(r["key"]): json_value(r["value"]) for r in reader.table(name, "stateful-fn").to_pylist()}

    assert table("total_amount") == {k: sum(v for v, _ in vs) for k, vs in by_key.items()}
    assert table("items") == {k: [f"{t}:{v}" for v, t in vs] for k, vs in by_key.items()}
    per_tag = {}
    for k, vs in by_key.items():
        acc = {}
        for v, t in vs:
            acc[t] = acc.get(t, 0) + v
        per_tag[k] = acc
    assert table("per_tag") == per_tag
    assert table("last") == {k: {"tag": vs[-1][1], "v": vs[-1][0]} for k, vs in by_key.items()}
    info = SavepointReader(str(savepoint), unpickle=True).table("info", "stateful-fn").to_pylist()
    assert {key(r["key"]): json.loads(r["value"]) for r in info} == {k: {"n": vs[-1][0]} for k, vs in by_key.items()}

    # REST failures are clear errors, not tracebacks.
    code = cli_main(["savepoint", "--rest", cluster.url, "--job", "0" * 32, "--timeout", "30"])
    err = capsys.readouterr().err
    assert code == 2 and "404" in err and "job id" in err, err
    code = cli_main(["savepoint", "--rest", f"http://127.0.0.1:{_free_port()}", "--job", job_id])
    err = capsys.readouterr().err
    assert code == 2 and "cannot reach Flink's REST API" in err


def _trigger(cluster: Cluster, job_id: str, target: Path) -> str:
    """A savepoint through the REST API directly (not statecat), as any other tool would take one."""
    request = urllib.request.Request(
        f"{cluster.url}/jobs/{job_id}/savepoints",
        method="POST",
        data=json.dumps(
            {"target-directory": f"file://{target}", "cancel-job": False, "formatType": "CANONICAL"}
        ).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as r:
        trigger = json.loads(r.read())["request-id"]

    def done():
        status = _get(f"{cluster.url}/jobs/{job_id}/savepoints/{trigger}")
        if status["status"]["id"] != "COMPLETED":
            return None
        assert "location" in status["operation"], status
        return status["operation"]["location"]

    return _wait(done, 120, "the savepoint to complete").removeprefix("file:")


def test_watch_snapshots_each_new_savepoint_and_checkpoint_once(cluster, job, tmp_path):
    job_id, descriptors = job
    watched = cluster.work / "savepoints-watched"
    watched.mkdir()
    checkpoints = cluster.work / "checkpoints"
    log = tmp_path / "watch.log"
    exe = Path(sys.executable).with_name("statecat")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "statecat.catalog.cli"]
    with open(log, "w") as out:
        watcher = subprocess.Popen(
            cmd + ["watch", str(watched), str(checkpoints), "--interval", "0.2", "--descriptors", str(descriptors)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        savepoints = [Path(_trigger(cluster, job_id, watched)) for _ in range(2)]
        _wait(lambda: all((sp / STATE_INFO_FILE).exists() for sp in savepoints), 60, "stateInfo of both savepoints")
        _wait(lambda: "/chk-" in log.read_text(), 60, "a retained checkpoint to be snapshotted")
    finally:
        watcher.send_signal(signal.SIGINT)
        try:
            watcher.wait(timeout=20)
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait()
    text = log.read_text()
    wrote = [line.split(" wrote ", 1)[1].strip() for line in text.splitlines() if " wrote " in line]
    assert len(wrote) == len(set(wrote)), text  # nothing written twice
    for sp in savepoints:
        assert wrote.count(str(sp / STATE_INFO_FILE)) == 1, text
        meta = SavepointReader(str(sp)).meta
        assert meta.operator("stateful-fn").state("total_amount").value.kind == "pyflink"  # descriptors applied
    assert any("/chk-" in w for w in wrote), text
    # a restarted watcher has nothing to do for the savepoints
    stamps = [(sp / STATE_INFO_FILE).stat().st_mtime_ns for sp in savepoints]
    again = subprocess.run(
        cmd + ["watch", str(watched), "--once", "--descriptors", str(descriptors)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0 and " wrote " not in again.stdout + again.stderr, again.stderr
    assert [(sp / STATE_INFO_FILE).stat().st_mtime_ns for sp in savepoints] == stamps


def test_flinks_checkpoint_history_times_and_orders_copied_savepoints(cluster, job, tmp_path):
    """``--rest``: Flink's own history (``GET /jobs/<id>/checkpoints``) times copies of its savepoints,
    which a copy gave one mtime; the lake lists them by the checkpoint ids Flink reports."""
    import datetime as dt

    import deltalake

    from statecat.catalog.cli.savepoint import fetch_checkpoint_history
    from statecat.catalog.lake.materialize import Materializer
    from statecat.catalog.lake.tables import read_delta
    from statecat.statemeta.snapshotter.taken_at import SOURCE_FLINK_HISTORY

    job_id, _ = job
    taken = [Path(_trigger(cluster, job_id, cluster.work / "savepoints-history")) for _ in range(3)]
    copied = tmp_path / "copied"
    for sp in reversed(taken):  # the newest copied first: its mtime is the oldest
        shutil.copytree(sp, copied / sp.name, copy_function=shutil.copy)
    history = fetch_checkpoint_history(cluster.url)
    raw = _get(f"{cluster.url}/jobs/{job_id}/checkpoints")  # the ground truth, read right after
    listed = [e for e in raw["history"] + [raw["latest"]["savepoint"]] if e and e.get("external_path")]
    truth = {
        Path(e["external_path"].removeprefix("file:")).name: (
            e["id"],
            dt.datetime.fromtimestamp(e["latest_ack_timestamp"] / 1000, dt.UTC),
        )
        for e in listed
        if e["status"] == "COMPLETED" and e["is_savepoint"]
    }
    assert {sp.name for sp in taken} <= set(truth), (sorted(truth), [sp.name for sp in taken])
    result = Materializer(tmp_path / "lake", flink_history=history).run([str(copied)])
    want = sorted((truth[sp.name][0], str(copied / sp.name)) for sp in taken)
    assert [s.path for s in result.snapshots] == [path for _, path in want]
    rows = read_delta(deltalake.DeltaTable(str(tmp_path / "lake" / "snapshots"))).to_pylist()
    got = {Path(r["path"]).name: (r["checkpoint_id"], r["taken_at"], r["taken_at_source"]) for r in rows}
    assert got == {sp.name: (*truth[sp.name], SOURCE_FLINK_HISTORY) for sp in taken}
