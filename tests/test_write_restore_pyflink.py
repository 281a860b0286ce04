"""PyFlink process-mode state (coder bytes that carry no schema) edited with the job's declared
types (descriptors) and restored by real Flink: the Python function sees the edited values."""

from __future__ import annotations

import pytest

from tests.fixtures.edits import write_savepoint
from tests.fixtures.expected import savepoint_dir
from tests.fixtures.restore import restore_and_continue
from tests.test_restore_harness import KEYED_EXTRA, TIMEOUT, _per_key, _state_rows, keyed_outputs

pytestmark = pytest.mark.live_flink

# The job's state declarations (tests/flink_jobs/datastream_keyed.py), as a descriptor document.
DESCRIPTORS = {
    "format": "statecat.descriptors",
    "version": 1,
    "operators": {
        "keyed-fn": {
            "count": "LONG",
            "items": "LIST<STRING>",
            "per_tag": "MAP<STRING, LONG>",
            "max_v": "REDUCING<LONG>",
            "avg": "AGGREGATING<TUPLE<LONG, LONG>>",
            "info": "PICKLED",
        }
    },
}


def test_process_mode_state_edited_with_descriptors(tmp_path):
    case = "datastream_process_2.3"  # RocksDB, every value PyFlink coder bytes
    dst = tmp_path / "edited"
    write_savepoint(
        str(savepoint_dir(case)),
        str(dst),
        sql=[
            "UPDATE count SET value = value + 100 WHERE key = 'k_0'",
            "UPDATE items SET value = array('edited') WHERE key = 'k_0'",
            "UPDATE per_tag SET value = map('t1', 1000L) WHERE key = 'k_0'",
            "UPDATE avg SET value = named_struct('f0', 70L, 'f1', 7L) WHERE key = 'k_17'",
        ],
        descriptors=DESCRIPTORS,
    )
    states = {n: dict(_state_rows(case, n)) for n in ("count", "items", "per_tag", "avg")}
    states["count"]["k_0"] += 100
    states["items"]["k_0"] = ["edited"]
    states["per_tag"]["k_0"] = {"t1": 1000}
    states["avg"]["k_17"] = [70, 7]
    out = restore_and_continue(case, dst, KEYED_EXTRA, timeout=TIMEOUT)
    assert _per_key(out, "key") == _per_key(keyed_outputs(case, KEYED_EXTRA, states), "key")
    k17 = _per_key(out, "key")["k_17"][0]
    assert k17["avg"] == (70 + 3) / (7 + 1)
