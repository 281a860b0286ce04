"""Shared plumbing of the fixture jobs: configuration, waiting for the input, canonical savepoint.

Runs inside the PyFlink virtualenv (imported by the job scripts next to it). Every job follows
the same protocol: build the pipeline, submit it asynchronously, wait until the stateful operator
has received all input (REST metrics of the local MiniCluster), stop the job with a CANONICAL
savepoint and write {"savepoint": path, ...} as JSON to --result.

Restoring (tests/fixtures/restore.py): `--restore DIR` starts the job from the savepoint or
retained checkpoint DIR (`execution.state-recovery.path`, NO_CLAIM, unclaimed state refused) and
checks through REST that Flink did restore from it; `--output FILE` makes the job also print its
results (each job script adds a print sink) and points the JVM's System.out at FILE, so FILE
holds those lines and nothing else. The protocol is otherwise the same: --records counts the
records of the new input only (metrics start at zero in a restored job), and the stop with a
savepoint, whose barrier follows every counted record through every operator, is what makes all
their output lines written when the job ends. Without these options nothing changes.
"""

import argparse
import json
import os
import random
import socket
import sys
import time
import urllib.error
import urllib.request

from pyflink.common import Configuration


def arg_parser(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--work", required=True, help="scratch dir for checkpoint/savepoint storage (the caller deletes it)")
    p.add_argument("--result", required=True, help="JSON file receiving the savepoint path")
    p.add_argument("--backend", choices=["hashmap", "rocksdb"], default="hashmap")
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--max-parallelism", type=int, default=128)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the input to be processed")
    p.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Flink configuration (repeatable)"
    )
    p.add_argument(
        "--snapshot",
        choices=["canonical", "native", "checkpoint", "successive"],
        default="canonical",
        help="stop with a canonical or native savepoint, or take a retained checkpoint and cancel;"
        " successive: see add_phase_args",
    )
    add_phase_args(p)
    p.add_argument(
        "--restore",
        metavar="DIR",
        help="start from this savepoint (or retained checkpoint) directory; state it holds that the"
        " job cannot map fails the restore",
    )
    p.add_argument(
        "--output",
        metavar="FILE",
        help="also print the job's results (one line per record of its print sink) into FILE",
    )
    return p


def add_phase_args(p):
    """--phase STAGED_DIR:CUMULATIVE_RECORDS (repeatable, in order): the successive protocol
    (see successive()). Idempotent: job scripts may call it after arg_parser."""
    if any("--phase" in a.option_strings for a in p._actions):
        return
    p.add_argument(
        "--phase",
        action="append",
        default=[],
        metavar="STAGED_DIR:RECORDS",
        help="successive snapshots: a directory moved into --input when its phase "
        "starts, and the records of all phases up to it",
    )


