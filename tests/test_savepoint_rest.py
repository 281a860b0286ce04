"""`statecat savepoint --rest`: REST failures and timeouts are clear errors (a fake JobManager).

The real cluster round trip is tests/test_savepoint_rest_live.py (marked live_flink).
"""

from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from statecat.catalog.cli import main as cli_main
from statecat.catalog.cli.savepoint import local_path
from statecat.statemeta.snapshotter.stateinfo import STATE_INFO_FILE
from tests.fixtures.expected import savepoint_dir

JOB = "a" * 32


class FakeJobManager:
    """Answers like Flink's REST API; ``mode`` picks the savepoint operation's outcome."""

    def __init__(self, mode: str, location: str = ""):
        self.mode = mode
        self.location = location
        self.requests: list[tuple[str, str, dict | None]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code, body):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                fake.requests.append(("GET", self.path, None))
                if self.path == f"/jobs/{JOB}":
                    return self._send(200, {"jid": JOB, "state": "FINISHED" if fake.mode == "finished" else "RUNNING"})
                if self.path.startswith(f"/jobs/{JOB}/savepoints/"):
                    if fake.mode == "hang":
                        return self._send(200, {"status": {"id": "IN_PROGRESS"}})
                    if fake.mode == "fail":
                        return self._send(
                            200,
                            {
                                "status": {"id": "COMPLETED"},
                                "operation": {
                                    "failure-cause": {
                                        "class": "java.util.concurrent.CompletionException",
                                        "stack-trace": "java.util.concurrent.CompletionException: x\n\tat a.b(C.java:1)\n"
                                        "Caused by: org.apache.flink.runtime.checkpoint.CheckpointException: "
                                        "Checkpoint Coordinator is suspending.\n\tat d.e(F.java:2)",
                                    }
                                },
                            },
                        )
                    return self._send(200, {"status": {"id": "COMPLETED"}, "operation": {"location": fake.location}})
                if fake.mode == "html":
                    return self._send(200, b"<html>not flink</html>")
                return self._send(404, {"errors": [f"Job {self.path.split('/')[2]} not found\n\tat stack"]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                fake.requests.append(("POST", self.path, body))
                if self.path in (f"/jobs/{JOB}/savepoints", f"/jobs/{JOB}/stop"):
                    return self._send(202, {"request-id": "trigger-1"})
                return self._send(404, {"errors": ["Not found: " + self.path]})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def test_savepoint_completes_and_writes_state_info(tmp_path, capsys):
    sp = tmp_path / "savepoints" / "savepoint-aaaaaa-111111111111"
    shutil.copytree(savepoint_dir("sql_join_2.3"), sp)
    (sp / STATE_INFO_FILE).unlink(missing_ok=True)
    with FakeJobManager("ok", location=f"file:{sp}") as jm:
        code = cli_main(
            ["savepoint", "--rest", jm.url, "--job", JOB, "--target", f"file://{tmp_path}/savepoints", "--json"]
        )
    out = capsys.readouterr().out
    assert code == 0, out
    assert json.loads(out)["state_info"] == str(sp / STATE_INFO_FILE)
    assert (sp / STATE_INFO_FILE).is_file()
    post = [r for r in jm.requests if r[0] == "POST"]
    assert post == [
        (
            "POST",
            f"/jobs/{JOB}/savepoints",
            {"cancel-job": False, "formatType": "CANONICAL", "target-directory": f"file://{tmp_path}/savepoints"},
        )
    ]


def test_stop_with_savepoint(tmp_path, capsys):
    sp = tmp_path / "sp"
    shutil.copytree(savepoint_dir("sql_join_2.3"), sp)
    with FakeJobManager("ok", location=f"file://{sp}") as jm:
        assert cli_main(["savepoint", "--rest", jm.url, "--job", JOB, "--stop"]) == 0
    assert ("POST", f"/jobs/{JOB}/stop", {"drain": False, "formatType": "CANONICAL"}) in jm.requests


@pytest.mark.parametrize(
    "mode,args,message",
    [
        ("hang", ["--timeout", "1"], "did not complete within 1s"),
        ("fail", [], "failed: CheckpointException: Checkpoint Coordinator is suspending"),
        ("finished", [], "is FINISHED; a savepoint needs a running job"),
    ],
)
def test_rest_failures_are_clear(mode, args, message, capsys):
    with FakeJobManager(mode) as jm:
        code = cli_main(["savepoint", "--rest", jm.url, "--job", JOB, *args])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and "Traceback" not in err


def test_unknown_job_and_unreachable_cluster(capsys):
    with FakeJobManager("ok") as jm:
        assert cli_main(["savepoint", "--rest", jm.url, "--job", "b" * 32]) == 2
        err = capsys.readouterr().err
        assert "answered 404" in err and "not found" in err and "Check the job id" in err
        assert "at stack" not in err  # only the first line of Flink's error
        url = jm.url
    assert cli_main(["savepoint", "--rest", url, "--job", JOB]) == 2
    assert "cannot reach Flink's REST API" in capsys.readouterr().err


def test_not_flink(capsys):
    with FakeJobManager("html") as jm:
        assert cli_main(["savepoint", "--rest", jm.url, "--job", "c" * 32]) == 2
    assert "not JSON" in capsys.readouterr().err


def test_local_path():
    assert local_path("file:/tmp/x") == "/tmp/x"
    assert local_path("file:///tmp/x") == "/tmp/x"
    assert local_path("s3://bucket/x") == "s3://bucket/x"
    assert Path(local_path("file://" + "/a/b")) == Path("/a/b")
