"""Regenerates committed fixtures with live Flink (PyFlink in its own virtualenv, created on first
use by tests/fixtures/generate.py) and holds the fresh savepoints to the committed ground truth.

The suite regenerates LIVE_CASES: one case of every Flink release, job kind, state backend and
snapshot form the corpus holds (a case takes 15-40 s of CPU, and every committed case is read by
tests/test_fixtures_acceptance.py anyway). ``STATECAT_LIVE_CASES=all`` regenerates every committed
case (after a change to the generator or a job), or a comma-separated list of case ids.

Hook for reader tests: the session fixture `regenerated_case(case)` returns the directory of the
fresh case (generated once per session), laid out like tests/fixtures/cases/<case>/.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.fixtures import generate, verify
from tests.fixtures.expected import CASES, is_successive, load_expected, phases, savepoint_dir
from tests.fixtures.savepoint_probe import MAGIC

pytestmark = pytest.mark.live_flink

LIVE_CASES_ENV = "STATECAT_LIVE_CASES"
# Each line says what the case is the one regenerated example of; test_live_cases_cover_the_corpus
# holds the choice to that.
REPRESENTATIVE_CASES = (
    "sql_groupby_incremental_1.15",  # Flink 1.15 (the Java job), an incremental RocksDB checkpoint
    "sql_groupby_rocksdb_1.20",  # Flink 1.20, a RocksDB canonical savepoint
    "sql_groupby_hashmap_2.0",  # Flink 2.0
    "sql_groupby_native_rocksdb_2.3",  # a native RocksDB savepoint
    "sql_groupby_checkpoint_compressed_2.3",  # a heap checkpoint, snappy-compressed key-groups
    "sql_groupby_rescaled_rocksdb_2.3",  # a rescaled job's snapshot
    "sql_join_checkpoint_rocksdb_2.3",  # the SQL join, a full RocksDB checkpoint
    "sql_window_2.3",  # SQL windows and their timers
    "sql_types_2.3",  # every SQL type
    "datastream_thread_1.20",  # PyFlink 1.20 thread mode
    "datastream_types_thread_2.3",  # PyFlink's typed state
    "datastream_windows_process_2.3",  # PyFlink process mode, windows
    "datastream_broadcast_filesource_2.3",  # broadcast state, FileSource splits
    "datastream_successive_2.0",  # successive retained checkpoints
    "datastream_java_avro_1.20",  # a Java job with flink-avro state
    "datastream_java_pojo_2.3",  # a Java job with POJO and tuple state
    "java_type_matrix_2.3_rocksdb",  # Kryo 5 and the Java types, RocksDB
)


def _live_cases() -> list[str]:
    chosen = os.environ.get(LIVE_CASES_ENV, "")
    if chosen == "all":
        return list(CASES)
    if chosen:
        return [case.strip() for case in chosen.split(",") if case.strip()]
    return list(REPRESENTATIVE_CASES)


LIVE_CASES = _live_cases()


@pytest.fixture(scope="session")
def regenerated_case():
    # Not tmp_path: pytest keeps those after the run; fresh savepoints are scratch.
    out = Path(tempfile.mkdtemp(prefix="statecat-regenerated-"))
    done = {}

    def get(case):
        # One Flink job at a time: cases are generated lazily, one after the other.
        if case not in done:
            done[case] = generate.generate_case(case, out)
        return done[case]

    yield get
    shutil.rmtree(out, ignore_errors=True)


@pytest.mark.parametrize("case", LIVE_CASES)
def test_regenerated_case_matches_committed(case, regenerated_case):
    fresh = regenerated_case(case)
    # (a) the ground truth is deterministic: same input, same expected.json (Flink 1.15 checkpoints
    # periodically, so which checkpoint ids a successive case keeps differs from run to run)
    assert _without_checkpoint_ids(load_expected(fresh)) == _without_checkpoint_ids(load_expected(case))
    # (b) magic and the metadata version of the Flink release
    head = (savepoint_dir(fresh) / "_metadata").read_bytes()[:8]
    assert int.from_bytes(head[:4], "big") == MAGIC
    assert int.from_bytes(head[4:], "big") == load_expected(case)["metadata_version"]
    # (c) operators (uid/name, parallelism), state names, raw strings, inline/file handles
    assert verify.check_case(fresh) == []


@pytest.mark.parametrize("case", LIVE_CASES)
def test_statecat_reads_the_fresh_savepoint(case, regenerated_case):
    """The readers hold the freshly written bytes to the ground truth, state by state."""
    from tests.acceptance import check_inspect, check_key_groups, check_state_rows
    from tests.fixtures.expected import iter_states

    fresh = regenerated_case(case)
    expected = load_expected(fresh)
    check_inspect(fresh, expected)
    for operator, state in iter_states(expected):
        check_state_rows(fresh, operator, state)
    check_key_groups(fresh)
    if is_successive(fresh):
        # every phase's retained incremental checkpoint, read natively from its SST files
        for phase in phases(fresh):
            for operator, state in iter_states(phase["expected"]):
                check_state_rows(phase["checkpoint"], operator, state)


def _without_checkpoint_ids(expected: dict) -> dict:
    if expected.get("flink_version", "").startswith("1.15") and "phases" in expected:
        expected = {
            **expected,
            "params": {k: v for k, v in expected["params"].items() if k != "checkpoint_ids"},
            "phases": [{k: v for k, v in p.items() if k != "checkpoint"} for p in expected["phases"]],
        }
    return expected


def test_live_cases_cover_the_corpus():
    """The regenerated cases are committed ones, and between them hold every Flink release, job,
    backend and snapshot form of the corpus (a new kind of case needs a representative here)."""
    assert set(REPRESENTATIVE_CASES) <= set(CASES)

    def facets(case: str) -> set[tuple[str, str]]:
        expected = load_expected(case)
        head = (savepoint_dir(case) / "_metadata").read_bytes()[:8]
        return {
            ("flink", expected["flink_version"]),
            ("job", expected["job"]),
            ("backend", expected["backend"]),
            ("format", str(expected.get("savepoint_format"))),
            ("python execution mode", str(expected.get("execution_mode"))),
            ("successive", str(is_successive(case))),
            ("metadata", str(int.from_bytes(head[4:], "big"))),
        }

    missing = set().union(*(facets(c) for c in CASES)) - set().union(*(facets(c) for c in REPRESENTATIVE_CASES))
    assert missing == set(), f"no regenerated case has {sorted(missing)}"
