"""``statecat savepoint --rest URL --job JOB_ID [--target DIR]``: take a savepoint, write its stateInfo.

Triggers a savepoint through Flink's REST API (``POST /jobs/:jobid/savepoints``, or
``/jobs/:jobid/stop`` with ``--stop``), polls the asynchronous operation until it completes, then
snapshots the savepoint like ``statecat snapshot``, recording in the stateInfo when it saw the
savepoint triggered and completed (``taken``: the registry's ``time``). REST failures, failed savepoints and timeouts
are ``StatecatError``s that say what Flink answered.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
import time
import urllib.error
import urllib.request
from typing import NamedTuple

from statecat.statemeta.errors import StatecatError
from statecat.statemeta.snapshotter.stateinfo import snapshot
from statecat.statemeta.snapshotter.taken_at import FlinkCheckpointHistory, rest_record

DEFAULT_TIMEOUT = 600.0
REQUEST_TIMEOUT = 30.0
POLL_INTERVAL = 0.5
log = logging.getLogger("statecat.savepoint")


class RestError(StatecatError):
    """Flink's REST API could not be reached, refused the request or the operation failed."""


class FlinkRest:
    def __init__(self, url: str, request_timeout: float = REQUEST_TIMEOUT):
        self.url = url.rstrip("/")
        self.request_timeout = request_timeout

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.request_timeout) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            detail = _errors(exc.read())
            hint = None
            if exc.code == 404:
                hint = "Check the job id (`flink list` or GET /jobs) and that the job is still running"
            raise RestError(
                f"Flink REST API answered {exc.code} to {method} {path}: {detail}", file=self.url, hint=hint
            ) from None
        except urllib.error.URLError as exc:
            raise RestError(
                f"cannot reach Flink's REST API: {exc.reason}",
                file=self.url,
                hint="Give the JobManager's REST address, e.g. http://jobmanager:8081",
            ) from None
        except (TimeoutError, OSError) as exc:
            raise RestError(
                f"no answer from Flink's REST API within {self.request_timeout:g}s to {method} {path}: {exc}",
                file=self.url,
            ) from None
        try:
            return json.loads(payload) if payload else {}
        except ValueError:
            raise RestError(
                f"Flink's REST API answered {method} {path} with something that is not JSON: {payload[:200]!r}",
                file=self.url,
                hint="Is this the JobManager's REST port?",
            ) from None


def _errors(payload: bytes) -> str:
    try:
        errors = json.loads(payload).get("errors")
    except (ValueError, AttributeError):
        return payload[:300].decode("utf-8", "replace") or "(empty body)"
    if not errors:
        return "(no details)"
    # Flink puts a whole Java stack trace into errors; its first line says what happened.
    return "; ".join(str(e).strip().splitlines()[0] for e in errors)


class TakenSavepoint(NamedTuple):
    location: str  # path or URI, as Flink reports it
    triggered_at: dt.datetime  # just before the trigger request (UTC)
    completed_at: dt.datetime  # the status poll that saw the operation complete (UTC)


def trigger_savepoint(
    rest: FlinkRest,
    job_id: str,
    target: str | None,
    *,
    stop: bool = False,
    fmt: str = "CANONICAL",
    timeout: float = DEFAULT_TIMEOUT,
) -> TakenSavepoint:
    """Takes a savepoint of ``job_id``; returns its location once complete, and when it was taken."""
    state = rest.call("GET", f"/jobs/{job_id}").get("state")  # 404 here names a wrong job id clearly
    if state not in (None, "RUNNING"):
        raise RestError(
            f"job {job_id} is {state}; a savepoint needs a running job",
            file=rest.url,
            hint="Savepoints of finished or failed jobs cannot be taken; use a retained checkpoint",
        )
    if stop:
        body = {"drain": False, "formatType": fmt}
        if target:
            body["targetDirectory"] = target
        path = f"/jobs/{job_id}/stop"
    else:
        body = {"cancel-job": False, "formatType": fmt}
        if target:
            body["target-directory"] = target
        path = f"/jobs/{job_id}/savepoints"
    triggered_at = dt.datetime.now(dt.UTC)
    trigger = rest.call("POST", path, body).get("request-id")
    if not trigger:
        raise RestError(f"Flink did not return a request id for POST {path}", file=rest.url)
    deadline = time.monotonic() + timeout
    status_path = f"/jobs/{job_id}/savepoints/{trigger}"
    while True:
        answer = rest.call("GET", status_path)
        if answer.get("status", {}).get("id") == "COMPLETED":
            completed_at = dt.datetime.now(dt.UTC)
            operation = answer.get("operation") or {}
            if "failure-cause" in operation:
                cause = operation["failure-cause"] or {}
                raise RestError(
                    f"savepoint of job {job_id} failed: {_root_cause(cause)}",
                    file=rest.url,
                    hint="See the JobManager log for the full cause",
                )
            location = operation.get("location")
            if not location:
                raise RestError(
                    f"Flink reported the savepoint of job {job_id} complete without a location", file=rest.url
                )
            return TakenSavepoint(location, triggered_at, completed_at)
        if time.monotonic() >= deadline:
            raise RestError(
                f"the savepoint of job {job_id} did not complete within {timeout:g}s (trigger {trigger})",
                file=rest.url,
                hint="Raise --timeout, or check the job's checkpointing in the Flink web UI",
            )
        time.sleep(POLL_INTERVAL)  # polling Flink's asynchronous operation status, not a synchronisation guess


