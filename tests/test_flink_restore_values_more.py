"""Flink's own restore-test savepoints (tests/fixtures/restore_tests.py) held to the programs that
made them: the families tests/test_flink_restore_values.py does not check (issue 41).

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
    SESSION_GAP,
    SLICED_WINDOWS,
    WATERMARK_DELAY,
    WINDOW_ROWS,
    WINDOW_WATERMARK,
    _elements,
    _expect_windows,
    _last_window_end,
    _millis,
    _non_time_over_states,
    _plain,
    _reader,
    _releases,
    _rowtime,
    _rowtime_of,
    _same_states,
    _sessions,
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


# ----------------------------------------------------------------------------- interval join

# IntervalJoinTestPrograms.ORDER_BEFORE_DATA (id, order_ts_str) and SHIPMENT_BEFORE_DATA (id,
# order_id, shipment_ts_str); JOIN ON o.id = s.order_id WHERE o.order_ts BETWEEN s.shipment_ts - 5 s
# AND s.shipment_ts + 5 s, each source's watermark its rowtime - 1 s.
ORDERS = ((1, "2020-04-15 08:00:01"), (2, "2020-04-15 08:00:02"), (4, "2020-04-15 08:00:04"))
ORDERS += ((5, "2020-04-15 08:00:05"), (3, "2020-04-15 08:00:03"))
SHIPMENTS = ((2, 1, "2020-04-15 08:00:02"), (5, 2, "2020-04-15 08:00:05"), (6, 5, "2020-04-15 08:00:06"))
SHIPMENTS += ((15, 4, "2020-04-15 08:00:15"), (16, 6, "2020-04-15 08:00:15"))
INTERVAL = 5 * SECOND


def _cache_rows(cache: dict) -> dict:
    """{key: (time, row, flag)} of an interval join cache holding one row per key."""
    rows = {}
    for key, entries in cache.items():
        ((time, [(row, flag)]),) = entries.items()
        rows[key] = (time, row, flag)
    return rows


def _check_flags(left: dict, right: dict, joins: Callable[[tuple, tuple], bool]) -> None:
    """A cached row's flag says whether it joined a row cached before it came (only an outer side's
    flag is set later): of a joined pair exactly one, the later, says so; a row that joined nothing
    says not. Which came first, the order or its shipment, the program does not say."""
    for order in ORDERS:
        partners = [s for s in SHIPMENTS if s[1] == order[0]]
        if not any(joins(order, s) for s in partners):
            assert left[order[0]][2] is False, order
        for shipment in partners:
            flags = {left[order[0]][2], right[shipment[1]][2]}
            assert flags == ({True, False} if joins(order, shipment) else {False}), (order, shipment)
    for shipment in SHIPMENTS:
        if not any(joins(o, shipment) for o in ORDERS):
            assert right[shipment[1]][2] is False, shipment


def _within_interval(order: tuple, shipment: tuple) -> bool:
    return order[0] == shipment[1] and abs(_millis(order[1]) - _millis(shipment[2])) <= INTERVAL


def test_an_event_time_interval_join_caches_every_row_the_watermark_has_not_expired():
    """IntervalJoinTestPrograms.INTERVAL_JOIN_EVENT_TIME (RowTimeIntervalJoin): the join's watermark
    is the lesser input's, the orders' 08:00:04, too early to expire any row (a row goes once the
    watermark passes its time + 5 s), so both caches hold every row under its rowtime, with the
    columns the query reads (id, the string, the rowtime; a shipment's order_id). A key's first row
    on one side sets the other side's cleanup time, its rowtime + 5 s + 1 ms, and a timer there."""
    for savepoint in _releases("stream-exec-interval-join_1", "interval-join-event-time"):
        left = _cache_rows(_state(savepoint, "IntervalJoinLeftCache"))
        right = _cache_rows(_state(savepoint, "IntervalJoinRightCache"))
        assert {k: v[:2] for k, v in left.items()} == {
            o[0]: (_millis(o[1]), (o[0], o[1], _rowtime(o[1]))) for o in ORDERS
        }, savepoint
        assert {k: v[:2] for k, v in right.items()} == {
            s[1]: (_millis(s[2]), (s[1], s[2], _rowtime(s[2]))) for s in SHIPMENTS
        }, savepoint
        _check_flags(left, right, _within_interval)
        cleanup_right = {o[0]: _millis(o[1]) + INTERVAL + 1 for o in ORDERS}
        cleanup_left = {s[1]: _millis(s[2]) + INTERVAL + 1 for s in SHIPMENTS}
        assert _state(savepoint, "IntervalJoinRightTimerState") == cleanup_right, savepoint
        assert _state(savepoint, "IntervalJoinLeftTimerState") == cleanup_left, savepoint
        timers = sorted((k, None, t) for k, t in [*cleanup_right.items(), *cleanup_left.items()])
        assert sorted(_entries(savepoint, "_timer_state/event_user-timers")) == timers, savepoint


def test_a_processing_time_interval_join_caches_every_row_with_its_arrival_time():
    """IntervalJoinTestPrograms.INTERVAL_JOIN_PROC_TIME (ProcTimeIntervalJoin): the rows' processing
    times are not the program's, but their relations are. Every order met its shipment within
    5 s (the sink got all four joins before the savepoint), and none had expired (a row goes 5 s
    after it came): each cache holds every row (the proctime column NULL), a joined pair's later
    row flagged, and each key's cleanup time is its first row's arrival + 5 s + 1 ms on the other
    side, a processing-time timer there."""
    for savepoint in _releases("stream-exec-interval-join_1", "interval-join-proc-time"):
        left = _cache_rows(_state(savepoint, "IntervalJoinLeftCache"))
        right = _cache_rows(_state(savepoint, "IntervalJoinRightCache"))
        assert {k: v[1] for k, v in left.items()} == {o[0]: (o[0], o[1], None) for o in ORDERS}, savepoint
        assert {k: v[1] for k, v in right.items()} == {s[1]: (s[1], s[2], None) for s in SHIPMENTS}, savepoint
        _check_flags(left, right, lambda order, shipment: order[0] == shipment[1])
        cleanup_right = {k: time + INTERVAL + 1 for k, (time, _, _) in left.items()}
        cleanup_left = {k: time + INTERVAL + 1 for k, (time, _, _) in right.items()}
        assert _state(savepoint, "IntervalJoinRightTimerState") == cleanup_right, savepoint
        assert _state(savepoint, "IntervalJoinLeftTimerState") == cleanup_left, savepoint
        timers = {(k, None, t) for k, t in [*cleanup_right.items(), *cleanup_left.items()]}
        assert sorted(_entries(savepoint, "_timer_state/processing_user-timers")) == sorted(timers), savepoint
        assert _entries(savepoint, "_timer_state/event_user-timers") == [], savepoint


# ----------------------------------------------------------------------------- legacy group windows

GROUP_WINDOW_NODE = "stream-exec-group-window-aggregate_1"


def _time_window(start: int, end: int) -> tuple[int, int]:
    """A TimeWindow namespace as it reads: (start, end)."""
    return (start, end)


def test_a_legacy_tumbling_window_keeps_the_accumulators_of_each_open_window():
    """GroupWindowAggregateTestPrograms.GROUP_TUMBLE_WINDOW_EVENT_TIME (the rows of
    WindowAggregateTestPrograms' BEFORE_DATA): SELECT name, TUMBLE_START/END, COUNT(*), SUM(a_int),
    COUNT(DISTINCT comment) ... GROUP BY name, TUMBLE(rowtime, INTERVAL '5' SECOND). The legacy
    WindowOperator keeps state per name and TimeWindow until the watermark (00:00:33) passes the
    window's end - 1 ms: the window 00:00:30 to 00:00:35 of b and of the NULL name."""
    groups: dict = {}
    for row in WINDOW_ROWS:
        start = _millis(row[0]) // FIVE_SECONDS * FIVE_SECONDS
        if start + FIVE_SECONDS - 1 > WINDOW_WATERMARK:
            groups.setdefault((row[3], _time_window(start, start + FIVE_SECONDS)), []).append(row)
    expected = _expect_windows(groups)
    for savepoint in _releases(GROUP_WINDOW_NODE, "group-window-aggregate-tumble-event-time"):
        states = {name: _state(savepoint, name, by_namespace=True) for name in expected}
        states["window-aggs"] = {at: acc[:3] for at, acc in states["window-aggs"].items()}  # the view's placeholder
        assert states == expected, savepoint
        assert _timers(savepoint) == {at: at[1][1] - 1 for at in groups}, savepoint


def test_a_legacy_hopping_window_keeps_panes_and_a_timer_per_window():
    """GroupWindowAggregateTestPrograms.GROUP_HOP_WINDOW_EVENT_TIME: COUNT(*) GROUP BY name,
    HOP(rowtime, INTERVAL '5' SECOND, INTERVAL '10' SECOND). The legacy hopping window keeps its
    accumulators per pane of the slide (5 s) and a timer per window: the pane 00:00:30 to 00:00:35
    of b and of the NULL name, timers for the windows 00:00:25 to 00:00:35 and 00:00:30 to 00:00:40
    (the watermark is 00:00:33)."""
    panes: dict = {}
    windows: set = set()
    for row in WINDOW_ROWS:
        t = _millis(row[0])
        open_windows = [w for w in _hopping(FIVE_SECONDS, TEN_SECONDS)(t) if w[1] - 1 > WINDOW_WATERMARK]
        if open_windows:
            start = t // FIVE_SECONDS * FIVE_SECONDS
            pane = (row[3], _time_window(start, start + FIVE_SECONDS))
            panes[pane] = (panes.get(pane, (0,))[0] + 1,)
            windows |= {(row[3], _time_window(*w)) for w in open_windows}
    for savepoint in _releases(GROUP_WINDOW_NODE, "group-window-aggregate-hop-event-time"):
        assert _state(savepoint, "window-aggs", by_namespace=True) == panes, savepoint
        assert _timers(savepoint) == {at: at[1][1] - 1 for at in windows}, savepoint


def test_a_legacy_session_window_keeps_each_open_session_under_itself():
    """GroupWindowAggregateTestPrograms.GROUP_SESSION_WINDOW_EVENT_TIME: COUNT(*) GROUP BY name,
    SESSION(rowtime, INTERVAL '3' SECOND). Per name, the sessions the watermark (00:00:33) has not
    closed (b's from 00:00:34, the NULL name's from 00:00:32), each its own state window in the
    merging window set's mapping, with its count and a timer at its end - 1 ms."""
    sessions = {
        (name, bounds): rows
        for (name, bounds), rows in _sessions(WINDOW_ROWS, 3 * SECOND, lambda r: r[3]).items()
        if bounds[1] - 1 > WINDOW_WATERMARK
    }
    assert len(sessions) == 2
    mappings: dict = {}
    for name, bounds in sessions:
        mappings.setdefault(name, {})[bounds] = bounds
    for savepoint in _releases(GROUP_WINDOW_NODE, "group-window-aggregate-session-event-time"):
        assert _state(savepoint, "session-window-mapping") == mappings, savepoint
        assert _state(savepoint, "window-aggs", by_namespace=True) == {
            at: (len(rows),) for at, rows in sessions.items()
        }
        assert _timers(savepoint) == {at: at[1][1] - 1 for at in sessions}, savepoint


# ----------------------------------------------------------------------------- distinct-split windows

DISTINCT_BUCKETS = 1024  # table.optimizer.distinct-agg.split.bucket-num's default


def _java_string_hash(text: str) -> int:
    """Java's String.hashCode (HASH_CODE of a STRING), as a signed int."""
    units = text.encode("utf-16-be")
    h = 0
    for (unit,) in struct.iter_unpack(">H", units):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _bucket(comment: str | None) -> int | None:
    """The split's bucket, MOD(HASH_CODE(comment), 1024) (SplitAggregateRule): NULL for a NULL
    comment. HASH_CODE of a string is the absolute value of its Java hashCode (the planner's own
    test has HASH_CODE('aaaadfg') = 1236857883, whose hashCode is -1236857883)."""
    if comment is None:
        return None
    return abs(_java_string_hash(comment)) % DISTINCT_BUCKETS


@pytest.mark.parametrize(
    ("kind", "offset", "phases"),
    [
        ("tumble", 0, "-two-phase"),
        ("tumble", SECOND, "-two-phase"),
        ("hop", 0, "-two-phase"),
        ("hop", SECOND, "-two-phase"),
        ("cumulate", 0, "-two-phase"),
        ("cumulate", SECOND, ""),
    ],
)
def test_a_distinct_split_window_aggregate_keeps_each_bucket_of_each_open_slice(kind, offset, phases):
    """WindowAggregateTestPrograms' ``...-distinct-split`` programs (DistinctAggSplit: the planner's
    table.optimizer.distinct-agg.split.enabled): the same SELECT as the other window aggregates
    (COUNT(*), SUM(a_int), COUNT(DISTINCT comment) per name and window), split into an aggregate per
    name and bucket of the comment's hash, then one per name. The first holds the open slice's
    accumulators per (name, bucket): (b, 751) for Comment#3, (NULL, NULL) for the NULL comment; the
    second has nothing yet (the first has not fired); both keep the watermark, 00:00:33."""
    size, step = SLICED_WINDOWS[kind]
    groups: dict = {}
    for row in WINDOW_ROWS:
        slice_end = (_millis(row[0]) - offset) // step * step + offset + step
        if _last_window_end(kind, slice_end, size, step, offset) - 1 > WINDOW_WATERMARK:
            groups.setdefault(((row[3], _bucket(row[2])), slice_end), []).append(row)
    assert {key for key, _ in groups} == {("b", 751), (None, None)}
    expected = _expect_windows(groups)
    name = f"window-aggregate-{kind}-event-time{phases}{'-with-offset' if offset else ''}-distinct-split"
    for savepoint in _releases("stream-exec-window-aggregate_1", name):
        partial, final = sorted(_states(savepoint, "window-aggs", by_namespace=True), key=len, reverse=True)
        assert final == {}, savepoint
        states = {name: _state(savepoint, name, by_namespace=True) for name in expected if name != "window-aggs"}
        states["window-aggs"] = {at: acc[:3] for at, acc in partial.items()}  # the view's placeholder
        assert states == expected, savepoint
        assert _timers(savepoint) == {at: at[1] - 1 for at in groups}, savepoint
        assert _watermark(savepoint) == {WINDOW_WATERMARK}, savepoint


def test_a_distinct_split_partitioned_session_keeps_retractable_accumulators_per_session():
    """WindowAggregateTestPrograms.SESSION_WINDOW_PARTITION_EVENT_TIME_TWO_PHASE_DISTINCT_SPLIT: the
    partitioned session window (gap 5 s) of the same SELECT, its accumulators retractable under the
    split: COUNT(*), SUM(a_int) and SUM's count, COUNT(DISTINCT comment). Per name, the sessions the
    watermark (00:00:33) has not closed, mapped to themselves, a timer at each end - 1 ms."""
    sessions = {
        at: rows
        for at, rows in _sessions(WINDOW_ROWS, SESSION_GAP, lambda r: r[3]).items()
        if at[1][1] - 1 > WINDOW_WATERMARK
    }
    expected = _expect_windows(sessions)
    expected["window-aggs"] = {
        at: (acc[0], acc[1], len(sessions[at]), acc[2]) for at, acc in expected["window-aggs"].items()
    }
    mappings: dict = {}
    for name, bounds in sessions:
        mappings.setdefault(name, {})[bounds] = bounds
    savepoints = _releases(
        "stream-exec-window-aggregate_1", "window-aggregate-session-partition-event-time-two-phase-distinct-split"
    )
    for savepoint in savepoints:
        states = {name: _state(savepoint, name, by_namespace=True) for name in expected}
        states["window-aggs"] = {at: acc[:4] for at, acc in states["window-aggs"].items()}
        assert states == expected, savepoint
        assert _state(savepoint, "session-window-mapping") == mappings, savepoint
        assert _timers(savepoint) == {at: at[1][1] - 1 for at in sessions}, savepoint
        assert _watermark(savepoint) == {WINDOW_WATERMARK}, savepoint


def test_a_distinct_split_session_over_every_row_aggregates_each_closed_session_retractably():
    """WindowAggregateTestPrograms.SESSION_WINDOW_EVENT_TIME_TWO_PHASE_DISTINCT_SPLIT: the session
    window (gap 5 s) over every row is a window table function before a group aggregate (GROUP BY
    name, window_start, window_end). The function buffers the open session's rows (00:00:32 and
    00:00:34, kept under the window of its first row) and counts the rows it took; the aggregate
    holds each closed session's accumulators per name, retractable under the split: COUNT(*),
    SUM(a_int), SUM's count and COUNT(DISTINCT comment), the distinct view counting each comment's
    rows and the NULL comments apart."""
    sessions = _sessions(WINDOW_ROWS, SESSION_GAP, lambda r: NO_FIELDS)
    closed = [(bounds, rows) for (_, bounds), rows in sessions.items() if bounds[1] - 1 <= WINDOW_WATERMARK]
    ((open_session, buffered),) = [(b, rows) for (_, b), rows in sessions.items() if b[1] - 1 > WINDOW_WATERMARK]
    groups: dict = {}
    for (start, end), rows in closed:
        for row in rows:
            groups.setdefault((row[3], _rowtime_of(start), _rowtime_of(end)), []).append(row)
    accumulators = {
        g: (len(rs), sum(r[1] for r in rs), len(rs), len({r[2] for r in rs} - {None})) for g, rs in groups.items()
    }
    views: dict = {}
    nulls: dict = {}
    for g, rs in groups.items():
        for r in rs:
            if r[2] is None:
                nulls[g] = nulls.get(g, 0) + 1
            else:
                views.setdefault(g, {})[r[2]] = views.get(g, {}).get(r[2], 0) + 1
    first = _millis(buffered[0][0])
    savepoints = _releases(
        "stream-exec-window-aggregate_1", "window-aggregate-session-event-time-two-phase-distinct-split"
    )
    for savepoint in savepoints:
        assert {g: acc[:4] for g, acc in _state(savepoint, "accState").items()} == accumulators, savepoint
        assert _state(savepoint, "distinctAcc_0") == views, savepoint
        assert _state(savepoint, "distinctAcc_0_null_state") == nulls, savepoint
        assert _state(savepoint, "session-window-tvf-counter") == {NO_FIELDS: len(WINDOW_ROWS)}, savepoint
        assert _state(savepoint, "session-window-mapping") == {NO_FIELDS: {open_session: (first, first + SESSION_GAP)}}
        assert _timers(savepoint, name="session-window-tvf-timers") == {(NO_FIELDS, open_session): open_session[1] - 1}


# ----------------------------------------------------------------------------- window TVF aggregates

# common/WindowTableFunctionTestPrograms.BEFORE_DATA (ts, price, item): bid_time = TO_TIMESTAMP(ts),
# WATERMARK bid_time - 1 s.
TVF_BIDS = (
    ("2020-04-15 08:00:05", "4.00", "C"),
    ("2020-04-15 08:00:07", "2.00", "A"),
    ("2020-04-15 08:00:09", "5.00", "D"),
    ("2020-04-15 08:00:11", "3.00", "B"),
    ("2020-04-15 08:00:13", "1.00", "E"),
    ("2020-04-15 08:00:17", "6.00", "F"),
)
TVF_WATERMARK = max(_millis(b[0]) for b in TVF_BIDS) - WATERMARK_DELAY
TVF_NODE = "stream-exec-window-table-function_1"


@pytest.mark.parametrize(
    ("kind", "size", "step", "with_count"),
    [
        ("tumble", TEN_SECONDS, TEN_SECONDS, False),
        ("hop", TEN_SECONDS, FIVE_SECONDS, True),
        ("cumulate", TEN_SECONDS, FIVE_SECONDS, False),
    ],
)
def test_a_window_tvf_aggregate_keeps_the_sums_of_its_open_slices(kind, size, step, with_count):
    """WindowTableFunctionTestPrograms.WINDOW_TABLE_FUNCTION_{TUMBLE,HOP,CUMULATE}_TVF_AGG: SELECT
    window_start, window_end, SUM(price) ... GROUP BY window_start, window_end over TUMBLE(10 s),
    HOP(5 s, 10 s) or CUMULATE(5 s, 10 s). Per slice (the window, or its 5 s step) whose last window
    is open at the watermark 08:00:16, the sum (and, hopping, the row count that says whether a
    window of merged slices is empty), under the empty key; a timer only at the next window's end -
    1 ms (the earlier slice's own window fired)."""
    sums: dict = {}
    for ts, price, _ in TVF_BIDS:
        slice_end = _millis(ts) // step * step + step
        if _last_window_end(kind, slice_end, size, step, 0) - 1 > TVF_WATERMARK:
            total, count = sums.get((NO_FIELDS, slice_end), (Decimal(0), 0))
            sums[(NO_FIELDS, slice_end)] = (total + Decimal(price), count + 1)
    expected = {at: acc if with_count else acc[:1] for at, acc in sums.items()}
    next_end = min(at[1] for at in sums if at[1] - 1 > TVF_WATERMARK)
    for savepoint in _releases(TVF_NODE, f"window-table-function-{kind}-tvf-agg"):
        assert _state(savepoint, "window-aggs", by_namespace=True) == expected, savepoint
        assert _timers(savepoint) == {(NO_FIELDS, next_end): next_end - 1}, savepoint
        assert _watermark(savepoint) == {TVF_WATERMARK}, savepoint


# ----------------------------------------------------------------------------- processing-time windows


@pytest.mark.parametrize(
    ("node", "name", "states"),
    [
        (GROUP_WINDOW_NODE, "group-window-aggregate-tumble-proc-time", ("window-aggs", "distinctAcc_0")),
        (GROUP_WINDOW_NODE, "group-window-aggregate-hop-proc-time", ("window-aggs",)),
        (GROUP_WINDOW_NODE, "group-window-aggregate-session-proc-time", ("window-aggs", "session-window-mapping")),
        (TVF_NODE, "window-table-function-tumble-tvf-agg-proc-time", ("window-aggs",)),
        (TVF_NODE, "window-table-function-hop-tvf-agg-proc-time", ("window-aggs",)),
        (TVF_NODE, "window-table-function-cumulate-tvf-agg-proc-time", ("window-aggs",)),
    ],
)
def test_a_processing_time_window_whose_windows_all_fired_holds_no_accumulator(node, name, states):
    """GroupWindowAggregateTestPrograms.GROUP_{TUMBLE,HOP,SESSION}_WINDOW_PROC_TIME and
    WindowTableFunctionTestPrograms.WINDOW_TABLE_FUNCTION_*_TVF_AGG_PROC_TIME: processing-time
    windows over rows that all came within one window. The times are the machine's, not the
    program's, but the sink's rows before the savepoint are every window's result over all rows
    (``+I[a, 6, 18, 3]``, ``+I[21.00]`` twice for the two hopping windows, ...): every window fired
    and left no accumulator, and no event-time timer. An operator keeping the watermark keeps the
    source's, event time's, all the same: 08:00:16 for the bids."""
    for savepoint in _releases(node, name):
        for state in states:
            assert _states(savepoint, state) == [{}], (savepoint, state)
        assert _timers(savepoint) == {}, savepoint
        if node == TVF_NODE:
            assert _watermark(savepoint) == {TVF_WATERMARK}, savepoint


# ----------------------------------------------------------------------------- changelog normalize

INSERTS = ("INSERT", "UPDATE_AFTER")  # a row kind that adds a row; DELETE and UPDATE_BEFORE take one away


def _latest_rows(changes: Iterable[tuple[str, tuple]], keep: Callable[[tuple], bool] = lambda row: True) -> dict:
    """ChangelogNormalize (ProcTimeDeduplicateKeepLastRowFunction): per primary key (the first
    column) the latest row; a DELETE forgets the key, and so does a row the pushed-down filter
    rejects (its predecessor is retracted downstream)."""
    state: dict = {}
    for kind, row in changes:
        if kind in INSERTS and keep(row):
            state[row[0]] = row
        elif kind in INSERTS or kind == "DELETE":
            state.pop(row[0], None)
    return state


# ChangelogNormalizeTestPrograms.BEFORE_DATA (a, b, c; PRIMARY KEY a) and UPSERT_SOURCE's rows.
CHANGELOG_ROWS = (
    ("INSERT", ("one", 1, "a")),
    ("INSERT", ("two", 2, "b")),
    ("UPDATE_BEFORE", ("one", 1, "a")),
    ("UPDATE_AFTER", ("one", 1, "aa")),
    ("INSERT", ("three", 3, "c")),
    ("DELETE", ("two", 2, "b")),
    ("UPDATE_BEFORE", ("three", 3, "c")),
    ("UPDATE_AFTER", ("three", 3, "cc")),
)
UPSERT_ROWS = (
    ("UPDATE_AFTER", ("one", 1, "a")),
    ("UPDATE_AFTER", ("two", 2, "b")),
    ("UPDATE_AFTER", ("one", 1, "aa")),
    ("UPDATE_AFTER", ("three", 3, "c")),
    ("DELETE", ("two", 2, "b")),
    ("UPDATE_AFTER", ("three", 3, "cc")),
)
# UPSERT_SOURCE_WITH_FILTER(_ON_WATERMARK) (2.1 and after): a, b, c (and d, TO_TIMESTAMP_LTZ of 1 to 5 ms).
FILTERED_UPSERT_ROWS = (
    ("UPDATE_AFTER", ("one", 1, "a")),
    ("UPDATE_AFTER", ("one", 2, "b")),
    ("UPDATE_AFTER", ("one", 12, "b")),
    ("UPDATE_AFTER", ("one", 13, "b")),
    ("UPDATE_AFTER", ("three", 3, "cc")),
)


@pytest.mark.parametrize(
    ("name", "changes"),
    [
        ("changelog-normalize-source", CHANGELOG_ROWS),
        ("changelog-normalize-source-mini-batch", CHANGELOG_ROWS),
        ("changelog-normalize-upsert", UPSERT_ROWS),
    ],
)
def test_a_changelog_normalize_keeps_the_latest_row_per_primary_key(name, changes):
    """ChangelogNormalizeTestPrograms.CHANGELOG_SOURCE(_MINI_BATCH) (I, UB, UA, D) and UPSERT_SOURCE
    (UA, D), TABLE_EXEC_SOURCE_CDC_EVENTS_DUPLICATE on: SELECT a, b, c FROM source_t through a
    ChangelogNormalize keyed by a. one's last row is aa, two was deleted, three's is cc (the mini
    batch of 2 rows flushed as the savepoint came)."""
    expected = _latest_rows(changes)
    assert set(expected) == {"one", "three"}
    for savepoint in _releases("stream-exec-changelog-normalize_1", name):
        assert _state(savepoint, "deduplicate-state") == expected, savepoint


@pytest.mark.parametrize("with_watermark", [False, True])
def test_a_changelog_normalize_with_a_pushed_filter_forgets_a_key_whose_row_fails_it(with_watermark):
    """ChangelogNormalizeTestPrograms.UPSERT_SOURCE_WITH_FILTER(_ON_WATERMARK): WHERE b < 10 (and a
    CURRENT_WATERMARK(d) condition that, with no watermark yet, reduces to it: the sink's rows are
    the same) pushed into the normalize. one's rows 1 and 2 pass; 12 fails, so one is retracted
    (-D[one, 2, b]) and forgotten; three, 3 stays, with d = 5 ms where the source has it."""
    expected = _latest_rows(FILTERED_UPSERT_ROWS, keep=lambda row: row[1] < 10)
    assert set(expected) == {"three"}
    if with_watermark:  # d = Instant.ofEpochMilli(5) for three's row, a TIMESTAMP_LTZ
        expected = {k: (*row, 5) for k, row in expected.items()}
    name = f"changelog-normalize-upsert-filter{'-watermark' if with_watermark else ''}"
    for savepoint in _releases("stream-exec-changelog-normalize_1", name):
        state = _state(savepoint, "deduplicate-state")
        if with_watermark:
            state = {k: (*row[:3], round(row[3].timestamp() * 1000)) for k, row in state.items()}
        assert state == expected, savepoint


# ----------------------------------------------------------------------------- temporal join, temporal sort

# TemporalJoinTestPrograms.ORDERS (amount, currency, order_time) and RATES (currency, rate,
# rate_time; PRIMARY KEY currency), each WATERMARK FOR rowtime AS rowtime: producedBeforeRestore.
TEMPORAL_ORDERS = ((2, "Euro", "2020-10-10 00:00:42"), (1, "USD", "2020-10-10 00:00:43"))
TEMPORAL_ORDERS += ((50, "Yen", "2020-10-10 00:00:44"), (3, "Euro", "2020-10-10 00:00:45"))
TEMPORAL_RATES = (("USD", 102, "2020-10-10 00:00:41"), ("Euro", 114, "2020-10-10 00:00:41"))
TEMPORAL_RATES += (
    ("Yen", 1, "2020-10-10 00:00:41"),
    ("Euro", 116, "2020-10-10 00:00:45"),
    ("Euro", 119, "2020-10-10 00:00:47"),
)


@pytest.mark.parametrize(
    "name",
    [
        "temporal-join-table-join",
        "temporal-join-table-join-nested-key",
        "temporal-join-table-join-key-from-map",
        "temporal-join-temporal-function",
    ],
)
def test_a_temporal_join_keeps_the_rate_versions_the_watermark_still_needs(name):
    """TemporalJoinTestPrograms (the program named): Orders JOIN RatesHistory FOR SYSTEM_TIME AS OF
    o.rowtime ON the currency (from the row, a nested row, a map, or the Rates temporal function)
    (TemporalRowTimeJoinOperator). The join's watermark is the lesser input's, the orders' 00:00:45:
    every order has been joined and dropped (the sink holds all four), each currency counted its
    orders (next-index), and of the rates the last version at or before the watermark and every
    later one are kept, by rate_time: Euro's 116 and 119, USD's and Yen's only version."""
    watermark = min(max(_millis(r[-1]) for r in side) for side in (TEMPORAL_ORDERS, TEMPORAL_RATES))
    rates: dict = {}
    for currency, rate, ts in TEMPORAL_RATES:
        rates.setdefault(currency, {})[_millis(ts)] = (currency, rate, _rowtime(ts))
    kept = {}
    for currency, versions in rates.items():
        settled = max(t for t in versions if t <= watermark)
        kept[currency] = {t: row for t, row in versions.items() if t >= settled}
    orders: dict = {}
    for _, currency, _ in TEMPORAL_ORDERS:
        orders[currency] = orders.get(currency, 0) + 1
    for savepoint in _releases("stream-exec-temporal-join_1", name):
        assert _state(savepoint, "left") == {}, savepoint
        assert _state(savepoint, "next-index") == orders, savepoint
        assert _state(savepoint, "right") == kept, savepoint


# TemporalSortTestPrograms.BEFORE_DATA (ts, int, double): rowtime = TO_TIMESTAMP(ts), WATERMARK rowtime - 1 s.
SORT_ROWS = (
    ("2020-10-10 00:00:01", 1, 1.0),
    ("2020-10-10 00:00:02", 2, 2.0),
    ("2020-10-10 00:00:07", 5, 6.0),
    ("2020-10-10 00:00:07", 3, 3.0),
    ("2020-10-10 00:00:06", 6, 6.0),
    ("2020-10-10 00:00:08", 3, None),
    ("2020-10-10 00:00:04", 5, 5.0),
    ("2020-10-10 00:00:16", 4, 4.0),
)


def test_a_rowtime_sort_buffers_the_rows_the_watermark_has_not_reached():
    """TemporalSortTestPrograms.TEMPORAL_SORT_ROWTIME: SELECT `int` ... ORDER BY rowtime, `double`
    (RowTimeSortOperator, one key). A row after the last emitted rowtime is kept under its rowtime
    with a timer there; a timer emits and drops its rows and becomes the last emitted time. 00:00:04
    comes after 00:00:07 was emitted and is dropped; 00:00:16 waits (the watermark is 00:00:15)."""
    data: dict = {}
    last = None
    timers = _EventTimers()

    def on_timer(_, t: int) -> None:
        nonlocal last
        if data.pop(t, None) is not None:
            last = t

    for ts, value, double in SORT_ROWS:
        t = _millis(ts)
        if last is None or t > last:
            if t not in data:
                timers.pending.add((NO_FIELDS, t))
            data.setdefault(t, []).append((value, _rowtime(ts), double))
        timers.advance(max(timers.watermark, t - WATERMARK_DELAY), on_timer)
    for savepoint in _releases("stream-exec-temporal-sort_1", "temporal-sort-rowtime"):
        assert _state(savepoint, "dataState") == {NO_FIELDS: data}, savepoint
        assert _state(savepoint, "lastTriggeringTsState") == {NO_FIELDS: last}, savepoint
        assert _entries(savepoint, "_timer_state/event_user-timers") == timers.entries(), savepoint


# ----------------------------------------------------------------------------- multi-join

MULTI_JOIN_NODE = "stream-exec-multi-join_1"
MULTI_JOIN_RELEASES = ("2.2.0", "2.3.0")  # 2.1.1's programs (other sources' changelog modes) took other savepoints


def _multi_join_input(
    changes: Iterable[tuple[str, tuple]],
    join_key: Callable[[tuple], object],
    kept: Callable[[tuple], tuple],
    *,
    first: bool,
    unique: Callable[[tuple], tuple] | None = None,
    unique_is_join_key: bool = False,
) -> dict:
    """One input's MultiJoinStateViews state, keyed by the join key: an input with a unique key
    keeps its (kept) row under the unique key, after the join key as a row of its own unless the
    input is the first (InputSideHasUniqueKey) or the unique key is the join key
    (JoinKeyContainsUniqueKey); an input without one counts each row, under the row, after the join
    key unless first (InputSideHasNoUniqueKey). A DELETE or UPDATE_BEFORE takes its row away."""
    state: dict = {}
    for kind, row in changes:
        key, record = join_key(row), kept(row)
        records = state.setdefault(key, {})
        if unique is None:
            at = record if first else ((key,), record)
            count = records.get(at, 0) + (1 if kind in INSERTS else -1)
            records.pop(at, None)
            if count:
                records[at] = count
        else:
            at = unique(row) if first or unique_is_join_key else ((key,), unique(row))
            if kind in INSERTS:
                records[at] = record
            else:
                records.pop(at, None)
        if not records:
            del state[key]
    return state


def _inserts(*rows: tuple) -> tuple:
    return tuple(("INSERT", row) for row in rows)


# MultiJoinTestPrograms' Users (user_id, name), Orders (user_id, order_id), Payments (user_id,
# payment_id) of the three-way programs with restore: producedBeforeRestore, no primary keys.
THREE_WAY_USERS = _inserts(("1", "Gus"), ("2", "Bob"))
THREE_WAY_ORDERS = _inserts(("1", "order1"), ("2", "order2"))
THREE_WAY_PAYMENTS = _inserts(("1", "payment1"), ("2", "payment2"))


def _first_column(row: tuple) -> object:
    return row[0]


def _whole(row: tuple) -> tuple:
    return row


@pytest.mark.parametrize(
    "name",
    [
        "three-way-inner-join-with-restore",
        "three-way-left-outer-join-with-restore",
        "three-way-inner-join-with-ttl-hints-with-restore",
    ],
)
def test_a_three_way_multi_join_counts_each_inputs_rows_per_user(name):
    """MultiJoinTestPrograms.MULTI_JOIN_THREE_WAY_{INNER,LEFT_OUTER}_JOIN(_WITH_TTL_HINTS)_WITH_RESTORE
    (TABLE_OPTIMIZER_MULTI_JOIN_ENABLED): Users u [LEFT] JOIN Orders o ON u.user_id = o.user_id
    [LEFT] JOIN Payments p ON u.user_id = p.user_id, one StreamingMultiJoinOperator keyed by
    user_id. No input has a unique key: each counts its rows. The STATE_TTL hint ('u' 1 d, 'p' 2 d)
    puts TTL on the Users' and Payments' states only."""
    expected = [
        _multi_join_input(THREE_WAY_USERS, _first_column, _whole, first=True),
        _multi_join_input(THREE_WAY_ORDERS, _first_column, _whole, first=False),
        _multi_join_input(THREE_WAY_PAYMENTS, _first_column, _whole, first=False),
    ]
    for version in MULTI_JOIN_RELEASES:
        savepoint = program(version, MULTI_JOIN_NODE, name)
        assert [_state(savepoint, f"multi-join-input-{i}") for i in range(3)] == expected, savepoint
        reader = _reader(savepoint)
        with_ttl = [reader.find(f"multi-join-input-{i}")[1].value.child("value").kind == "ttl" for i in range(3)]
        assert with_ttl == ([True, False, True] if "ttl" in name else [False, False, False]), savepoint


# MULTI_JOIN_FOUR_WAY_COMPLEX_WITH_RESTORE and MULTI_JOIN_FOUR_WAY_NO_COMMON_JOIN_KEY_RESTORE:
# Users (name, user_id_0 PRIMARY KEY, cash; upsert, Bob deleted), Orders (order_id PRIMARY KEY,
# product, user_id_1), Payments (user_id_2, payment_id PRIMARY KEY, price), Shipments (location,
# user_id_3): producedBeforeRestore.
FOUR_WAY_USERS = (
    ("INSERT", ("Gus", "1", 100)),
    ("INSERT", ("Nomad", "3", 50)),
    ("INSERT", ("Bob", "2", 20)),
    ("DELETE", ("Bob", "2", 20)),
)
FOUR_WAY_ORDERS = _inserts(
    ("order2", "ProdB", "2"), ("order0", "ProdB", "1"), ("order3", "ProdC", "3"), ("order1", "ProdA", "1")
)
FOUR_WAY_SHIPMENTS = _inserts(("Paris", "2"), ("London", "1"), ("New York", "3"))


def _four_way_payments(ids: tuple[str, str, str]) -> tuple:
    return _inserts(("3", ids[0], 30), ("1", ids[1], 50), ("2", ids[2], -5))


def test_a_four_way_multi_join_keeps_users_orders_payments_and_counted_shipments():
    """MultiJoinTestPrograms.MULTI_JOIN_FOUR_WAY_COMPLEX_WITH_RESTORE: Users LEFT JOIN Orders ON
    user_id_0 = user_id_1 JOIN Payments ON user_id_0 = user_id_2 AND (cash >= price OR price < 0)
    LEFT JOIN Shipments ON user_id_2 = user_id_3, keyed by the user id. The Users' upserts pass a
    ChangelogNormalize (the latest row per user_id_0; Bob deleted); the multi-join keeps the users
    by their key, the orders and payments by (user id, primary key) with the columns the query reads
    (no product), and counts the shipments, which have no key."""
    users = _latest_rows([(kind, (row[1], row)) for kind, row in FOUR_WAY_USERS])
    users = {key: row for key, (_, row) in users.items()}
    expected = [
        _multi_join_input(FOUR_WAY_USERS, lambda r: r[1], _whole, first=True, unique=lambda r: (r[1],)),
        _multi_join_input(
            FOUR_WAY_ORDERS, lambda r: r[2], lambda r: (r[0], r[2]), first=False, unique=lambda r: (r[0],)
        ),
        _multi_join_input(
            _four_way_payments(("payment3", "payment1", "payment2")),
            _first_column,
            _whole,
            first=False,
            unique=lambda r: (r[1],),
        ),
        _multi_join_input(FOUR_WAY_SHIPMENTS, lambda r: r[1], _whole, first=False),
    ]
    for version in MULTI_JOIN_RELEASES:
        savepoint = program(version, MULTI_JOIN_NODE, "four-way-complex-updating-join-with-restore")
        assert _state(savepoint, "deduplicate-state") == users, savepoint
        assert [_state(savepoint, f"multi-join-input-{i}") for i in range(4)] == expected, savepoint


def test_a_four_way_join_without_a_common_key_chains_two_multi_joins():
    """MultiJoinTestPrograms.MULTI_JOIN_FOUR_WAY_NO_COMMON_JOIN_KEY_RESTORE: Users LEFT JOIN Orders
    ON user_id_0 = user_id_1 JOIN Payments ON user_id_0 = user_id_2 LEFT JOIN Shipments ON
    payment_id = user_id_3. The first three share the user id: one multi-join (no cash nor price
    read); its result, (name, user id, order_id, payment_id) per user and order, has no unique key
    and meets the Shipments in a second multi-join keyed by payment_id, which counts both."""
    users = {
        row[1]: row[:2]
        for row in _latest_rows([(k, (r[1], r)) for k, r in FOUR_WAY_USERS]).values()
        for row in [row[1]]
    }
    payments = _four_way_payments(("3", "1", "2"))
    orders = _multi_join_input(
        FOUR_WAY_ORDERS, lambda r: r[2], lambda r: (r[0], r[2]), first=False, unique=lambda r: (r[0],)
    )
    first = [
        _multi_join_input(_inserts(*users.values()), lambda r: r[1], _whole, first=True, unique=lambda r: (r[1],)),
        orders,
        _multi_join_input(payments, _first_column, lambda r: r[:2], first=False, unique=lambda r: (r[1],)),
    ]
    joined = [  # u LEFT JOIN o JOIN p: every user with a payment, each of its orders (or none)
        (name, uid, order[0], payment[1])
        for name, uid in users.values()
        for _, payment in payments
        if payment[0] == uid
        for order in [o for _, o in FOUR_WAY_ORDERS if o[2] == uid] or [(None,)]
    ]
    second = [
        _multi_join_input(_inserts(*joined), lambda r: r[3], _whole, first=True),
        _multi_join_input(FOUR_WAY_SHIPMENTS, lambda r: r[1], _whole, first=False),
    ]
    for version in MULTI_JOIN_RELEASES:
        savepoint = program(version, MULTI_JOIN_NODE, "four-way-join-no-common-join-key-with-restore")
        assert _state(savepoint, "deduplicate-state") == users, savepoint
        assert _same_states(_states(savepoint, "multi-join-input-0"), [first[0], second[0]]), savepoint
        assert _same_states(_states(savepoint, "multi-join-input-1"), [first[1], second[1]]), savepoint
        assert _state(savepoint, "multi-join-input-2") == first[2], savepoint


def test_a_multi_join_of_inputs_with_composite_keys_keeps_them_by_key():
    """MultiJoinTestPrograms.MULTI_JOIN_FOUR_WAY_COMPLEX_PRESERVES_UPSERT_KEY_WITH_RESTORE: Users
    (user_id_0 PRIMARY KEY) JOIN Orders (PRIMARY KEY order_id, user_id_1) ON the user AND product IS
    NOT NULL JOIN Payments (PRIMARY KEY payment_id, user_id_2) ON the user AND price >= 0 JOIN Address
    (PRIMARY KEY user_id_3) ON the user AND location IS NOT NULL. Orders and Payments keep their
    composite keys' columns after the user id; Address's key is the user id itself."""
    expected = [
        _multi_join_input(
            _inserts(("1", "Gus"), ("3", "Joe")), _first_column, _whole, first=True, unique=lambda r: (r[0],)
        ),
        _multi_join_input(
            _inserts(("order1", "1", "ProdA")), lambda r: r[1], lambda r: r[:2], first=False, unique=lambda r: r[:2]
        ),
        _multi_join_input(
            _inserts(("payment1", "1", 100), ("payment3", "3", 300)),
            lambda r: r[1],
            lambda r: r[:2],
            first=False,
            unique=lambda r: r[:2],
        ),
        _multi_join_input(
            _inserts(("1", "London"), ("3", "Berlin")),
            _first_column,
            _whole,
            first=False,
            unique=lambda r: (r[0],),
            unique_is_join_key=True,
        ),
    ]
    for version in MULTI_JOIN_RELEASES:
        savepoint = program(version, MULTI_JOIN_NODE, "four-way-complex-preserves-upsert-key-with-restore")
        assert [_state(savepoint, f"multi-join-input-{i}") for i in range(4)] == expected, savepoint


@pytest.mark.parametrize(
    ("name", "inputs"),
    [
        (
            # Users (user_id_0 PRIMARY KEY, name), OrdersWithRowtime (order_id PRIMARY KEY, user_id_1,
            # rowtime), Payments (payment_id PRIMARY KEY, price, user_id_2; payment_id not read).
            "three-way-join-with-time-attributes-with-restore",
            [
                (_inserts(("1", "Gus")), _first_column, _whole, (lambda r: (r[0],)), False),
                (
                    _inserts(("order1", "1", _rowtime("2024-01-01 12:00:00.123"))),
                    lambda r: r[1],
                    _whole,
                    (lambda r: (r[0],)),
                    False,
                ),
                (_inserts(("payment1", 100, "1")), lambda r: r[2], lambda r: r[1:], None, False),
            ],
        ),
        (
            # Orders (user_id, order_id, product; PRIMARY KEY (user_id, order_id)) LEFT JOIN Users (user_id PRIMARY KEY,
            # shard_id, description; description not read).
            "two-way-left-join-preserves-upsert-key-with-restore",
            [
                (
                    (("INSERT", (1, 1, "a")), ("UPDATE_AFTER", (1, 1, "a_updated"))),
                    _first_column,
                    _whole,
                    (lambda r: r[:2]),
                    False,
                ),
                (_inserts((1, 1, "shard_a")), _first_column, lambda r: r[:2], (lambda r: (r[0],)), True),
            ],
        ),
        (
            # Users (user_id PRIMARY KEY, shard_id, description) JOIN Orders (user_id, order_id)
            # JOIN Payments (user_id, payment_id), each keyed (user_id, its id); product not read.
            "three-way-upsert-preserves-key-with-restore",
            [
                (_inserts((1, 1, "shard_a")), _first_column, lambda r: (r[0], r[2]), (lambda r: (r[0],)), False),
                (_inserts((1, 1, "a"), (1, 2, "b")), _first_column, lambda r: r[:2], (lambda r: r[:2]), False),
                (_inserts((1, 1, "a"), (1, 2, "b")), _first_column, lambda r: r[:2], (lambda r: r[:2]), False),
            ],
        ),
    ],
)
def test_a_multi_join_keeps_each_inputs_rows_by_unique_key_or_count(name, inputs):
    """MultiJoinTestPrograms.MULTI_JOIN_WITH_TIME_ATTRIBUTES_MATERIALIZATION_WITH_RESTORE,
    MULTI_JOIN_TWO_WAY_LEFT_JOIN_PRESERVES_UPSERT_KEY_WITH_RESTORE and
    MULTI_JOIN_THREE_WAY_JOIN_PRESERVES_UPSERT_KEY_WITH_RESTORE (the program named): each input's
    rows before the savepoint (a_updated replacing a), keyed by the user id, under their unique key
    (Payments without its key read, counted), with the columns the query reads (the proctime
    attribute not kept, the rowtime kept)."""
    expected = [
        _multi_join_input(changes, key, kept, first=i == 0, unique=unique, unique_is_join_key=by_join_key)
        for i, (changes, key, kept, unique, by_join_key) in enumerate(inputs)
    ]
    for version in MULTI_JOIN_RELEASES:
        savepoint = program(version, MULTI_JOIN_NODE, name)
        assert [_state(savepoint, f"multi-join-input-{i}") for i in range(len(inputs))] == expected, savepoint


# ----------------------------------------------------------------------------- sink, lookup join

SINK_NODE = "stream-exec-sink_1"


def test_an_upsert_sink_normalizes_its_upsert_input_per_primary_key():
    """TableSinkTestPrograms.SINK_UPSERT: an upsert source (I, UA, D) with PRIMARY KEY a, BEFORE_DATA
    (1, 1, hi), (2, 2, hello), (3, 2, hello world), into a sink with the same key: the
    ChangelogNormalize before it keeps each a's latest row."""
    rows = ((1, 1, "hi"), (2, 2, "hello"), (3, 2, "hello world"))
    for savepoint in _releases(SINK_NODE, "sink-upsert"):
        assert _state(savepoint, "deduplicate-state") == {row[0]: row for row in rows}, savepoint


@pytest.mark.parametrize(
    ("node", "name", "columns"),
    [
        ("stream-exec-sink_2", "insert-into-upsert-with-sink-upsert-materializer-writable-metadata", 4),
        ("stream-exec-sink_2", "insert-into-upsert-with-sink-upsert-materializer-writable-metadata-v1", 4),
        (SINK_NODE, "insert-into-upsert-with-sink-upsert-materializer-writable-metadata-v1", 2),
    ],
)
def test_a_sink_upsert_materializer_keeps_every_row_of_a_key_for_retraction(node, name, columns):
    """SinkTestPrograms.INSERT_RETRACT_WITH_WRITABLE_METADATA(_FOR_LEGACY_TYPE): (Bob, 5), (Bob, 6)
    inserted into a sink keyed by UPPER(name) with writable metadata columns nameMetadata and
    scoreMetadata (SELECT UPPER(name), score, score, name): the upsert materializer keeps, under
    BOB, both rows in arrival order (the physical name and score, then the metadata name and
    score). The ``-v1`` savepoint of StreamExecSink version 1 declares only the physical columns
    (the type bug that program shows): statecat reads those two (tests/test_flink_restore_values.py
    ENCODER_GAPS)."""
    rows = [(name_.upper(), score, name_, score)[:columns] for name_, score in (("Bob", 5), ("Bob", 6))]
    for savepoint in _releases(node, name):
        assert _state(savepoint, "values") == {"BOB": rows}, savepoint


def test_a_lookup_join_resolving_non_determinism_keeps_each_orders_looked_up_customer():
    """LookupJoinTestPrograms.LOOKUP_JOIN_WITH_TRY_RESOLVE (TABLE_OPTIMIZER_NONDETERMINISTIC_UPDATE_
    STRATEGY = TRY_RESOLVE): orders_cdc_t (PRIMARY KEY order_id) JOIN customers_t FOR SYSTEM_TIME AS
    OF proc_time ON customer_id = id. To retract deterministically the join keeps, per order_id, the
    customer it looked up (id, name, city, state, zipcode: the columns the query reads) from
    CUSTOMERS_BEFORE_DATA."""
    customers = {
        1: (1, "Bob", "Mountain View", "California", 94043),
        2: (2, "Alice", "San Francisco", "California", 95016),
        3: (3, "Claire", "Austin", "Texas", 73301),
        4: (4, "Shannon", "Boise", "Idaho", 83701),
        5: (5, "Jake", "New York City", "New York", 10001),
    }
    orders = ((1, 3), (2, 5), (4, 2), (3, 1), (6, 4), (5, 2))  # ORDERS_CDC's (order_id, customer_id)
    for savepoint in _releases("stream-exec-lookup-join_1", "lookup-join-with-try-resolve"):
        assert _state(savepoint, "unique-value") == {o: customers[c] for o, c in orders}, savepoint


# ----------------------------------------------------------------------------- group aggregates

GROUP_NODE = "stream-exec-group-aggregate_1"
# GroupAggregateTestPrograms.SOURCE_TWO (a, b, c, d, e): producedBeforeRestore.
SOURCE_TWO = (
    (2, 3, 2, "Hello World Like", 1),
    (3, 4, 3, "Hello World Its nice", 2),
    (2, 2, 1, "Hello World", 2),
    (1, 1, 0, "Hello", 1),
    (5, 11, 10, "GHI", 1),
    (3, 5, 4, "ABC", 2),
    (4, 10, 9, "FGH", 2),
    (4, 7, 6, "CDE", 2),
    (5, 14, 13, "JKL", 2),
    (4, 9, 8, "EFG", 1),
    (5, 15, 14, "KLM", 2),
    (5, 12, 11, "HIJ", 3),
    (4, 8, 7, "DEF", 1),
    (5, 13, 12, "IJK", 3),
    (3, 6, 5, "BCD", 3),
)


def _by_e() -> dict:
    groups: dict = {}
    for row in SOURCE_TWO:
        groups.setdefault(row[4], []).append(row)
    return groups


@pytest.mark.parametrize("name", ["group-aggregate-distinct", "group-aggregate-distinct-mini-batch"])
def test_a_distinct_aggregate_keeps_each_distinct_value_with_the_aggregates_that_saw_it(name):
    """GroupAggregateTestPrograms.GROUP_BY_DISTINCT(_MINI_BATCH): SELECT e, COUNT(DISTINCT a) FILTER
    (WHERE b > 10), COUNT(DISTINCT a), SUM(DISTINCT a), SUM(DISTINCT b), AVG(b), COUNT(DISTINCT d)
    GROUP BY e. The accumulators per e, AVG as its sum and count; the distinct views: a's value a
    bit per aggregate over a that took it (1: the filtered count, 2: the count, 4: the sum), b's and
    d's 1."""
    accumulators, a_views, b_views, d_views = {}, {}, {}, {}
    for e, rows in _by_e().items():
        a_set, b_set = {r[0] for r in rows}, {r[1] for r in rows}
        filtered = {r[0] for r in rows if r[1] > 10}
        avg_b = (sum(r[1] for r in rows), len(rows))
        accumulators[e] = (len(filtered), len(a_set), sum(a_set), sum(b_set), *avg_b, len({r[3] for r in rows}))
        a_views[e] = {a: (1 if a in filtered else 0) | 2 | 4 for a in a_set}
        b_views[e] = dict.fromkeys(b_set, 1)
        d_views[e] = dict.fromkeys({r[3] for r in rows}, 1)
    for savepoint in _releases(GROUP_NODE, name):
        assert {e: acc[:7] for e, acc in _state(savepoint, "accState").items()} == accumulators, savepoint
        assert _state(savepoint, "distinctAcc_0") == a_views, savepoint
        assert _state(savepoint, "distinctAcc_1") == b_views, savepoint
        assert _state(savepoint, "distinctAcc_2") == d_views, savepoint


def _weighted_avg_bytes(rows: list[tuple]) -> bytes:
    """my_avg(e, a) (JavaUserDefinedAggFunctions.WeightedAvg): its WeightedAvgAccum, a structured type
    shown as stored, the BinaryRowData of its fields by name: count (the weights a), sum (e x a)."""
    return bytes(8) + struct.pack("<qq", sum(r[0] for r in rows), sum(r[0] * r[4] for r in rows))


@pytest.mark.parametrize("name", ["group-aggregate-udf-with-merge", "group-aggregate-udf-with-merge-mini-batch"])
def test_a_distinct_concatenating_udf_keeps_its_list_and_map_views(name):
    """GroupAggregateTestPrograms.GROUP_BY_UDF_WITH_MERGE(_MINI_BATCH): SELECT e, my_avg(e, a),
    my_concat(d) GROUP BY e. ConcatDistinctAggFunction's ListView (agg1$list) holds each e's d
    values in arrival order, its MapView (agg1$map) marks each seen; my_avg's accumulator holds the
    sum of the weights and of e x a."""
    groups = _by_e()
    for savepoint in _releases(GROUP_NODE, name):
        assert _state(savepoint, "agg1$list") == {e: [r[3] for r in rows] for e, rows in groups.items()}, savepoint
        assert _state(savepoint, "agg1$map") == {
            e: dict.fromkeys((r[3] for r in rows), True) for e, rows in groups.items()
        }
        assert {e: acc[0] for e, acc in _state(savepoint, "accState").items()} == {
            e: _weighted_avg_bytes(rows) for e, rows in groups.items()
        }, savepoint


@pytest.mark.parametrize("name", ["group-aggregate-udf-without-merge", "group-aggregate-udf-without-merge-mini-batch"])
def test_udfs_without_merge_keep_their_accumulators(name):
    """GroupAggregateTestPrograms.GROUP_BY_UDF_WITHOUT_MERGE(_MINI_BATCH): SELECT e, my_sum1(c, 10),
    my_sum2(5, c), my_avg(e, a) GROUP BY e. VarSum1's accumulator (a structured type shown as stored)
    sums c + 10 per row (the program's s1: 77, 120 and 58), my_sum2's is 0 (its s2), my_avg's the
    weights' and e x a's sums."""
    groups = _by_e()
    expected = {
        e: (bytes(8) + struct.pack("<q", sum(r[2] + 10 for r in rows)), 0, _weighted_avg_bytes(rows))
        for e, rows in groups.items()
    }
    for savepoint in _releases(GROUP_NODE, name):
        assert _state(savepoint, "accState") == expected, savepoint


@pytest.mark.parametrize("name", ["group-aggregate-simple-mini-batch", "agg-with-state-ttl-hint"])
def test_a_simple_group_aggregate_counts_the_same_with_mini_batch_or_a_ttl_hint(name):
    """GroupAggregateTestPrograms.GROUP_BY_SIMPLE_MINI_BATCH and AGG_WITH_STATE_TTL_HINT (STATE_TTL
    'source_t' = '1s'): SELECT b, COUNT(*), AVG(a) FILTER (WHERE a > 1), MIN(c) GROUP BY b over
    (1, 1, Hi), (2, 2, Hello), (2, 2, Hello World): per b the count, AVG's sum and count of a > 1,
    MIN. The hint wraps the accumulator in TTL (its last access time is the machine's)."""
    expected = {1: (1, 0, 0, "Hi"), 2: (2, 4, 2, "Hello")}
    for savepoint in _releases(GROUP_NODE, name):
        assert _state(savepoint, "accState") == expected, savepoint
        ttl = _reader(savepoint).find("accState")[1].value.kind == "ttl"
        assert ttl == (name == "agg-with-state-ttl-hint"), savepoint


def test_an_incremental_distinct_aggregate_keeps_the_partial_views_per_bucket():
    """IncrementalGroupAggregateTestPrograms.INCREMENTAL_GROUP_AGGREGATE_SIMPLE (mini batch of 1,
    distinct split): SELECT b, COUNT(DISTINCT a) GROUP BY b over BEFORE_DATA (a, b, c) = (1, 1, hi),
    (2, 2, hello), (3, 2, hello world). The partial aggregate keeps its distinct view per (b,
    bucket), the bucket MOD(HASH_CODE(a), 1024) = a; the final aggregate the count per b."""
    rows = ((1, 1), (2, 2), (3, 2))
    for savepoint in _releases("stream-exec-incremental-group-aggregate_1", "incremental-group-aggregate-simple"):
        assert _state(savepoint, "distinctAcc_0") == {(b, a % DISTINCT_BUCKETS): {a: 1} for a, b in rows}, savepoint
        assert _state(savepoint, "accState") == {1: (1,), 2: (2,)}, savepoint


def test_an_incremental_aggregate_over_an_aggregate_counts_its_distinct_maxima():
    """IncrementalGroupAggregateTestPrograms.INCREMENTAL_GROUP_AGGREGATE_COMPLEX: SELECT b,
    SUM(b1), COUNT(DISTINCT b1), COUNT(1) FROM (SELECT a, COUNT(b) AS b, MAX(b) AS b1 ... GROUP BY a)
    GROUP BY b. The inner aggregate keeps per a its count and maximum; every a has one row, so the
    outer groups them all under b = 1: the partial distinct view per (b, bucket of b1) counts b1's
    rows (retractable: the inner one updates), the final holds SUM(b1), SUM's count, COUNT(DISTINCT
    b1) and COUNT(1)."""
    inner = {1: (1, 1), 2: (1, 2), 3: (1, 2)}  # BEFORE_DATA (a, b): (1, 1), (2, 2), (3, 2)
    maxima = [b1 for _, b1 in inner.values()]
    views = {(1, b1 % DISTINCT_BUCKETS): {b1: maxima.count(b1)} for b1 in set(maxima)}
    savepoint_name = "incremental-group-aggregate-complex"
    for savepoint in _releases("stream-exec-incremental-group-aggregate_1", savepoint_name):
        assert _same_states(
            _states(savepoint, "accState"), [inner, {1: (sum(maxima), len(maxima), len(set(maxima)), len(maxima))}]
        ), savepoint
        assert _state(savepoint, "distinctAcc_0") == views, savepoint


def test_a_mini_batch_distinct_count_keeps_its_view_per_key():
    """MiniBatchAssignerTestPrograms.MINI_BATCH_ASSIGNER_PROC_TIME: SELECT b, COUNT(DISTINCT a) GROUP
    BY b with mini batches over (1, 1, hi), (2, 2, hello), (3, 2, hello world): per b the count and
    the view of its a values (the batch flushed: the sink got both counts)."""
    for savepoint in _releases("stream-exec-mini-batch-assigner_1", "mini-batch-assigner-proc-time"):
        assert {b: acc[:1] for b, acc in _state(savepoint, "accState").items()} == {1: (1,), 2: (2,)}, savepoint
        assert _state(savepoint, "distinctAcc_0") == {1: {1: 1}, 2: {2: 1, 3: 1}}, savepoint


def test_a_union_deduplicates_through_an_aggregate_without_accumulators():
    """UnionTestPrograms.UNION_TWO_SOURCES: SELECT a, b FROM source_t1 UNION SELECT d, e FROM
    source_t2 over (420, 1) and (420, 1), (421, 2): the UNION's distinct is a GROUP BY of every
    column with no aggregate, one empty accumulator per row."""
    for savepoint in _releases("stream-exec-union_1", "union-two-sources"):
        assert _state(savepoint, "accState") == {(420, 1): NO_FIELDS, (421, 2): NO_FIELDS}, savepoint


def test_a_split_distinct_first_value_expands_each_row_into_its_aggregates():
    """ExpandTestPrograms.EXPAND (ONE_PHASE, distinct split, no incremental aggregate): SELECT a,
    COUNT(DISTINCT b), FIRST_VALUE(c) GROUP BY a over (1, 1, Hi), (2, 2, Hello), (2, 3, Hello world).
    Expand gives each row one copy per aggregate: (a, b, NULL) for the distinct count, (a, NULL,
    bucket of c) for FIRST_VALUE, the bucket MOD(HASH_CODE(c), 1024). The partial aggregate keeps
    per copy its partial count (1 or 0) and FIRST_VALUE's value (none for the count's copy), the
    distinct view of b; the final per a the count, and its FIRST_VALUE with retraction keeps each c
    (the order, a processing time, is not the program's)."""
    rows = ((1, 1, "Hi"), (2, 2, "Hello"), (2, 3, "Hello world"))
    partial = {(a, b, None): (1, None) for a, b, _ in rows}
    partial |= {(a, None, _bucket(c)): (0, c) for a, _, c in rows}
    for savepoint in _releases("stream-exec-expand_1", "expand"):
        partial_state, final_state = sorted(_states(savepoint, "accState"), key=len, reverse=True)
        assert {k: (acc[0], acc[1][0]) for k, acc in partial_state.items()} == partial, savepoint
        assert _state(savepoint, "distinctAcc_0") == {(a, b, None): {b: 1} for a, b, _ in rows}, savepoint
        assert {a: acc[0] for a, acc in final_state.items()} == {1: 1, 2: 2}, savepoint
        values = _state(savepoint, "agg1$valueToOrderMap")
        assert {a: set(by_value) for a, by_value in values.items()} == {1: {"Hi"}, 2: {"Hello", "Hello world"}}


def test_an_async_correlate_buffers_the_row_its_function_keeps_failing_on():
    """AsyncCorrelateTestPrograms.ASYNC_CORRELATE_EXCEPTION: LATERAL TABLE(func1(c, '$')) with
    FailureThenSucceedSplit, which throws for 'hello#world' until retried enough (3 retries, 3 s
    apart): the savepoint came once the sink held hi#there's two rows, BEFORE_DATA's second row
    (2, 2, hello#world) still in the async operator's buffer."""
    for savepoint in _releases("stream-exec-correlate_1", "async-correlate-exception"):
        (elements,) = _elements(savepoint, "_async_wait_operator_state_")
        assert [(element[0], element[2]) for element in elements] == [("record", (2, 2, "hello#world"))], savepoint


# ----------------------------------------------------------------------------- process table functions

PTF_NODE = "stream-exec-process-table-function_1"


def test_a_ptf_map_view_holds_what_the_function_put_per_partition():
    """ProcessTableFunctionTestPrograms.PROCESS_MAP_STATE_RESTORE (NonNullMapStateFunction over t
    PARTITION BY name, one row each for Bob and Alice before the savepoint): the first row of each
    partition after the restore prints the map it found, {Bob=2, oldBob=1} and {Alice=2,
    oldAlice=1}; the MapView state s holds that, each entry with its TTL."""
    for savepoint in _releases(PTF_NODE, "process-map-state-restore"):
        assert _state(savepoint, "s") == {"Bob": {"Bob": 2, "oldBob": 1}, "Alice": {"Alice": 2, "oldAlice": 1}}, (
            savepoint
        )
        assert _reader(savepoint).find("s")[1].value.child("value").kind == "ttl", savepoint


def test_ptf_value_states_hold_what_the_next_row_found():
    """ProcessTableFunctionTestPrograms.PROCESS_MULTI_STATE_RESTORE (MultiStateFunction): after one
    row each for Bob and Alice, the first row per partition after the restore prints its two state
    entries as +I[1] and +I[0]: s1 holds (1), s2 ('0'), both with TTL."""
    for savepoint in _releases(PTF_NODE, "process-multi-state-restore"):
        assert _state(savepoint, "s1") == {"Bob": (1,), "Alice": (1,)}, savepoint
        assert _state(savepoint, "s2") == {"Bob": ("0",), "Alice": ("0",)}, savepoint


def _sorted_long(value: int) -> bytes:
    """SortedLongSerializer: the long big-endian with its sign bit flipped."""
    return struct.pack(">Q", value ^ (1 << 63))


# PROCESS_ORDER_BY_RESTORE's t_large and PROCESS_MULTI_INPUT_ORDER_BY_RESTORE's t (name, score, ts
# = Instant.ofEpochMilli(...)) before the savepoint, WATERMARK ts - 5 ms and ts - 1 ms.
LARGE_ROWS = (
    ("Bob", 1, 0),
    ("Alice", 1, 1),
    ("Bob", 2, 3),
    ("Bob", 3, 3),
    ("Bob", 4, 5),
    ("Alice", 2, 19),
    ("Alice", 3, 1),
)
SMALL_ROWS = (("Bob", 1, 0), ("Alice", 1, 1), ("Bob", 2, 99999), ("Bob", 3, 3), ("Bob", 4, 4))


def _captured(rows: Iterable[tuple]) -> list[str]:
    """Rows as OrderByFunction captures them: Row.toString of (name, score, ts)."""

    def instant(ms: int) -> str:
        seconds, millis = divmod(ms, 1000)
        return f"1970-01-01T00:{seconds // 60:02d}:{seconds % 60:02d}{f'.{millis:03d}' if millis else ''}Z"

    return [f"+I[{name}, {score}, {instant(ms)}]" for name, score, ms in rows]


def _released_in_order(rows: Iterable[tuple], delay: int) -> tuple[dict, dict]:
    """A PTF input ORDER BY (ts ASC, score DESC) on a watermarked ts: a row at or before the
    watermark is late and dropped; the others wait in the sort buffer until the watermark (ts -
    delay, as it grows) passes them, then reach the function in order. ({name: rows released in
    order}, {name: [ts buffered]})."""
    released: dict = {}
    buffered: list = []
    watermark = LONG_MIN
    for row in rows:
        if row[2] > watermark:
            buffered.append(row)
        watermark = max(watermark, row[2] - delay)
        ready = sorted((r for r in buffered if r[2] <= watermark), key=lambda r: (r[2], -r[1]))
        buffered = [r for r in buffered if r not in ready]
        for r in ready:
            released.setdefault(r[0], []).append(r)
    waiting: dict = {}
    for r in buffered:
        waiting.setdefault(r[0], []).append(_sorted_long(r[2]))
    return released, waiting


@pytest.mark.parametrize("multi_input", [False, True])
def test_a_ptf_with_order_by_captures_the_rows_the_watermark_released_and_buffers_the_rest(multi_input):
    """ProcessTableFunctionTestPrograms.PROCESS_ORDER_BY_RESTORE (t_large) and
    PROCESS_MULTI_INPUT_ORDER_BY_RESTORE (in1 => t, in2 => t_large): ORDER BY (ts ASC, score DESC)
    on a watermarked ts. The function's capturedOrder per name (per input) is every row the
    watermark released to it, in order; the rest wait in each input's sort buffer, keyed by ts
    (SortedLongSerializer): Alice's 19 ms row, and Bob's 99999 ms row of t, after which t's 3 and
    4 ms rows came late."""
    large, large_waiting = _released_in_order(LARGE_ROWS, 5)
    name = "process-multi-input-order-by-restore" if multi_input else "process-order-by-restore"
    for savepoint in _releases(PTF_NODE, name):
        captured = _state(savepoint, "capturedOrder")
        if multi_input:
            small, small_waiting = _released_in_order(SMALL_ROWS, 1)
            assert captured == {k: (_captured(small[k]), _captured(large[k])) for k in large}, savepoint
            buffered_small = _state(savepoint, "input-sort-buffer-data-0")
            assert {k: list(v) for k, v in buffered_small.items()} == small_waiting, savepoint
            buffered = _state(savepoint, "input-sort-buffer-data-1")
        else:
            assert captured == {k: (_captured(v),) for k, v in large.items()}, savepoint
            buffered = _state(savepoint, "input-sort-buffer-data-0")
        assert {k: list(v) for k, v in buffered.items()} == large_waiting, savepoint


def test_ptf_named_timers_are_kept_by_name_until_they_fire():
    """ProcessTableFunctionTestPrograms.PROCESS_NAMED_TIMERS_RESTORE (NamedTimersFunction): Bob's
    first row registered timeout1 to timeout3 for 1, 2, 3 ms and timeout4, timeout5 for
    Long.MAX_VALUE; no watermark came before the savepoint (the rows print watermark null), so none
    fired: the internal map and the named timers hold all five, Alice none."""
    registered = {"timeout1": 1, "timeout2": 2, "timeout3": 3, "timeout4": (1 << 63) - 1, "timeout5": (1 << 63) - 1}
    for savepoint in _releases(PTF_NODE, "process-partitioned-named-timers-restore"):
        assert _state(savepoint, "internal-named-timers-map") == {"Bob": registered}, savepoint
        assert _timers(savepoint, name="user-named-timers") == {("Bob", n): t for n, t in registered.items()}, savepoint


def test_ptf_late_events_leave_the_timer_the_watermark_has_not_passed():
    """ProcessTableFunctionTestPrograms.PROCESS_LATE_EVENTS_RESTORE (LateTimersFunction): Bob's row
    at 0 ms registered the named timer bob and an unnamed timer for 0, Alice's at 1 ms the named
    timer alice for 1; the watermark 0 fired Bob's two (the sink printed both). The internal map
    keeps each name's last registration, fired or not (only clearing removes one); alice still
    waits, no unnamed timer does."""
    for savepoint in _releases(PTF_NODE, "process-late-events-restore"):
        assert _state(savepoint, "internal-named-timers-map") == {"Bob": {"bob": 0}, "Alice": {"alice": 1}}, savepoint
        assert _timers(savepoint, name="user-named-timers") == {("Alice", "alice"): 1}, savepoint
        assert _timers(savepoint, name="user-unnamed-timers") == {}, savepoint


# ----------------------------------------------------------------------------- the test sinks


def _flink_text(value) -> str:
    """A value as Flink's Row.toString prints it: null, LocalDateTime's ISO form (seconds and
    fractions only when not zero), BigDecimal's plain digits."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if hasattr(value, "isoformat") and hasattr(value, "hour"):
        text = value.strftime("%Y-%m-%dT%H:%M")
        if value.second or value.microsecond:
            text += f":{value.second:02d}"
        if value.microsecond:
            text += f".{value.microsecond // 1000:03d}"
        return text
    return str(value)


def _printed(row: tuple) -> str:
    return "[" + ", ".join(_flink_text(v) for v in row) + "]"


@pytest.mark.parametrize(
    ("node", "name", "consumed", "materialized", "ordered"),
    [
        (
            "stream-exec-changelog-normalize_1",
            "changelog-normalize-source",
            ["+I[one, 1, a]", "+I[two, 2, b]", "-U[one, 1, a]", "+U[one, 1, aa]"]
            + ["+I[three, 3, c]", "-D[two, 2, b]", "-U[three, 3, c]", "+U[three, 3, cc]"],
            ["[one, 1, aa]", "[three, 3, cc]"],
            True,
        ),
        (
            "stream-exec-window-rank_1",
            "window-rank-tumble-tvf-min-top-n",
            [
                "+I[2020-04-15T08:00, 2020-04-15T08:00:10, 2020-04-15T08:00:07, supplier1, 2.00, G, 1]",
                "+I[2020-04-15T08:00, 2020-04-15T08:00:10, 2020-04-15T08:00:08, supplier3, 2.00, B, 2]",
                "+I[2020-04-15T08:00, 2020-04-15T08:00:10, 2020-04-15T08:00:05, supplier1, 4.00, A, 3]",
            ],
            None,
            True,
        ),
        (
            "stream-exec-interval-join_1",
            "interval-join-event-time",
            [
                "+I[1, 2020-04-15 08:00:01, 2020-04-15 08:00:02]",
                "+I[2, 2020-04-15 08:00:02, 2020-04-15 08:00:05]",
                "+I[5, 2020-04-15 08:00:05, 2020-04-15 08:00:06]",
            ],
            None,
            False,
        ),
        (
            "stream-exec-temporal-join_1",
            "temporal-join-table-join",
            ["+I[102]", "+I[228]", "+I[348]", "+I[50]"],
            None,
            False,
        ),
    ],
)
def test_a_test_sink_keeps_the_rows_it_received_before_the_savepoint(node, name, consumed, materialized, ordered):
    """ChangelogNormalizeTestPrograms.CHANGELOG_SOURCE, WindowRankTestPrograms.WINDOW_RANK_TUMBLE_TVF_
    MIN_TOP_N, IntervalJoinTestPrograms.INTERVAL_JOIN_EVENT_TIME, TemporalJoinTestPrograms.
    TEMPORAL_JOIN_TABLE_JOIN: the values connector's sink keeps, as operator state, every row it
    received (sink-results, the program's consumedBeforeRestore, in arrival order where one input
    fixes it: the joins' order follows how their two sources interleave) and the result they make
    (sink-retract-results: the changelog applied). statecat reads a RowData without its RowKind
    (readers/codecs/encoders.py writes INSERT), so the -U and -D rows read as their fields only."""
    for savepoint in _releases(node, name):
        (received,) = _elements(savepoint, "sink-results")
        expected = [text[2:] for text in consumed]
        printed = [_printed(row) for row in received]
        assert (printed if ordered else sorted(printed)) == (expected if ordered else sorted(expected)), savepoint
        if materialized is not None:
            (result,) = _elements(savepoint, "sink-retract-results")
            assert sorted(map(_printed, result)) == sorted(materialized), savepoint