def free_port():
    """A free port below the kernel's ephemeral range for Flink's REST endpoint (its port must be
    known to poll metrics). A just-released ephemeral port can be handed to any socket the job's
    own gateway JVM or another process opens before Flink binds it; ports below the range are
    only ever taken by explicit binds."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    below = range(20000, max(ephemeral_low, 20001))
    candidates = random.SystemRandom().sample(below, min(50, len(below)))
    for port in candidates:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range for Flink's REST endpoint")


def flink_version():
    from importlib.metadata import version

    return version("apache-flink")


def make_config(args, rest_port):
    """Configuration for the local MiniCluster, valid for Flink 1.20 and 2.x.

    2.x keys always; on 1.x also the old keys of the options 2.0 renamed. A checkpoint
    directory is configured so that streams above the 20 KiB inline threshold are written as
    files (without one, Flink inlines everything into _metadata).
    """
    # Thread mode embeds CPython in the JVM (pemja); that interpreter only sees the venv's
    # packages through PYTHONPATH, which the gateway JVM (started by Configuration()) inherits.
    import site

    os.environ["PYTHONPATH"] = os.pathsep.join(
        site.getsitepackages() + [p for p in [os.environ.get("PYTHONPATH")] if p]
    )
    work = os.path.abspath(args.work)
    ckpt = "file://" + os.path.join(work, "checkpoints")
    spt = "file://" + os.path.join(work, "savepoints")
    conf = {
        "state.backend.type": args.backend,
        "execution.checkpointing.dir": ckpt,
        "execution.checkpointing.savepoint-dir": spt,
        "rest.bind-address": "127.0.0.1",
        "rest.address": "127.0.0.1",
        "rest.bind-port": str(rest_port),
        "rest.port": str(rest_port),
        # the REST metric fetcher caches for 10 s by default; we poll it as our sync condition
        "metrics.fetcher.update-interval": "200",
        # Python workers (DataStream/UDF jobs) must run with this venv's interpreter.
        "python.executable": sys.executable,
        "python.client.executable": sys.executable,
        "parallelism.default": str(args.parallelism),
        "pipeline.max-parallelism": str(args.max_parallelism),
        # RocksDB native libs extract into io.tmp.dirs: keep them in the scratch dir
        "io.tmp.dirs": os.path.join(work, "io"),
    }
    if flink_version().startswith("1."):
        conf.update(
            {
                "state.backend": args.backend,
                "state.checkpoints.dir": ckpt,
                "state.savepoints.dir": spt,
            }
        )
    if getattr(args, "snapshot", "canonical") == "checkpoint":
        # Only the checkpoint triggered through REST is taken, and it outlives the cancelled job.
        conf["execution.checkpointing.interval"] = "1h"
        conf["execution.checkpointing.externalized-checkpoint-retention"] = "RETAIN_ON_CANCELLATION"
    if getattr(args, "snapshot", "canonical") == "successive":
        # Only the checkpoints triggered through REST are taken (one per phase), incremental, and
        # all of them are kept after the job is cancelled.
        retained = str(max(len(args.phase), 1) + 1)
        conf["execution.checkpointing.interval"] = "1h"
        conf["execution.checkpointing.externalized-checkpoint-retention"] = "RETAIN_ON_CANCELLATION"
        conf["execution.checkpointing.incremental"] = "true"
        conf["execution.checkpointing.num-retained"] = retained
        # Flink 2.x pauses the sources until a first checkpoint, which it then triggers at once
        # (delay drawn from [min-pause, 2 min-pause]): without both settings an extra chk-1 of
        # no or partial input precedes the phases. min-pause holds back periodic ones only.
        conf["pipeline.sources.pause-until-first-checkpoint"] = "false"
        conf["execution.checkpointing.min-pause"] = "1h"
        if flink_version().startswith("1."):
            conf["state.backend.incremental"] = "true"
            conf["state.checkpoints.num-retained"] = retained
    if getattr(args, "restore", None):
        conf.update(restore_conf(args.restore))
    for kv in args.conf:
        k, _, v = kv.partition("=")
        conf[k] = v
    os.makedirs(conf["io.tmp.dirs"], exist_ok=True)
    c = Configuration()
    for k, v in conf.items():
        c.set_string(k, v)
    if getattr(args, "output", None):
        redirect_stdout(args.output)
    if "://" in (getattr(args, "restore", None) or ""):
        initialize_filesystems(c)
    return c


def initialize_filesystems(config):
    """Flink's filesystem plugins (FLINK_PLUGINS_DIR, PyFlink's plugins/ directory) for this JVM's
    local MiniCluster, as Flink's own entry points load them: a restore from s3:// needs the S3 one."""
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    j_config = config._j_configuration
    plugins = jvm.org.apache.flink.core.plugin.PluginUtils.createPluginManagerFromRootFolder(j_config)
    jvm.org.apache.flink.core.fs.FileSystem.initialize(j_config, plugins)


def restore_conf(path):
    """Options restoring a job from `path`. 1.20 and 2.x read StateRecoveryOptions
    (`execution.state-recovery.*`, whose deprecated keys are `execution.savepoint.path`,
    `execution.savepoint.ignore-unclaimed-state` and `execution.savepoint-restore-mode`); both
    spellings of ignore-unclaimed-state are set false (the default, made explicit): state of the
    snapshot that no operator of the job claims fails the restore instead of being dropped.
    NO_CLAIM: Flink neither takes ownership of nor deletes the snapshot (it may be a committed
    fixture)."""
    return {
        "execution.state-recovery.path": path if "://" in path else "file://" + os.path.abspath(path),
        "execution.state-recovery.ignore-unclaimed-state": "false",
        "execution.savepoint.ignore-unclaimed-state": "false",
        "execution.state-recovery.claim-mode": "NO_CLAIM",
    }


def redirect_stdout(path):
    """Points the JVM's System.out (the local MiniCluster's task threads run in the gateway JVM)
    at `path`, UTF-8, flushed at every println: print sinks opened afterwards write there, one
    whole line per record (PrintStream.println holds the stream's lock), while Flink's logs go
    to their files and Python's own stdout stays where it was."""
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    stream = jvm.java.io.PrintStream(jvm.java.io.FileOutputStream(os.path.abspath(path), True), True, "UTF-8")
    jvm.java.lang.System.setOut(stream)