def _root_cause(cause: dict) -> str:
    """The innermost "Caused by" of Flink's failure stack trace, without Java package names."""
    stack = str(cause.get("stack-trace") or "").strip()
    if not stack:
        return str(cause.get("class") or json.dumps(cause)[:500])
    lines = [ln.strip() for ln in stack.splitlines()]
    causes = [ln[len("Caused by: ") :] for ln in lines if ln.startswith("Caused by: ")]
    text = causes[-1] if causes else lines[0]
    head, sep, message = text.partition(": ")
    return head.rsplit(".", 1)[-1] + sep + message


def local_path(location: str) -> str:
    """Flink's ``file:/x`` / ``file:///x`` locations as local paths; other URIs unchanged."""
    if location.startswith("file:"):
        path = location[len("file:") :]
        while path.startswith("//"):
            path = path[1:]
        return path
    return location


def fetch_checkpoint_history(url: str) -> FlinkCheckpointHistory:
    """The checkpoint history (``GET /jobs/<id>/checkpoints``) of every job the JobManager lists."""
    rest = FlinkRest(url)
    jobs = rest.call("GET", "/jobs").get("jobs")
    if not isinstance(jobs, list) or not all(isinstance(j, dict) and isinstance(j.get("id"), str) for j in jobs):
        raise RestError(
            f"Flink's REST API answered GET /jobs without a list of jobs with ids: {json.dumps(jobs)[:200]}",
            file=rest.url,
            hint="Is this the JobManager's REST port?",
        )
    answers: dict[str, object] = {}
    for job in jobs:
        try:
            answers[job["id"]] = rest.call("GET", f"/jobs/{job['id']}/checkpoints")
        except RestError as exc:  # e.g. a job without checkpointing: its snapshots keep their mtime
            log.warning("no checkpoint history for job %s: %s", job["id"], exc.message)
    return FlinkCheckpointHistory.from_rest(answers, rest.url)


HELP = "trigger a savepoint through Flink's REST API and write its stateInfo"
DESCRIPTION = "Triggers a savepoint of a running job, waits for it, and writes its stateInfo."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rest", required=True, metavar="URL", help="JobManager REST address, e.g. http://localhost:8081"
    )
    parser.add_argument("--job", required=True, metavar="JOB_ID", help="id of the running job")
    parser.add_argument(
        "--target",
        metavar="DIR",
        help="savepoint directory (default: the cluster's execution.checkpointing.savepoint-dir)",
    )
    parser.add_argument("--stop", action="store_true", help="stop the job with the savepoint (flink stop)")
    parser.add_argument(
        "--format",
        choices=("canonical", "native"),
        default="canonical",
        help="savepoint format (statecat reads canonical; default)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds to wait for the savepoint (default {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument("--output", metavar="DIR", help="write DIR/stateInfo instead of into the savepoint")
    parser.add_argument("--descriptors", metavar="FILE", help="descriptor file with the job's declared state types")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    descriptors = None
    if args.descriptors:
        from statecat.statemeta.descriptors import load_descriptors

        descriptors = load_descriptors(args.descriptors)  # fail before triggering anything
    rest = FlinkRest(args.rest)
    taken = trigger_savepoint(
        rest, args.job, args.target, stop=args.stop, fmt=args.format.upper(), timeout=args.timeout
    )
    location = taken.location
    result = snapshot(
        local_path(location),
        args.output,
        descriptors=descriptors,
        taken=rest_record(taken.triggered_at, taken.completed_at),
    )
    if args.json:
        json.dump({"savepoint": location, "state_info": result.path, "written": result.written}, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(f"savepoint {location}")
        print(f"wrote {result.path}")
    return 0
