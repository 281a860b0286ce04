"""Which layouts the column-wise path reads, and its compiled helpers' bounds checks.

That both paths give the same rows for every keyed state of the fixtures is
tests/test_reader_paths.py's test; here: these layouts really are read column-wise (no
per-record fallback), and damaged positions make the helpers give up instead of reading."""

from __future__ import annotations

import numpy as np
import pytest

from statecat.readers.scans.fastscan import list_ascii_strings, list_fixed_elements, run_starts
from statecat.readers.scans.scan import KeyedStateScanner
from statecat.statemeta.model import load_state_meta
from tests.fixtures.expected import savepoint_dir

COLUMN_WISE = [
    ("sql_groupby_hashmap_2.3", "accState"),  # RowData key and value
    ("sql_window_2.3", "window-aggs"),  # slice-end namespace (long)
    ("sql_window_2.3", "_timer_state/event_window-timers"),  # SQL timers, long namespace
    ("sql_join_2.3", "left-records"),  # MapState RowData -> count
    ("sql_join_2.3", "right-records"),  # MapState RowData -> RowData
    ("datastream_thread_2.3", "count"),  # Row key, long value
    ("datastream_thread_2.3", "avg"),  # byte[] value
    ("datastream_thread_2.3", "items"),  # ListState of strings
    ("datastream_thread_2.3", "per_tag"),  # MapState string -> long
    ("datastream_thread_2.3", "_timer_state/event_user-timers"),  # DataStream timers
    ("datastream_windows_thread_2.3", "window-contents"),  # TimeWindow namespace; global window
    ("datastream_windows_thread_2.3", "_timer_state/event_window-timers"),  # timers of TimeWindows
    ("datastream_types_thread_2.3", "rows_by_long"),  # MapState long -> byte[]
]


@pytest.mark.parametrize("case,state", COLUMN_WISE, ids=[f"{c}:{s}" for c, s in COLUMN_WISE])
def test_layout_is_read_column_wise_without_falling_back(case, state, monkeypatch):
    meta = load_state_meta(savepoint_dir(case))
    found = [(op, info) for op, info in meta.states() if info.name == state]
    assert found
    per_record = []
    original = KeyedStateScanner._decode_key_group
    monkeypatch.setattr(
        KeyedStateScanner, "_decode_key_group", lambda self, *a, **k: per_record.append(1) or original(self, *a, **k)
    )
    rows = 0
    for op, info in found:
        scanner = KeyedStateScanner(meta, op, info)
        assert scanner.fast is not None
        rows += sum(batch.num_rows for batch in scanner.batches())
    assert rows > 0
    assert not per_record


def test_run_starts_stops_at_a_range_outside_the_buffer():
    buf = np.frombuffer(b"\x81abc\x01abc\x01abd", dtype=np.uint8)
    out = np.zeros(3, dtype=np.bool_)
    assert run_starts(buf, np.array([0, 4, 8]), np.array([4, 8, 12]), out) == -1
    assert out.tolist() == [True, False, True]  # the flag bit 0x80 of the first byte is not compared
    assert run_starts(buf, np.array([0, 4]), np.array([4, 13]), out) == 1
    assert run_starts(buf, np.array([0, -1]), np.array([4, 3]), out) == 1


def test_list_helpers_reject_values_that_do_not_split_exactly():
    buf = np.frombuffer(b"\x00\x00\x00\x01,\x00\x00\x00\x02" + b"\x02a,\x03bc", dtype=np.uint8)
    counts = np.zeros(1, dtype=np.int64)
    starts = np.empty(16, dtype=np.int64)
    assert list_fixed_elements(buf, np.array([0]), np.array([9]), 4, counts, starts) == -1
    assert counts[0] == 2 and starts[:2].tolist() == [0, 5]
    assert list_fixed_elements(buf, np.array([0]), np.array([8]), 4, counts, starts) == 0  # cut element
    assert list_fixed_elements(buf, np.array([0]), np.array([99]), 4, counts, starts) == 0  # past the buffer
    assert list_fixed_elements(buf, np.array([0]), np.array([5]), 4, counts, starts) == 0  # trailing delimiter
    lengths = np.empty(16, dtype=np.int64)
    assert list_ascii_strings(buf, np.array([9]), np.array([15]), counts, starts, lengths) == -1
    assert counts[0] == 2 and lengths[:2].tolist() == [1, 2]
    assert list_ascii_strings(buf, np.array([9]), np.array([14]), counts, starts, lengths) == 0
    assert list_ascii_strings(buf, np.array([9]), np.array([15]), counts, starts[:1], lengths) == 0  # no room