class Rest:
    def __init__(self, port, job_id):
        self.base = f"http://127.0.0.1:{port}"
        self.job_id = job_id

    def get(self, path):
        try:
            with urllib.request.urlopen(self.base + path, timeout=10) as r:
                return json.loads(r.read())
        except urllib.error.URLError as e:
            # expose the socket error (refused vs timed out) that urllib wraps
            if isinstance(e.reason, OSError):
                raise e.reason from e
            raise

    def post(self, path, body):
        request = urllib.request.Request(
            self.base + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as r:
            return json.loads(r.read())

    def job(self):
        return self.get(f"/jobs/{self.job_id}")

    def vertex_id(self, name_contains):
        names = []
        for v in self.job()["vertices"]:
            names.append(v["name"])
            if name_contains in v["name"]:
                return v["id"]
        raise RuntimeError(f"no job vertex named like {name_contains!r}: {names}")

    def vertex_metric(self, vid, metric):
        """{"min", "max", "sum"} of a metric over the vertex's subtasks, or None if unknown."""
        rows = self.get(f"/jobs/{self.job_id}/vertices/{vid}/subtasks/metrics?get={metric}&agg=min,max,sum")
        return {k: int(float(rows[0][k])) for k in ("min", "max", "sum")} if rows else None


def wait_until(cond, timeout, what):
    """Polls cond() (a real condition, not a sleep standing in for one) until it is True."""
    deadline = time.monotonic() + timeout
    last, reached = None, False
    while time.monotonic() < deadline:
        try:
            last = cond()
            reached = True
        except ConnectionRefusedError as e:
            # Not up yet is fine; gone after having answered means the MiniCluster shut down
            # (the job ended): fail now rather than at the deadline.
            if reached:
                raise RuntimeError(f"REST endpoint went away while waiting for {what}") from e
            last = e
        except OSError as e:  # slow answer (e.g. a GC pause under a big state): poll again
            last = e
        if last is True:
            return
        time.sleep(0.2)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}; last={last!r}")


def wait_for_records(rest, targets, timeout):
    """targets: list of (vertex name substring, metric, expected value). A counter
    (numRecordsIn) must reach the value summed over subtasks; anything else (a watermark) must
    equal it on every subtask. Fails fast if the job dies or a counter overshoots."""

    def cond():
        status = rest.job()["state"]
        if status in ("FAILED", "CANCELED", "FINISHED"):
            raise RuntimeError(f"job is {status} before the savepoint{root_exception(rest)}")
        seen = []
        for name, metric, want in targets:
            m = rest.vertex_metric(rest.vertex_id(name), metric)
            seen.append((name, metric, m, want))
            if m is None:
                return seen
            if metric.startswith("numRecords"):
                if m["sum"] > want:
                    raise RuntimeError(f"{name}.{metric} = {m['sum']} > expected {want}")
                if m["sum"] < want:
                    return seen
            elif not m["min"] == m["max"] == want:
                return seen
        return True

    wait_until(cond, timeout, "all input to reach the stateful operators")


def root_exception(rest):
    """': <Flink's root exception of the job>' (e.g. why a restore was refused), or ''."""
    try:
        root = rest.get(f"/jobs/{rest.job_id}/exceptions").get("root-exception")
    except (OSError, ValueError):
        return ""
    return f": {root}" if root else ""


def wait_for_restore(rest, path, timeout):
    """Waits until the job runs and checks that Flink restored it from `path` (the checkpoint
    statistics' `latest.restored.external_path`): a configuration key that a release ignores
    would otherwise start the job from empty state without a word. A refused restore (state
    the job cannot map, an unreadable snapshot) fails the job: its root exception is raised."""
    remote = "://" in path  # an object store's URI (s3://...): compared as written
    want = path.rstrip("/") if remote else os.path.realpath(path).rstrip("/")

    def cond():
        status = rest.job()["state"]
        if status in ("FAILED", "CANCELED", "FINISHED"):
            raise RuntimeError(f"job is {status} instead of restored from {path}{root_exception(rest)}")
        if status != "RUNNING":
            return status
        restored = (rest.get(f"/jobs/{rest.job_id}/checkpoints").get("latest") or {}).get("restored")
        if not restored:
            raise RuntimeError(f"job runs but did not restore from {path}: no restored checkpoint in its statistics")
        got = restored.get("external_path") or ""
        got = got[len("file:") :] if got.startswith("file:") and not remote else got
        if (got.rstrip("/") if remote else os.path.realpath(got).rstrip("/")) != want:
            raise RuntimeError(f"job restored from {got!r}, not from {path}")
        return True

    wait_until(cond, timeout, f"the job to run restored from {path}")


def stop_with_savepoint(job_client, target_dir, fmt_name="CANONICAL", timeout=300, drain=False):
    """PyFlink's JobClient.stop_with_savepoint has no format argument; call the Java 3-arg
    overload to pin the format. advanceToEndOfEventTime=False unless `drain`: a MAX_WATERMARK
    fires (and clears) every window and event timer before the snapshot (what a job that must
    show its timers firing asks for, e.g. datastream_keyed.py --fire-event-timers)."""
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    fmt = getattr(jvm.org.apache.flink.core.execution.SavepointFormatType, fmt_name)
    fut = job_client._j_job_client.stopWithSavepoint(bool(drain), target_dir, fmt)
    return fut.get(int(timeout), jvm.java.util.concurrent.TimeUnit.SECONDS)


