"""Flink's own restore-test savepoints held to the programs that made them, as
tests/test_flink_restore_values_more.py does (its docstring says how): the operators driven by time
(interval joins, legacy group windows, distinct-split and window TVF aggregates, processing-time
windows, temporal joins and sorts).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from decimal import Decimal

import pytest

from tests.fixtures.restore_tests import RESTORE_TEST_VERSIONS
from tests.test_flink_restore_values import (
    NO_FIELDS,
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
    _releases,
    _rowtime,
    _rowtime_of,
    _sessions,
    _state,
    _states,
)
from tests.test_flink_restore_values_more import FIVE_SECONDS, TEN_SECONDS, _entries, _EventTimers, _hopping

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
