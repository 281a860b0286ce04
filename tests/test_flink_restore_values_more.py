"""Flink's own restore-test savepoints (tests/fixtures/restore_tests.py) held to the programs that
made them: the families tests/test_flink_restore_values.py does not check (issue 41). Here the over
aggregates and the window rank, deduplicate and join operators; the operators driven by time in
tests/test_flink_restore_values_timed.py, those without windows in _unwindowed.py.

Each check derives the state from the test program's rows before the savepoint
(``producedBeforeRestore``) and the operator's logic, never from statecat's reader. The rows and SQL
are the ``*TestPrograms`` classes' of Flink's planner tests
(flink-table/flink-table-planner/src/test/java/org/apache/flink/table/planner/plan/nodes/exec/
{stream,common}/), named in each docstring, as the release's tests jar compiled them. The operator
logic cited is flink-table-runtime's (``org.apache.flink.table.runtime.operators``).

The restore tests' sources emit a watermark after each row (the rowtime less the declared delay,
when it grows: the programs' expected rows drop late rows one by one), and the savepoint is taken
once the sink holds ``consumedBeforeRestore``, every row read: an operator's timers fire as each
watermark arrives, and what is left is what the last watermark left. Where a program's input does
not fix a value (which of two sources came first, a processing time, a TTL's last access), the
check says so and holds only what is fixed. A savepoint is the same bytes in every release's jar unless the program changed, so each
check runs on every release that holds the program, or names the release whose program it follows.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from decimal import Decimal

import pytest

from tests.fixtures.restore_tests import RESTORE_TEST_VERSIONS, program
from tests.test_flink_restore_values import (
    APPENDS,
    CHANGELOG,
    LONG_MIN,
    LTCNT_LIMIT,
    NO_FIELDS,
    OVER_ROWS,
    SECOND,
    WATERMARK_DELAY,
    _elements,
    _millis,
    _non_time_over_states,
    _plain,
    _reader,
    _releases,
    _rowtime,
    _rowtime_of,
    _state,
    _states,
)

pytestmark = pytest.mark.restore_tests

OVER_NODE = "stream-exec-over-aggregate_1"
RELEASES_2X = RESTORE_TEST_VERSIONS[1:]  # the releases whose event-time over programs were taken again


def _timers(savepoint, kind: str = "event", name: str = "window-timers") -> dict:
    """{(key, namespace): time} of the timers of that name, over every operator holding them."""
    merged: dict = {}
    for timers in _states(savepoint, f"_timer_state/{kind}_{name}", by_namespace=True):
        assert not merged.keys() & timers.keys()
        merged.update(timers)
    return merged


def _watermark(savepoint) -> set:
    """The window operators' ``watermark`` operator state: each operator's one element."""
    return {element for elements in _elements(savepoint, "watermark") for element in elements}


# ----------------------------------------------------------------------------- event-time over aggregates

# common/OverAggregateTestPrograms (2.0 and after).DATA (ts, a, b, c), in order, for the programs the
# 2.x releases took again; the 1.20 rows (tests/test_flink_restore_values.py OVER_ROWS) are the
# 2.x ``...-with-out-of-order-records`` programs', whose savepoints are the 1.20.3 bytes.
# rowtime = TO_TIMESTAMP(FROM_UNIXTIME(ts)) in UTC, WATERMARK FOR rowtime AS rowtime.
OVER_ROWS_2X = (
    (10, 1, 1, "Hello"),
    (15, 1, 15, "Hello"),
    (16, 1, 16, "Hello"),
    (19, 1, 15, "Hello"),
    (20, 2, 2, "Hello"),
    (21, 2, 3, "Hello"),
    (30, 3, 3, "Hello"),
    (33, 17, 1, "Hello"),
    (37, 19, 15, "Hello"),
    (40, 4, 4, "Hello"),
    (50, 5, 5, "Hello"),
    (51, 19, 15, "Hello"),
    (52, 19, 15, "Hello"),
    (53, 19, 15, "Hello"),
    (60, 6, 6, "Hello"),
    (65, 6, 65, "Hello"),
    (90, 6, 9, "Hello"),
    (92, 7, 9, "Hello"),
    (99, 19, 15, "Hello"),
    (100, 7, 7, "Hello World"),
    (110, 7, 17, "Hello World"),
    (140, 7, 18, "Hello World"),
    (150, 8, 8, "Hello World"),
    (200, 20, 20, "Hello World"),
)
RANGE_PRECEDING = 10 * SECOND  # RANGE BETWEEN INTERVAL '10' SECOND PRECEDING AND CURRENT ROW
ROWS_PRECEDING = 5  # ROWS BETWEEN 5 PRECEDING AND CURRENT ROW


def _over_input(row: tuple) -> tuple:
    """The over aggregate's input row: ts, a, b, c, rowtime and LTCNT's literal 4."""
    ts, a, b, c = row
    return (ts, a, b, c, _rowtime_of(ts * SECOND), LTCNT_LIMIT)


def _ltcnt_bytes(count: int) -> bytes:
    """LargerThanCount's accumulator (a Tuple1<Long>, a structured type shown as stored): the
    BinaryRowData of one BIGINT, its null-bit word and the count, little-endian."""
    return bytes(8) + struct.pack("<q", count)


def _entries(savepoint, name: str) -> list[tuple]:
    """Every entry of the state ``name``, of every operator holding it, as (key, namespace, value):
    a timer state holds several timers per key."""
    reader = _reader(savepoint)
    return [
        (_plain(row["key"]), _plain(row["namespace"]), _plain(row["value"]))
        for operator in reader.meta.operators
        if any(state.name == name for state in operator.states)
        for row in reader.table(name, operator.id).to_pylist()
    ]


class _EventTimers:
    """A keyed operator's event-time timers: one per key and time, fired in time order as the
    watermark passes them, a timer set at or below the watermark at the next watermark that grows
    (InternalTimerServiceImpl)."""

    def __init__(self) -> None:
        self.pending: set[tuple] = set()
        self.watermark = LONG_MIN

    def advance(self, watermark: int, on_timer: Callable[[object, int], None]) -> None:
        if watermark <= self.watermark:
            return
        self.watermark = watermark
        while due := [(t, k) for k, t in self.pending if t <= watermark]:
            t, k = min(due, key=lambda d: d[0])
            self.pending.discard((k, t))
            on_timer(k, t)

    def entries(self) -> list[tuple]:
        return sorted(((k, None, t) for k, t in self.pending), key=repr)


def _over_accumulators(window: list[tuple], with_sum_count: bool) -> tuple:
    """LTCNT(a, 4), COUNT(a), SUM(a) (and SUM's count, kept where rows are retracted) of the rows."""
    a = [r[1] for r in window]
    acc = (_ltcnt_bytes(sum(1 for v in a if v > LTCNT_LIMIT)), len(a), sum(a))
    return (*acc, len(a)) if with_sum_count else acc


def _range_bounded_over(rows: Iterable[tuple], key: Callable[[tuple], object]) -> dict:
    """RowTimeRangeBoundedPrecedingFunction, RANGE 10 s PRECEDING: a row later than its key's last
    triggering time is kept under its rowtime with a timer there, and a cleanup timer set at rowtime
    + 1.5 x 10 s + 1 ms whenever the one kept is before rowtime + 10 s + 1 ms. A timer at or after
    the cleanup time clears the key; a data timer retracts the rows more than 10 s older and
    accumulates its own; every timer that does not clean becomes the last triggering time."""
    keys: dict = {}
    timers = _EventTimers()

    def fresh() -> dict:
        return {"input": {}, "acc": None, "last": None, "cleanup": None}

    def on_timer(k, t: int) -> None:
        s = keys[k]
        if s["cleanup"] is not None and s["cleanup"] <= t:
            keys[k] = fresh()
            return
        if t in s["input"]:
            s["input"] = {ts: rs for ts, rs in s["input"].items() if t - ts <= RANGE_PRECEDING}
            window = [r for ts, rs in s["input"].items() if ts <= t for r in rs]
            s["acc"] = _over_accumulators(window, with_sum_count=True)
        s["last"] = t

    for row in rows:
        k, t = key(row), row[0] * SECOND
        s = keys.setdefault(k, fresh())
        if t > (s["last"] or 0):
            if t not in s["input"]:
                timers.pending.add((k, t))
            s["input"].setdefault(t, []).append(_over_input(row))
            if s["cleanup"] is None or s["cleanup"] < t + RANGE_PRECEDING + 1:
                s["cleanup"] = t + RANGE_PRECEDING * 3 // 2 + 1
                timers.pending.add((k, s["cleanup"]))
        timers.advance(max(timers.watermark, t), on_timer)
    return {
        "inputState": {k: s["input"] for k, s in keys.items() if s["input"]},
        "accState": {k: s["acc"] for k, s in keys.items() if s["acc"] is not None},
        "lastTriggeringTsState": {k: s["last"] for k, s in keys.items() if s["last"] is not None},
        "cleanupTsState": {k: s["cleanup"] for k, s in keys.items() if s["cleanup"] is not None},
        "_timer_state/event_user-timers": timers.entries(),
    }


def _rows_bounded_over(rows: Iterable[tuple], key: Callable[[tuple], object]) -> dict:
    """RowTimeRowsBoundedPrecedingFunction, ROWS 5 PRECEDING (6 rows with the current): a row later
    than its key's last triggering time is kept with a timer at its rowtime; the timer accumulates
    it, retracting (and dropping) the oldest row once 6 were processed."""
    keys: dict = {}
    timers = _EventTimers()

    def on_timer(k, t: int) -> None:
        s = keys[k]
        for r in s["input"].pop(t, []):
            s["window"] = [*s["window"], r][-(ROWS_PRECEDING + 1) :]
        s["last"] = t

    for row in rows:
        k, t = key(row), row[0] * SECOND
        s = keys.setdefault(k, {"input": {}, "window": [], "last": None})
        if t > (s["last"] or 0):
            timers.pending.add((k, t))
            s["input"].setdefault(t, []).append(_over_input(row))
        timers.advance(max(timers.watermark, t), on_timer)
    assert all(not s["input"] for s in keys.values())  # every row kept was processed
    return {
        "inputState": {k: {r[0] * SECOND: [r] for r in s["window"]} for k, s in keys.items()},
        "accState": {k: _over_accumulators(s["window"], with_sum_count=True) for k, s in keys.items()},
        "processedCountState": {k: len(s["window"]) for k, s in keys.items()},
        "lastTriggeringTsState": {k: s["last"] for k, s in keys.items()},
        "_timer_state/event_user-timers": timers.entries(),
    }


def _unbounded_over(rows: Iterable[tuple], key: Callable[[tuple], object]) -> dict:
    """RowTimeRangeUnboundedPrecedingFunction: a row after the watermark is kept with a timer at the
    watermark + 1; the timer accumulates every kept row the watermark has passed."""
    keys: dict = {}
    timers = _EventTimers()

    def on_timer(k, t: int) -> None:
        s = keys[k]
        s["taken"] += [r for ts in sorted(s["input"]) if ts <= timers.watermark for r in s["input"][ts]]
        s["input"] = {ts: rs for ts, rs in s["input"].items() if ts > timers.watermark}
        if s["input"]:
            timers.pending.add((k, timers.watermark + 1))

    for row in rows:
        k, t = key(row), row[0] * SECOND
        s = keys.setdefault(k, {"input": {}, "taken": []})
        if t > timers.watermark:
            timers.pending.add((k, max(timers.watermark + 1, 0)))
            s["input"].setdefault(t, []).append(_over_input(row))
        timers.advance(max(timers.watermark, t), on_timer)
    return {
        "inputState": {k: s["input"] for k, s in keys.items() if s["input"]},
        "accState": {k: _over_accumulators(s["taken"], with_sum_count=False) for k, s in keys.items()},
        "_timer_state/event_user-timers": timers.entries(),
    }


def _over_states(savepoint, names: Iterable[str]) -> dict:
    return {
        name: sorted(_entries(savepoint, name), key=repr)
        if name.startswith("_timer_state")
        else _state(savepoint, name)
        for name in names
    }


def _by_c(row: tuple) -> str:
    return row[3]


def _all_rows(row: tuple) -> str:
    return NO_FIELDS


# (program, the frame's simulation, the partition): the SELECT of getTableTestProgram.
OVER_PROGRAMS = {
    "over-aggregate-bounded-partitioned-rows": (_range_bounded_over, _by_c),
    "over-aggregate-bounded-non-partitioned-rows": (_range_bounded_over, _all_rows),
    "over-aggregate-unbounded-partitioned-rows": (_unbounded_over, _by_c),
    "over-aggregate-bounded-partitioned-preceding-rows": (_rows_bounded_over, _by_c),
}


@pytest.mark.parametrize("name", sorted(OVER_PROGRAMS))
def test_a_2x_event_time_over_aggregate_holds_what_its_frame_left(name):
    """common/OverAggregateTestPrograms (2.0 and after), the program named: SELECT c, ts, rowtime,
    b, LTCNT(a, 4), COUNT(a), SUM(a) OVER w over DATA, rows in rowtime order, w = PARTITION BY c
    (or none) ORDER BY rowtime RANGE 10 s PRECEDING, RANGE UNBOUNDED PRECEDING or ROWS 5 PRECEDING.
    A RANGE-bounded key whose cleanup timer the watermark passed (Hello's, at 99 s + 15 s + 1 ms;
    the watermark is 200 s) holds nothing; the non-partitioned frame keeps one key, the empty row."""
    simulate, key = OVER_PROGRAMS[name]
    expected = simulate(OVER_ROWS_2X, key)
    for version in RELEASES_2X:
        assert _over_states(program(version, OVER_NODE, name), expected) == expected, version


@pytest.mark.parametrize(
    "name", ["over-aggregate-bounded-partitioned-rows", "over-aggregate-bounded-non-partitioned-rows"]
)
def test_a_range_bounded_over_aggregate_of_out_of_order_rows_keeps_the_late_rows_a_cleared_key_took(name):
    """OverAggregateTestPrograms (1.20).OVER_AGGREGATE_TIME_BOUNDED_(NON_)PARTITIONED_ROWS, the
    1.20.3 savepoints and the 2.x ``...-with-out-of-order-records`` programs (the same bytes): RANGE
    10 s PRECEDING over the 1.20 rows, out of order. Once a key's cleanup timer fired, its last
    triggering time is gone, so rows older than the watermark are taken again, with timers the
    watermark (200 s, never growing after) has already passed: Hello keeps 13, 19, 33, 37 and 52 s
    unprocessed. The 1.20 non-partitioned savepoint was taken with a partitioned plan (its compiled
    plan in the jar partitions the over aggregate by c, and the program expects the partitioned
    rows), so it is held to PARTITION BY c."""
    expected = _range_bounded_over(OVER_ROWS, _by_c)
    savepoints = [program("1.20.3", OVER_NODE, name)]
    savepoints += [program(version, OVER_NODE, f"{name}-with-out-of-order-records") for version in RELEASES_2X]
    for savepoint in savepoints:
        assert _over_states(savepoint, expected) == expected, savepoint


def _binary_array_of_doubles(values: Iterable[float]) -> bytes:
    """Flink's BinaryArrayData of non-null DOUBLEs: the count, a null-bit word per 32 elements, then
    each value little-endian."""
    values = list(values)
    return (
        struct.pack("<i", len(values))
        + bytes(4 * ((len(values) + 31) // 32))
        + struct.pack(f"<{len(values)}d", *values)
    )


@pytest.mark.parametrize("name", ["over-aggregate-lag", "over-aggregate-lag/1.18"])
def test_lag_keeps_the_row_before_the_savepoint_in_its_accumulator(name):
    """OverWindowTestPrograms.LAG_OVER_FUNCTION: SELECT ts, LAG(b, 1) OVER (ORDER BY r_time) over one
    row before the savepoint, b = MAP[42.0, 42.0]. Processed (the watermark is its rowtime), it left
    no buffered row and no timer; LAG's accumulator (LagAcc, a structured type shown as stored)
    holds it as a BinaryMapData: the key array's size, the key array, the value array."""
    expected_map = _binary_array_of_doubles([42.0])
    expected_map = struct.pack("<i", len(expected_map)) + expected_map + _binary_array_of_doubles([42.0])
    for savepoint in _releases(OVER_NODE, name):
        assert _state(savepoint, "inputState") == {}, savepoint
        assert _entries(savepoint, "_timer_state/event_user-timers") == [], savepoint
        ((key, (accumulator,)),) = _state(savepoint, "accState").items()
        assert key == NO_FIELDS and expected_map in accumulator, savepoint


@pytest.mark.parametrize("frame", ["rows", "range"])
@pytest.mark.parametrize(
    ("variant", "changes"),
    [
        ("sum-retract-mode-source-primary-key", CHANGELOG),
        ("sum-retract-mode-sink-primary-key", CHANGELOG),
        ("avg-append-mode", APPENDS),
        ("multiple-aggs-append-mode", APPENDS),
    ],
)
def test_a_non_time_over_aggregate_variant_keeps_the_same_rows_ids_and_sums(frame, variant, changes):
    """OverWindowTestPrograms.OVER_AGGREGATE_NON_TIME_{ROWS,RANGE}_UNBOUNDED_... (the variant named):
    the SUM(val) OVER (PARTITION BY key ORDER BY val ...) of tests/test_flink_restore_values.py over
    getSource's changelog with PRIMARY KEY(key) on the source or on the sink (neither changes the
    operator's input), and AVG(val) / SUM(val) with COUNT(key) over APPEND_SOURCE. The compiled
    plan keeps every one of them as COUNT(val) and $SUM0(val) accumulators (AVG divides them, SUM is
    NULL on no rows), the multiple aggregates' COUNT(key) after them."""
    expected = _non_time_over_states(changes, frame)
    if variant.startswith("multiple-aggs"):
        expected["accMapState"] = {
            key: {at: (*acc, acc[0]) for at, acc in accumulators.items()}
            for key, accumulators in expected["accMapState"].items()
        }
    name = f"over-aggregate-non-time-{frame}-unbounded-{variant}"
    for savepoint in _releases(OVER_NODE, name):
        assert {state: _state(savepoint, state) for state in expected} == expected, savepoint


# ----------------------------------------------------------------------------- window rank, dedup

# WindowRankTestPrograms.BEFORE_DATA / WindowDeduplicateTestPrograms.BEFORE_DATA (ts, price, item,
# supplier_id): bid_time = TO_TIMESTAMP(ts), WATERMARK bid_time - 1 s.
RANK_BIDS = (
    ("2020-04-15 08:00:05", "4.00", "A", "supplier1"),
    ("2020-04-15 08:00:06", "4.00", "C", "supplier2"),
    ("2020-04-15 08:00:07", "2.00", "G", "supplier1"),
    ("2020-04-15 08:00:08", "2.00", "B", "supplier3"),
    ("2020-04-15 08:00:09", "5.00", "D", "supplier4"),
    ("2020-04-15 08:00:11", "2.00", "B", "supplier3"),
    ("2020-04-15 08:00:13", "1.00", "E", "supplier1"),
    ("2020-04-15 08:00:15", "3.00", "H", "supplier2"),
    ("2020-04-15 08:00:17", "6.00", "F", "supplier5"),
)
DEDUP_BIDS = (
    ("2020-04-15 08:00:05", "4.00", "A", "supplier1"),
    ("2020-04-15 08:00:06", "4.00", "A", "supplier2"),
    ("2020-04-15 08:00:07", "2.00", "G", "supplier1"),
    ("2020-04-15 08:00:08", "2.00", "A", "supplier3"),
    ("2020-04-15 08:00:09", "5.00", "D", "supplier4"),
    ("2020-04-15 08:00:11", "2.00", "B", "supplier3"),
    ("2020-04-15 08:00:13", "1.00", "E", "supplier1"),
    ("2020-04-15 08:00:15", "3.00", "B", "supplier2"),
    ("2020-04-15 08:00:17", "6.00", "D", "supplier5"),
)
BID_WATERMARK = max(_millis(b[0]) for b in RANK_BIDS) - WATERMARK_DELAY
TEN_SECONDS, FIVE_SECONDS = 10 * SECOND, 5 * SECOND


def _tumbling(size: int, offset: int = 0) -> Callable[[int], list[tuple[int, int]]]:
    def windows(t: int) -> list[tuple[int, int]]:
        start = (t - offset) // size * size + offset
        return [(start, start + size)]

    return windows


def _hopping(slide: int, size: int) -> Callable[[int], list[tuple[int, int]]]:
    def windows(t: int) -> list[tuple[int, int]]:
        last = t // slide * slide
        return [(start, start + size) for start in range(last - size + slide, last + 1, slide)]

    return windows


def _cumulating(step: int, size: int) -> Callable[[int], list[tuple[int, int]]]:
    def windows(t: int) -> list[tuple[int, int]]:
        start = t // size * size
        return [(start, end) for end in range(start + step, start + size + 1, step) if end > t]

    return windows


WINDOW_TVFS = {  # WindowRankTestPrograms / WindowDeduplicateTestPrograms' TUMBLE_TVF, HOP_TVF, CUMULATE_TVF
    "tumble": _tumbling(TEN_SECONDS),
    "hop": _hopping(FIVE_SECONDS, TEN_SECONDS),
    "cumulate": _cumulating(FIVE_SECONDS, TEN_SECONDS),
}


def _bid_row(bid: tuple, window: tuple[int, int]) -> tuple:
    """The row a window rank or deduplicate keeps: price, item, supplier_id, bid_time and the
    window's start and end (the query's columns; ts is not kept)."""
    ts, price, item, supplier = bid
    return (Decimal(price), item, supplier, _rowtime(ts), _rowtime_of(window[0]), _rowtime_of(window[1]))


def _buffered_batches(
    bids: Iterable[tuple], windows: Callable[[int], list[tuple[int, int]]], partition: Callable[[tuple], object]
) -> list[dict]:
    """What a window rank or deduplicate operator combines into its state, batch by batch: its
    window buffer (RecordsWindowBuffer) collects the rows of windows not fired yet and flushes them
    all when the watermark passes the earliest window end it holds, and at the savepoint. Each
    batch: {(partition, window end): [(window, bid)] in arrival order}. A batch of a window the
    watermark then fires is emitted and dropped: only the windows left are returned."""
    batches, buffer, watermark = [], [], LONG_MIN

    def flush() -> None:
        batch: dict = {}
        for window, bid in buffer:
            batch.setdefault((partition(bid), window[1]), []).append((window, bid))
        batches.append(batch)
        buffer.clear()

    for bid in bids:
        t = _millis(bid[0])
        buffer += [(window, bid) for window in windows(t) if window[1] - 1 > watermark]
        if t - WATERMARK_DELAY > watermark:
            watermark = t - WATERMARK_DELAY
            if buffer and min(window[1] for window, _ in buffer) - 1 <= watermark:
                flush()
    flush()
    return [{at: rows for at, rows in batch.items() if at[1] - 1 > watermark} for batch in batches]


def _top_n(batches: list[dict], n: int, descending: bool) -> dict:
    """TopNRecordsCombiner: of each batch, per window, a TopNBuffer takes a row while it holds fewer
    than n rows or the row's price sorts before its worst (the buffer never drops a row it took),
    and appends what it took to the state's list per price. {(partition, end): {(price,): rows}}."""
    state: dict = {}
    for batch in batches:
        for at, rows in batch.items():
            taken: dict = {}
            for window, bid in rows:
                price = Decimal(bid[1])
                worst = max(taken, key=lambda p: -p if descending else p) if taken else None
                better = worst is not None and (price > worst if descending else price < worst)
                if worst is None or better or sum(map(len, taken.values())) < n:
                    taken.setdefault(price, []).append(_bid_row(bid, window))
            for price, kept in taken.items():
                state.setdefault(at, {}).setdefault((price,), []).extend(kept)
    return state


def _check_window_operator(savepoint, name: str, expected: dict) -> None:
    assert _state(savepoint, name, by_namespace=True) == expected, savepoint
    assert _timers(savepoint) == {at: at[1] - 1 for at in expected}, savepoint
    assert _watermark(savepoint) == {BID_WATERMARK}, savepoint


@pytest.mark.parametrize(
    ("name", "tvf", "descending"),
    [
        ("window-rank-tumble-tvf-min-top-n", "tumble", False),
        ("window-rank-tumble-tvf-max-top-n", "tumble", True),
        ("window-rank-hop-tvf-min-top-n", "hop", False),
        ("window-rank-cumulate-tvf-min-top-n", "cumulate", False),
    ],
)
def test_a_window_rank_keeps_each_open_windows_candidates_by_price(name, tvf, descending):
    """WindowRankTestPrograms (the program named): ROW_NUMBER() OVER (PARTITION BY window_start,
    window_end ORDER BY price ASC | DESC) <= 3 over the window TVF. At the savepoint the watermark
    is 08:00:16: the windows ending 08:00:20 (and, hopping, 08:00:25) are open. Their rows came in
    two flushes (the watermark 08:00:10 fired the first window, flushing 08:00:11; the savepoint
    flushed the rest), and a flush takes up to 3 rows of a window: the window ending 08:00:20 holds
    4, under the empty key, its timer at its end - 1 ms."""
    expected = _top_n(_buffered_batches(RANK_BIDS, WINDOW_TVFS[tvf], lambda bid: NO_FIELDS), 3, descending)
    for savepoint in _releases("stream-exec-window-rank_1", name):
        _check_window_operator(savepoint, "window_rank", expected)


@pytest.mark.parametrize("descending", [False, True])
def test_a_window_rank_over_a_window_aggregate_waits_for_the_aggregate(descending):
    """WindowRankTestPrograms.WINDOW_RANK_TUMBLE_TVF_AGG_{MIN,MAX}_TOP_N: the rank over SELECT
    window_start, window_end, supplier_id, SUM(price), COUNT(*) ... GROUP BY window_start,
    window_end, supplier_id. The open window (08:00:10 to 08:00:20) has not fired, so the rank holds
    nothing; the aggregate holds per supplier its slice's sum and count, with a timer at its end."""
    window = (_millis("2020-04-15 08:00:10"), _millis("2020-04-15 08:00:20"))
    aggregates: dict = {}
    for ts, price, _, supplier in RANK_BIDS:
        if window[0] <= _millis(ts) < window[1]:
            total, count = aggregates.get((supplier, window[1]), (0, 0))
            aggregates[(supplier, window[1])] = (total + Decimal(price), count + 1)
    name = f"window-rank-tumble-tvf-agg-{'max' if descending else 'min'}-top-n"
    for savepoint in _releases("stream-exec-window-rank_1", name):
        assert _state(savepoint, "window_rank", by_namespace=True) == {}, savepoint
        assert _state(savepoint, "window-aggs", by_namespace=True) == aggregates, savepoint
        assert _timers(savepoint) == {at: at[1] - 1 for at in aggregates}, savepoint
        assert _watermark(savepoint) == {BID_WATERMARK}, savepoint


def _deduplicated(batches: list[dict], keep_last: bool) -> dict:
    """RowTimeDeduplicateRecordsCombiner: per window, a row replaces the kept one if there is none,
    or (keeping the first) its rowtime is earlier, or (the last) not earlier."""
    state: dict = {}
    for batch in batches:
        for at, rows in batch.items():
            for window, bid in rows:
                kept = state.get(at)
                t = _rowtime(bid[0])
                if kept is None or (t >= kept[3] if keep_last else t < kept[3]):
                    state[at] = _bid_row(bid, window)
    return state


@pytest.mark.parametrize(
    ("name", "tvf", "by_item", "keep_last"),
    [
        ("window-deduplicate-asc-tumble-first-row", "tumble", False, False),
        ("window-deduplicate-asc-tumble-first-row-condition-1", "tumble", False, False),
        ("window-deduplicate-asc-tumble-first-row-condition-3", "tumble", False, False),
        ("window-deduplicate-asc-partition-by-item-tumble-first-row", "tumble", True, False),
        ("window-deduplicate-desc-tumble-last-row", "tumble", False, True),
        ("window-deduplicate-desc-partition-by-item-tumble-first-row", "tumble", True, True),
        ("window-deduplicate-asc-hop-first-row", "hop", False, False),
        ("window-deduplicate-asc-cumulate-first-row", "cumulate", False, False),
    ],
)
def test_a_window_deduplicate_keeps_each_open_windows_first_or_last_row(name, tvf, by_item, keep_last):
    """WindowDeduplicateTestPrograms (the program named): ROW_NUMBER() OVER (PARTITION BY
    window_start, window_end[, item] ORDER BY bid_time ASC | DESC) <= 1 (= 1, < 2): per open window
    (and item) the row of the earliest (latest) bid_time, a timer at the window's end - 1 ms."""
    partition = (lambda bid: bid[2]) if by_item else (lambda bid: NO_FIELDS)
    expected = _deduplicated(_buffered_batches(DEDUP_BIDS, WINDOW_TVFS[tvf], partition), keep_last)
    for savepoint in _releases("stream-exec-window-deduplicate_1", name):
        _check_window_operator(savepoint, "window_deduplicate", expected)


# ----------------------------------------------------------------------------- window join

# WindowJoinTestPrograms.SRC_ONE_BEFORE_DATA / SRC_TWO_BEFORE_DATA (ts, id, num, name): row_time =
# TO_TIMESTAMP(ts), WATERMARK row_time - 1 s on each source.
JOIN_LEFT = (
    ("2020-10-10 00:00:01", "L1", 1, "a"),
    ("2020-10-10 00:00:02", "L2", 2, "c"),
    ("2020-10-10 00:00:03", "L3", 2, "x"),
    ("2020-10-10 00:00:04", "L7", 5, "a"),
    ("2020-10-10 00:00:07", "L8", 3, "b"),
    ("2020-10-10 00:00:06", "L6", 6, "b"),
    ("2020-10-10 00:00:08", "L9", 3, "a"),
    ("2020-10-10 00:00:04", "L4", 5, "a"),
    ("2020-10-10 00:00:16", "L10", 4, "b"),
    ("2020-10-10 00:00:32", "L11", 7, None),
    ("2020-10-10 00:00:34", "L12", 1, "b"),
)
JOIN_RIGHT = (
    ("2020-10-10 00:00:01", "R1", 5, "a"),
    ("2020-10-10 00:00:02", "R2", 7, "b"),
    ("2020-10-10 00:00:03", "R3", 7, "f"),
    ("2020-10-10 00:00:04", "R7", 3, "g"),
    ("2020-10-10 00:00:07", "R8", 8, "b"),
    ("2020-10-10 00:00:06", "R6", 6, "b"),
    ("2020-10-10 00:00:08", "R9", 3, "a"),
    ("2020-10-10 00:00:04", "R4", 5, "a"),
    ("2020-10-10 00:00:17", "R17", 4, "k"),
    ("2020-10-10 00:00:31", "R31", 7, None),
    ("2020-10-10 00:00:33", "R33", 1, "b"),
)
# The join's watermark is the lesser of its inputs': the right's, 00:00:32.
JOIN_WATERMARK = min(max(_millis(r[0]) for r in side) for side in (JOIN_LEFT, JOIN_RIGHT)) - WATERMARK_DELAY
JOIN_TVFS = {  # WindowJoinTestPrograms' TUMBLE_TVF, HOP_TVF, CUMULATIVE_TVF
    "tumble": _tumbling(FIVE_SECONDS),
    "hop": _hopping(FIVE_SECONDS, TEN_SECONDS),
    "cumulate": _cumulating(FIVE_SECONDS, TEN_SECONDS),
}


def _window_join_side(
    rows: Iterable[tuple],
    tvf: str,
    keep: Callable[[tuple, tuple], tuple],
    windows: Callable[[int], list[tuple[int, int]]] | None = None,
    watermark: int = JOIN_WATERMARK,
) -> dict:
    """One input's records of the windows the join's watermark has not fired: {(name, window end):
    [kept row]} in arrival order (none of them came late: each input's rows before them are 15 s
    older). A window's rows live until its end - 1 ms fires."""
    state: dict = {}
    for row in rows:
        for window in (windows or JOIN_TVFS[tvf])(_millis(row[0])):
            if window[1] - 1 > watermark:
                state.setdefault((row[3], window[1]), []).append(keep(row, window))
    return state


def _joined_row(row: tuple, window: tuple[int, int]) -> tuple:
    """id, num, name, window_start, window_end: the columns the query reads."""
    return (row[1], row[2], row[3], _rowtime_of(window[0]), _rowtime_of(window[1]))


def _exists_row(row: tuple, window: tuple[int, int]) -> tuple:
    """A semi or anti join's right side keeps only what its condition reads: name and the window."""
    return (row[3], _rowtime_of(window[0]), _rowtime_of(window[1]))


@pytest.mark.parametrize(
    ("name", "tvf", "right_kept"),
    [
        ("window-join-inner-tumble-event-time", "tumble", _joined_row),
        ("window-join-left-tumble-event-time", "tumble", _joined_row),
        ("window-join-right-tumble-event-time", "tumble", _joined_row),
        ("window-join-full-outer-tumble-event-time", "tumble", _joined_row),
        ("window-join-semi-tumble-event-time", "tumble", _exists_row),
        ("window-join-anti-tumble-event-time", "tumble", _exists_row),
        ("window-join-hop-event-time", "hop", _joined_row),
        ("window-join-cumulate-event-time", "cumulate", _joined_row),
    ],
)
def test_a_window_join_keeps_each_sides_rows_of_the_open_windows(name, tvf, right_kept):
    """WindowJoinTestPrograms (the program named): L [type] JOIN R ON L.name = R.name AND the same
    window_start and window_end, over TUMBLE(5 s), HOP(5 s, 10 s) or CUMULATE(5 s, 10 s) of each
    source (EXISTS / NOT EXISTS for semi and anti). The windows ending after 00:00:32 hold 00:00:31
    to 00:00:34 of each side, per name (a NULL name too, which joins nothing), and a timer per name
    and window at its end - 1 ms."""
    left = _window_join_side(JOIN_LEFT, tvf, _joined_row)
    right = _window_join_side(JOIN_RIGHT, tvf, right_kept)
    assert left and right
    for savepoint in _releases("stream-exec-window-join_1", name):
        assert _state(savepoint, "left-records", by_namespace=True) == left, savepoint
        assert _state(savepoint, "right-records", by_namespace=True) == right, savepoint
        assert _timers(savepoint) == {at: at[1] - 1 for at in left.keys() | right.keys()}, savepoint


def test_a_mini_batch_window_join_keeps_the_open_windows_rows():
    """MiniBatchAssignerTestPrograms.MINI_BATCH_ASSIGNER_ROW_TIME (mini batches of 1 s or 5 rows):
    the window join of TUMBLE(1 s) over (L1, a), (L2, c), (L3, x) at 00:00:01 to 00:00:03 and (R1,
    a), (R2, b), (R3, f) likewise, each watermark its rowtime - 1 s: at 00:00:02 the join fired the
    first window (a joined a, the sink's one row) and keeps each side's rows of the next two."""
    left = (
        ("2020-10-10 00:00:01", "L1", 1, "a"),
        ("2020-10-10 00:00:02", "L2", 2, "c"),
        ("2020-10-10 00:00:03", "L3", 2, "x"),
    )
    right = (
        ("2020-10-10 00:00:01", "R1", 5, "a"),
        ("2020-10-10 00:00:02", "R2", 7, "b"),
        ("2020-10-10 00:00:03", "R3", 7, "f"),
    )
    watermark = min(max(_millis(r[0]) for r in side) for side in (left, right)) - WATERMARK_DELAY
    one_second = _tumbling(SECOND)
    expected_left = _window_join_side(left, "tumble", _joined_row, one_second, watermark)
    expected_right = _window_join_side(right, "tumble", _joined_row, one_second, watermark)
    for savepoint in _releases("stream-exec-mini-batch-assigner_1", "mini-batch-assigner-row-time"):
        assert _state(savepoint, "left-records", by_namespace=True) == expected_left, savepoint
        assert _state(savepoint, "right-records", by_namespace=True) == expected_right, savepoint
        windows = expected_left.keys() | expected_right.keys()
        assert _timers(savepoint) == {at: at[1] - 1 for at in windows}, savepoint
