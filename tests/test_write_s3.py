"""`statecat write SRC --out s3://…` (writers/object_store.py) against moto's S3 server on loopback:
the savepoint is uploaded with _metadata last, so a prefix holding _metadata is a whole savepoint at
every moment; a prefix that holds anything, and --overwrite, are refused; SIGINT and SIGTERM remove
what was uploaded, and what a SIGKILL left goes at the next write into the same parent prefix."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pyarrow.fs as pafs
import pytest

from statecat.readers import SavepointReader
from statecat.statemeta.model import load_state_meta
from statecat.writers.object_store import UPLOAD_MARKER
from tests.fixtures.expected import savepoint_dir
from tests.fixtures.s3 import BUCKET, moto_s3
from tests.test_materialize import canonical, statecat_cli
from tests.test_write_files import signalled_run

_s3 = pytest.fixture(scope="module", name="s3")(moto_s3)

HEAP = "sql_groupby_hashmap_2.3"
ROCKSDB = "sql_groupby_rocksdb_2.3"
SEED = 20261129
TIMEOUT = 120  # seconds one write may take
MARKER_POLLS = 2000  # x 5 ms for the marker to appear: the upload has begun


def _names(filesystem, prefix: str) -> list[str]:
    found = filesystem.get_file_info(pafs.FileSelector(f"{BUCKET}/{prefix}", allow_not_found=True, recursive=True))
    return sorted(f.path.removeprefix(f"{BUCKET}/{prefix}/") for f in found if f.type == pafs.FileType.File)


def _tables(path: str) -> dict[str, list]:
    meta = load_state_meta(path)
    reader = SavepointReader(meta)
    return {
        f"{op.id}/{state.name}": canonical(reader.table(state.name, op.id).to_pylist()) for op, state in meta.states()
    }


@pytest.mark.parametrize("case,extra", [(HEAP, []), (ROCKSDB, ["--max-parallelism", "256"])], ids=["heap", "rekey"])
def test_a_savepoint_written_to_s3_reads_back_as_the_source(s3, case, extra):
    filesystem, _ = s3
    uri = f"s3://{BUCKET}/written/{case}-{len(extra)}"
    statecat_cli("write", savepoint_dir(case), "--out", uri, *extra)
    names = _names(filesystem, uri.removeprefix(f"s3://{BUCKET}/"))
    assert "_metadata" in names and "stateInfo" in names and UPLOAD_MARKER not in names, names
    assert _tables(uri) == _tables(str(savepoint_dir(case)))
    expected = 256 if extra else load_state_meta(str(savepoint_dir(case))).operators[0].max_parallelism
    assert {op.max_parallelism for op in load_state_meta(uri).operators} == {expected}


def _s3_plugin(flink: str) -> None:
    """Flink's S3 filesystem (flink-s3-fs-hadoop, from Maven Central) in the PyFlink venv's
    plugins/ directory, where a user puts it (PyFlink sets FLINK_PLUGINS_DIR to that directory)."""
    from tests.fixtures.runtime import ensure_venv, maven_jars, venv_dir

    (jar,) = maven_jars([f"org.apache.flink:flink-s3-fs-hadoop:{flink}"])
    ensure_venv(flink)
    (package,) = venv_dir(flink).glob("lib/python*/site-packages/pyflink")
    plugin = package / "plugins" / "s3-fs-hadoop"
    plugin.mkdir(exist_ok=True)
    link = plugin / jar.name
    if not link.exists():
        link.symlink_to(jar)


@pytest.mark.live_flink
def test_an_edit_uploaded_to_s3_is_restored_by_flink_from_s3(s3):
    """GROUPBY_EDITS written to s3://, read back by statecat, and restored by Flink 2.3 from the
    bucket through its S3 filesystem plugin: the job continues from the edited counts."""
    from tests.fixtures.edits import write_savepoint
    from tests.fixtures.restore import restore_and_continue
    from tests.test_restore_harness import GROUPBY_EXTRA, TIMEOUT, _per_key, _state_rows
    from tests.test_write_restore import GROUPBY_EDITS, _check_groupby, _edited_groupby

    _, endpoint = s3
    uri = f"s3://{BUCKET}/edited/groupby"
    result = write_savepoint(str(savepoint_dir(HEAP)), uri, sql=GROUPBY_EDITS)
    assert [s.matched for s in result.statements] == [1, 1, 1] and result.destination == uri
    acc = _edited_groupby(_state_rows(HEAP, "accState"))
    read_back = {r["key"]: r["value"] for r in SavepointReader(uri).table("accState").to_pylist()}
    assert read_back == acc
    _s3_plugin("2.3.0")
    conf = {
        "s3.endpoint": endpoint,
        "s3.path.style.access": "true",
        "s3.access-key": "testing",
        "s3.secret-key": "testing",
        "s3.endpoint.region": "us-east-1",
    }
    out = restore_and_continue(HEAP, uri, GROUPBY_EXTRA, conf=conf, timeout=TIMEOUT)
    _check_groupby(out, acc)
    assert _per_key(out, "word")["key_500"][0]["op"] == "+I"  # deleted: it starts again


def test_an_existing_prefix_and_overwrite_are_refused_and_nothing_changes(s3):
    filesystem, _ = s3
    uri = f"s3://{BUCKET}/refused/held"
    with filesystem.open_output_stream(f"{BUCKET}/refused/held/notes.txt") as out:
        out.write(b"mine\n")
    exists = statecat_cli("write", savepoint_dir(HEAP), "--out", uri, check=False)
    assert exists.returncode == 2 and exists.stderr.splitlines() == [
        f"statecat: error: the destination {uri} exists. Choose another --out: statecat never writes into a prefix "
        "that holds objects"
    ], exists.stderr
    overwrite = statecat_cli(
        "write", savepoint_dir(HEAP), "--out", f"s3://{BUCKET}/refused/new", "--overwrite", check=False
    )
    assert overwrite.returncode == 2 and "has no rename" in overwrite.stderr and len(overwrite.stderr.splitlines()) == 1
    assert _names(filesystem, "refused") == ["held/notes.txt"]


def _signalled_upload(filesystem, uri: str, signum: int, delay: float, env: dict) -> tuple[int, str]:
    """`statecat write` to ``uri``, signalled ``delay`` seconds after its upload began (its marker
    appeared), or never when it finished before."""
    prefix = uri.removeprefix("s3://")

    def upload_began(process: subprocess.Popen) -> bool:
        for _ in range(MARKER_POLLS):
            if process.poll() is not None or any(
                filesystem.get_file_info(f"{prefix}/{name}").type == pafs.FileType.File
                for name in (UPLOAD_MARKER, "_metadata")
            ):
                break
            time.sleep(0.005)  # polls for the upload's start
        return process.poll() is None

    command = [sys.executable, "-m", "statecat.catalog.cli", "write", str(savepoint_dir(ROCKSDB)), "--out", uri]
    return signalled_run(command, signum, delay, upload_began, env=env)


ATTEMPTS = 4


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_signal_during_an_upload_leaves_no_object_or_a_whole_savepoint(s3, signum, tmp_path):
    filesystem, _ = s3
    rng = random.Random(f"{SEED}-{signum.name}")
    expected = _tables(str(savepoint_dir(ROCKSDB)))
    bound = 0.3
    for attempt in range(ATTEMPTS):
        parent = f"signals/{signum.name}-{attempt}"
        uri = f"s3://{BUCKET}/{parent}/out"
        delay = rng.uniform(0, bound)
        local = tmp_path / f"tmp-{attempt}"  # where the savepoint is built before its upload
        local.mkdir()
        env = dict(os.environ, TMPDIR=str(local))
        code, err = _signalled_upload(filesystem, uri, signum, delay, env)
        what = f"{signum.name} {delay * 1000:.1f} ms into the upload: exit {code}, stderr {err!r}"
        names = _names(filesystem, parent)
        whole = "out/_metadata" in names
        if whole:  # _metadata is last: a prefix holding it reads as the source
            assert _tables(uri) == expected, what
        if signum == signal.SIGKILL:
            assert code in (0, -signal.SIGKILL), what
            # One more write into the same parent: the killed run's objects go (only its marker, if it was whole).
            statecat_cli("write", savepoint_dir(HEAP), "--out", f"s3://{BUCKET}/{parent}/next", env=env)
            assert list(local.iterdir()) == [], what
            left = _names(filesystem, parent)
            assert [n for n in left if n.startswith("out/")] == (
                [n for n in names if n != f"out/{UPLOAD_MARKER}"] if whole else []
            ), what
            assert UPLOAD_MARKER not in " ".join(left), what
        elif not whole:
            assert code == 128 + signum, what
            assert err.splitlines() == [f"statecat: interrupted by {signum.name}: nothing written at {uri}"], what
            assert names == [] and list(local.iterdir()) == [], what
        else:  # the signal came after _metadata: it waited for the cleanup, or the write was done
            assert code in (0, 128 + signum, -signum) and list(local.iterdir()) == [], what
            assert f"out/{UPLOAD_MARKER}" not in names, what
        if not whole:
            return
        bound /= 2  # the upload was done before the signal came: this machine is faster
    raise AssertionError(f"{signum.name} came after the upload in all {ATTEMPTS} attempts")