def retained_checkpoint(rest, job_client, work, timeout=300):
    """Triggers a checkpoint through REST, waits for it, cancels the job; returns chk-N's path."""
    checkpoint_id = trigger_checkpoint(rest, timeout)
    job_client.cancel().result()
    return os.path.join(os.path.abspath(work), "checkpoints", str(job_client.get_job_id()), f"chk-{checkpoint_id}")


def trigger_checkpoint(rest, timeout=300):
    """Triggers a checkpoint through REST (POST /jobs/:id/checkpoints, Flink 1.19+; type
    CONFIGURED: incremental when so configured), waits until it completes; returns its id."""
    trigger = rest.post(f"/jobs/{rest.job_id}/checkpoints", {})["request-id"]
    status = {}

    def completed():
        status.update(rest.get(f"/jobs/{rest.job_id}/checkpoints/{trigger}"))
        if status.get("status", {}).get("id") != "COMPLETED":
            return False
        if "failure-cause" in status.get("operation", {}):
            raise RuntimeError(f"checkpoint failed: {status['operation']['failure-cause']}")
        return True

    wait_until(completed, timeout, "the triggered checkpoint to complete")
    return status["operation"]["checkpointId"]


def trigger_savepoint(job_client, target_dir, fmt_name="CANONICAL", timeout=300):
    """A savepoint of the running job (it keeps running), through the Java JobClient to pin
    the format; returns the savepoint's path."""
    from pyflink.java_gateway import get_gateway

    jvm = get_gateway().jvm
    fmt = getattr(jvm.org.apache.flink.core.execution.SavepointFormatType, fmt_name)
    fut = job_client._j_job_client.triggerSavepoint(target_dir, fmt)
    return fut.get(int(timeout), jvm.java.util.concurrent.TimeUnit.SECONDS)


def successive(args, rest, job_client, targets):
    """The successive protocol. For each --phase STAGED_DIR:RECORDS in order: move STAGED_DIR
    into --input (one rename: the monitoring source sees the phase's files complete or not at
    all), wait until the counters of `targets` reach RECORDS (the cumulative count; the values
    given in targets are ignored), take a retained checkpoint (REST, waited for), then a
    canonical savepoint of the running job. Cancels the job at the end and writes
    {"job_id", "phases": [{"checkpoint", "checkpoint_id", "savepoint"}]} to args.result."""
    work = os.path.abspath(args.work)
    job_id = str(job_client.get_job_id())
    phases = []
    for spec in args.phase:
        staged, _, records = spec.rpartition(":")
        name = os.path.basename(staged.rstrip("/"))
        os.rename(staged, os.path.join(args.input, name))
        wait_for_records(rest, [(n, m, int(records)) for n, m, _ in targets], args.timeout)
        checkpoint_id = trigger_checkpoint(rest)
        savepoint = trigger_savepoint(job_client, "file://" + os.path.join(work, "savepoints", name))
        phases.append(
            {
                "phase": name,
                "checkpoint_id": checkpoint_id,
                "checkpoint": os.path.join(work, "checkpoints", job_id, f"chk-{checkpoint_id}"),
                "savepoint": savepoint[len("file:") :] if savepoint.startswith("file:") else savepoint,
            }
        )
    job_client.cancel().result()
    with open(args.result, "w") as f:
        json.dump({"job_id": job_id, "phases": phases}, f)


def finish(args, rest, job_client, targets):
    """Waits for `targets` (see wait_for_records), stops the job with a canonical savepoint and
    writes {"savepoint": local path, "job_id": ...} to args.result."""
    if getattr(args, "restore", None):
        wait_for_restore(rest, args.restore, args.timeout)
    if args.snapshot == "successive":
        return successive(args, rest, job_client, targets)
    wait_for_records(rest, targets, args.timeout)
    if args.snapshot == "checkpoint":
        path = retained_checkpoint(rest, job_client, args.work)
    else:
        path = stop_with_savepoint(
            job_client,
            "file://" + os.path.join(os.path.abspath(args.work), "savepoints"),
            args.snapshot.upper(),
            drain=getattr(args, "drain", False),
        )
    if path.startswith("file:"):
        path = path[len("file:") :]
    if getattr(args, "output", None):  # the job has ended: every print sink line is written
        from pyflink.java_gateway import get_gateway

        get_gateway().jvm.java.lang.System.out.flush()
    with open(args.result, "w") as f:
        json.dump({"savepoint": path, "job_id": str(job_client.get_job_id())}, f)
