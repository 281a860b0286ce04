"""Flink's own restore-test savepoints (tests/fixtures/restore_tests.py) held to the programs that
made them, and byte for byte to statecat's encoders and writer.

Values: each check derives the state from the test program's rows before the savepoint
(``producedBeforeRestore``) and the operator's documented logic, never from statecat's reader. The
rows and SQL are the ``*TestPrograms`` classes' of Flink's planner tests
(flink-table/flink-table-planner/src/test/java/org/apache/flink/table/planner/plan/nodes/exec/stream/),
named in each docstring. A program's savepoint is the same bytes in every release's jar unless the
program changed (the event-time over aggregates were taken again for 2.0), so each check runs on
every release that holds the program, or names the release whose program it follows.

Bytes: every state of every savepoint of every release, part by part through the encoders
(tests/round_trip.py), and whole through the writer.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from statecat.readers import SavepointReader
from statecat.statemeta.errors import StatecatError
from statecat.statemeta.files.metadata import FIRST_VERSION_WITH_PROPERTIES
from statecat.writers.metadata_writer import SAVEPOINT_ACTION, SAVEPOINT_NAME, savepoint_properties
from statecat.writers.savepoint_writer import COORDINATOR_STATE, write_savepoint
from tests.fixtures.restore_tests import METADATA, RESTORE_TEST_VERSIONS, program, restore_tests_root, savepoints
from tests.round_trip import (
    assert_parts_round_trip,
    handle_streams,
    metadata_properties,
    stored_parts,
)

pytestmark = pytest.mark.restore_tests

LONG_MIN = -(1 << 63)  # the first id the non-time over aggregate gives a row
NO_FIELDS = "()"  # how a ROW<> key or value reads (the key of a join or aggregate without keys)
CANONICAL_FORMAT = "CANONICAL"


# ----------------------------------------------------------------------------- reading


@functools.cache
def _reader(savepoint: Path) -> SavepointReader:
    return SavepointReader(str(savepoint))


def _plain(value):
    """A read value with rows as tuples (f0, f1, ... in order) and maps as dicts, to compare with
    what the program's rows give."""
    if isinstance(value, dict):
        return tuple(_plain(v) for v in value.values())
    if isinstance(value, list):
        if value and all(isinstance(e, tuple) and len(e) == 2 for e in value):  # a map's entries
            return {_plain(k): _plain(v) for k, v in value}
        return [_plain(v) for v in value]
    return value


def _states(savepoint: Path, name: str, *, by_namespace: bool = False) -> list[dict]:
    """Each operator's state ``name`` as {key: value} ({(key, namespace): value} by namespace), in
    any order: several operators of a program may hold a state of one name."""
    reader = _reader(savepoint)

    def at(row: dict):
        return (_plain(row["key"]), _plain(row["namespace"])) if by_namespace else _plain(row["key"])

    return [
        {at(row): _plain(row["value"]) for row in reader.table(name, operator.id).to_pylist()}
        for operator in reader.meta.operators
        if any(state.name == name for state in operator.states)
    ]


def _elements(savepoint: Path, name: str) -> list[list]:
    """Each operator's operator state ``name``: its elements."""
    reader = _reader(savepoint)
    return [
        [_plain(row["value"]) for row in reader.table(name, operator.id).to_pylist()]
        for operator in reader.meta.operators
        if any(state.name == name for state in operator.states)
    ]


def _state(savepoint: Path, name: str, *, by_namespace: bool = False) -> dict:
    """The state ``name`` of the one operator that holds it."""
    (found,) = _states(savepoint, name, by_namespace=by_namespace)
    return found


def _releases(node: str, name: str) -> list[Path]:
    """The program's savepoint in every release whose restore tests hold it."""
    found = [program(v, node, name) for v in RESTORE_TEST_VERSIONS if program(v, node, name).is_dir()]
    assert found, f"no release holds {node}/{name}"
    return found


def _same_states(actual: list[dict], expected: list[dict]) -> bool:
    return len(actual) == len(expected) and all(state in actual for state in expected)


# ----------------------------------------------------------------------------- joins

# JoinTestPrograms.EMPLOYEE, DEPARTMENT, DEPARTMENT_NONULLS, SOURCE_T1, SOURCE_T2: producedBeforeRestore.
EMPLOYEE = ((None, 101, "Adam"), (1, 1, "Baker"), (2, 2, "Charlie"), (3, 2, "Don"), (7, 6, "Victor"))
DEPARTMENT = (  # department_num, b2, b3, department_name
    (None, 102, 0, "Accounting"),
    (1, 1, 0, "Research"),
    (2, 2, 1, "Human Resources"),
    (2, 3, 2, "HR"),
    (3, 1, 2, "Sales"),
)
DEPARTMENT_NONULLS = DEPARTMENT[1:]
T1 = (
    (1, 1, "Baker1"),
    (1, 2, "Baker2"),
    (1, 2, "Baker2"),
    (1, 5, "Baker3"),
    (2, 7, "Baker5"),
    (1, 9, "Baker6"),
    (1, 8, "Baker8"),
    (3, 8, "Baker9"),
)
T2 = ((1, 1, "BakerBaker"), (2, 2, "HeHe"), (3, 2, "HeHe"))


def _equal(a, b) -> bool:
    """SQL's ``=``: NULL equals nothing."""
    return a is not None and a == b


def _records(
    rows: Iterable[tuple],
    key: Callable[[tuple], object],
    kept: Callable[[tuple], tuple],
    matches: Callable[[tuple], int] | None = None,
) -> dict:
    """A join input's records state: {join key: {kept row: count}}. An outer side (``matches``
    given: how many rows of the other side a row joins) keeps (count, associations) per row."""
    state: dict = {}
    for row in rows:
        records = state.setdefault(key(row), {})
        if matches is None:
            records[kept(row)] = records.get(kept(row), 0) + 1
        else:
            count, _ = records.get(kept(row), (0, 0))
            records[kept(row)] = (count + 1, matches(row))
    return state


def _joined(others: Iterable[tuple], on: Callable[[tuple, tuple], bool]) -> Callable[[tuple], int]:
    others = tuple(others)
    return lambda row: sum(1 for other in others if on(row, other))


EMPLOYEES_BY_DEPTNO = {"key": lambda e: e[0], "kept": lambda e: (e[0], e[2])}
DEPARTMENTS_BY_NUM = {"key": lambda d: d[0], "kept": lambda d: (d[0], d[3])}


def _on_deptno(e: tuple, d: tuple) -> bool:
    return _equal(e[0], d[0])


def _on_department(d: tuple, e: tuple) -> bool:
    return _equal(d[0], e[0])


def _expected_join(name: str) -> tuple[dict, dict]:
    """(left-records, right-records) of a JoinTestPrograms program. The planner keeps of each
    input only the join key and the columns the query reads (the kept rows below)."""
    if name == "join-left-join":  # EMPLOYEE LEFT JOIN DEPARTMENT ON deptno = department_num
        return (
            _records(EMPLOYEE, **EMPLOYEES_BY_DEPTNO, matches=_joined(DEPARTMENT, _on_deptno)),
            _records(DEPARTMENT, **DEPARTMENTS_BY_NUM),
        )
    if name == "join-right-join":
        return (
            _records(EMPLOYEE, **EMPLOYEES_BY_DEPTNO),
            _records(DEPARTMENT, **DEPARTMENTS_BY_NUM, matches=_joined(EMPLOYEE, _on_department)),
        )
    if name == "join-outer-join":
        return (
            _records(EMPLOYEE, **EMPLOYEES_BY_DEPTNO, matches=_joined(DEPARTMENT, _on_deptno)),
            _records(DEPARTMENT, **DEPARTMENTS_BY_NUM, matches=_joined(EMPLOYEE, _on_department)),
        )
    if name == "join-semi-join":  # WHERE deptno IN (SELECT department_num FROM DEPARTMENT)
        return (
            _records(EMPLOYEE, **EMPLOYEES_BY_DEPTNO, matches=_joined(DEPARTMENT, _on_deptno)),
            _records(DEPARTMENT, key=lambda d: d[0], kept=lambda d: (d[0],)),
        )
    if name == "join-anti-join":
        # NOT IN is null-aware: no equality key, a row matches where deptno = department_num or
        # either is NULL.
        def null_aware(e, d):
            return e[0] is None or d[0] is None or e[0] == d[0]

        return (
            _records(
                EMPLOYEE,
                key=lambda e: NO_FIELDS,
                kept=lambda e: (e[0], e[2]),
                matches=_joined(DEPARTMENT_NONULLS, null_aware),
            ),
            _records(DEPARTMENT_NONULLS, key=lambda d: NO_FIELDS, kept=lambda d: (d[0],)),
        )
    if name == "join-cross-join":  # SELECT name, department_name FROM EMPLOYEE, DEPARTMENT
        return (
            _records(EMPLOYEE, key=lambda e: NO_FIELDS, kept=lambda e: (e[2],)),
            _records(DEPARTMENT, key=lambda d: NO_FIELDS, kept=lambda d: (d[3],)),
        )
    if name == "join-with-filter":  # WHERE salary = b2 AND salary < 2: both inputs filtered
        return (
            _records([e for e in EMPLOYEE if e[1] < 2], key=lambda e: e[1], kept=lambda e: (e[1], e[2])),
            _records([d for d in DEPARTMENT if d[1] < 2], key=lambda d: d[1], kept=lambda d: (d[1], d[3])),
        )
    if name == "join-inner-join-with-duplicate-key":  # ON deptno = department_num AND deptno = b3
        return (
            _records(EMPLOYEE, key=lambda e: (e[0], e[0]), kept=lambda e: (e[0],)),
            _records(DEPARTMENT, key=lambda d: (d[0], d[2]), kept=lambda d: (d[0], d[2])),
        )
    if name == "join-inner-join-with-non-equi-join":  # ON deptno = department_num AND salary > b2
        return (
            _records(EMPLOYEE, key=lambda e: e[0], kept=lambda e: e),
            _records(DEPARTMENT, key=lambda d: d[0], kept=lambda d: (d[0], d[1], d[3])),
        )

    # join-non-window-inner-join(-with-null-cond): both inputs as SELECT if(a = 3, NULL, a), b, c
    def nulled(rows):
        return [(None if r[0] == 3 else r[0], *r[1:]) for r in rows]

    return (
        _records(nulled(T1), key=lambda r: r[0], kept=lambda r: r),
        _records(nulled(T2), key=lambda r: r[0], kept=lambda r: r),
    )


@pytest.mark.parametrize(
    "name",
    [
        "join-left-join",
        "join-right-join",
        "join-outer-join",
        "join-semi-join",
        "join-anti-join",
        "join-cross-join",
        "join-with-filter",
        "join-inner-join-with-duplicate-key",
        "join-inner-join-with-non-equi-join",
        "join-non-window-inner-join",
        "join-non-window-inner-join-with-null-cond",
    ],
)
def test_a_regular_joins_buffers_hold_each_sides_rows_with_their_counts(name):
    """JoinTestPrograms (the program named): each side's records state holds, per join key, every
    row of its input with how often it came, and an outer side also how many rows of the other
    side it joined (NULL keys are kept: they join nothing)."""
    left, right = _expected_join(name)
    for savepoint in _releases("stream-exec-join_1", name):
        assert _state(savepoint, "left-records") == left, savepoint
        assert _state(savepoint, "right-records") == right, savepoint


def _minimum(rows: Iterable[tuple], key: int, value: int) -> dict:
    out: dict = {}
    for row in rows:
        out[row[key]] = min(out.get(row[key], row[value]), row[value])
    return out


def test_a_join_of_two_aggregates_keeps_one_row_per_unique_key():
    """JoinTestPrograms.INNER_JOIN_WITH_PK: (SELECT MIN(salary) AS salary, deptno FROM EMPLOYEE GROUP
    BY deptno) JOIN (SELECT MIN(b2) AS b2, department_num FROM DEPARTMENT GROUP BY department_num) ON
    salary = b2. Each input's unique key (deptno, department_num) is not the join key: per salary, a
    map from the unique key to the row."""
    salaries, b2s = _minimum(EMPLOYEE, 0, 1), _minimum(DEPARTMENT, 0, 1)

    def by_minimum(minimums):
        state: dict = {}
        for unique, least in minimums.items():
            state.setdefault(least, {})[(unique,)] = (least, unique)
        return state

    for savepoint in _releases("stream-exec-join_1", "join-inner-join-with-pk"):
        assert _state(savepoint, "left-records") == by_minimum(salaries)
        assert _state(savepoint, "right-records") == by_minimum(b2s)
        aggregates = [{k: (v,) for k, v in salaries.items()}, {k: (v,) for k, v in b2s.items()}]
        assert _same_states(_states(savepoint, "accState"), aggregates)


@pytest.mark.parametrize("name", ["join-inner-join-with-equal-pk", "join-with-state-ttl-hint"])
def test_a_join_on_its_inputs_unique_keys_keeps_one_row_per_key(name):
    """JoinTestPrograms.INNER_JOIN_WITH_EQUAL_PK and JOIN_WITH_STATE_TTL_HINT (the same join with
    STATE_TTL hints): the aggregates' MIN columns are not selected, so each aggregate keeps no
    accumulator (ROW<>) and each join side one row per deptno / department_num: the key itself."""
    deptnos, nums = {e[0] for e in EMPLOYEE}, {d[0] for d in DEPARTMENT}
    for savepoint in _releases("stream-exec-join_1", name):
        assert _state(savepoint, "left-records") == {k: (k,) for k in deptnos}
        assert _state(savepoint, "right-records") == {k: (k,) for k in nums}
        groups = [dict.fromkeys(deptnos, NO_FIELDS), dict.fromkeys(nums, NO_FIELDS)]
        assert _same_states(_states(savepoint, "accState"), groups)


# ----------------------------------------------------------------------------- deduplication

# DeduplicationTestPrograms.DATA1 (order_id, user, product, order_time): producedBeforeRestore.
ORDERS = (
    (1, "terry", "pen", 1000),
    (2, "alice", "pen", 2000),
    (3, "bob", "pen", 3000),
    (4, "bob", "apple", 4000),
    (5, "fish", "apple", 5000),
)


@pytest.mark.parametrize(("name", "keep"), [("deduplicate-asc", "first"), ("deduplicate-desc", "last")])
def test_deduplication_keeps_the_first_or_last_row_per_key(name, keep):
    """DeduplicationTestPrograms.DEDUPLICATE and DEDUPLICATE_DESC: ROW_NUMBER() OVER (PARTITION BY
    product ORDER BY event_time ASC | DESC) = 1, event_time = TO_TIMESTAMP(FROM_UNIXTIME(order_time)):
    per product the whole row with the earliest (latest) event time. FROM_UNIXTIME formats in the
    session time zone, which the program leaves to the machine that took the savepoint: event_time
    is order_time seconds after the epoch shifted by one offset for every row."""
    kept: dict = {}
    for order in sorted(ORDERS, key=lambda o: o[3], reverse=keep == "last"):
        kept.setdefault(order[2], order)
    for savepoint in _releases("stream-exec-deduplicate_1", name):
        state = _state(savepoint, "deduplicate-state")
        assert {product: row[:4] for product, row in state.items()} == kept
        offsets = {row[4] - dt.datetime(1970, 1, 1) - dt.timedelta(seconds=row[3]) for row in state.values()}
        assert len(offsets) == 1 and offsets.pop() % dt.timedelta(minutes=15) == dt.timedelta(0)


def test_proctime_deduplication_keeps_only_a_flag_per_key():
    """DeduplicationTestPrograms.DEDUPLICATE_PROCTIME: keeping the first row by processing time
    needs no row, only that the key was seen."""
    for savepoint in _releases("stream-exec-deduplicate_1", "deduplicate-asc-proctime"):
        assert _state(savepoint, "deduplicate-state") == dict.fromkeys({o[2] for o in ORDERS}, True)


# ----------------------------------------------------------------------------- rank, limit, sort-limit

# RankTestPrograms / LimitTestPrograms.DATA1 / SortTestPrograms.DATA (a, b, c): producedBeforeRestore.
ABC = ((2, "a", 6), (4, "b", 8), (6, "c", 10), (1, "a", 5), (3, "b", 7), (5, "c", 9))


def test_a_top_1_by_an_append_only_input_keeps_the_best_row():
    """RankTestPrograms.RANK_TEST_APPEND_FAST_STRATEGY: ROW_NUMBER() OVER (PARTITION BY b ORDER BY
    c) = 1 over inserts: per b the row of least c."""
    best: dict = {}
    for row in ABC:
        if row[1] not in best or row[2] < best[row[1]][2]:
            best[row[1]] = row
    for savepoint in _releases("stream-exec-rank_1", "rank-test-append-fast-strategy"):
        assert _state(savepoint, "Top1-Rank-State") == best


def test_a_retracting_rank_keeps_every_row_by_sort_key():
    """RankTestPrograms.RANK_TEST_RETRACT_STRATEGY: the same rank over an updating input (I,UA,UB)
    keeps every row, per b a map from the sort key c to the rows of that c."""
    rows: dict = {}
    for row in ABC:
        rows.setdefault(row[1], {}).setdefault((row[2],), []).append(row)
    for savepoint in _releases("stream-exec-rank_1", "rank-test-retract-strategy"):
        assert _state(savepoint, "data-state") == rows


def test_an_updatable_rank_keeps_its_rows_by_their_unique_key():
    """RankTestPrograms.RANK_TEST_UPDATE_FAST_STRATEGY: ROW_NUMBER() OVER (PARTITION BY b ORDER BY
    count_c DESC, a) <= 10 over SELECT a, b, COUNT(*) AS count_c GROUP BY a, b: the aggregate counts
    each (a, b); the rank keeps per b each (a, b) with its row and its position among rows of an
    equal sort key (1: no two are equal)."""
    counts = Counter((a, b) for a, b, _ in ABC)
    by_b: dict = {}
    for (a, b), n in counts.items():
        by_b.setdefault(b, {})[(a, b)] = ((a, b, n), 1)
    for savepoint in _releases("stream-exec-rank_1", "rank-test-update-fast-strategy"):
        assert _state(savepoint, "accState") == {ab: (n,) for ab, n in counts.items()}
        assert _state(savepoint, "data-state-with-update") == by_b


def test_a_first_n_rank_counts_up_to_n_per_key():
    """RankTestPrograms.RANK_N_TEST: ROW_NUMBER() OVER (PARTITION BY a ORDER BY proctime) <= 2:
    per a, how many rows it emitted (at most 2)."""
    rows = (("book", 1, 12), ("book", 2, 19), ("book", 4, 11), ("fruit", 4, 33))
    counts = Counter(a for a, _, _ in rows)
    for savepoint in _releases("stream-exec-rank_1", "rank-n-test"):
        assert _state(savepoint, "counterState") == {a: min(n, 2) for a, n in counts.items()}


def test_a_limit_keeps_the_first_rows():
    """LimitTestPrograms.LIMIT: SELECT * FROM source_t LIMIT 3 is a rank without sort key over
    every row: the first three rows, under the empty key and the empty sort key."""
    for savepoint in _releases("stream-exec-limit_1", "limit"):
        assert _state(savepoint, "data-state-with-append") == {NO_FIELDS: {NO_FIELDS: list(ABC[:3])}}


@pytest.mark.parametrize(("name", "descending"), [("sort-limit-asc", False), ("sort-limit-desc", True)])
def test_a_sort_limit_keeps_the_best_rows_by_sort_key(name, descending):
    """SortTestPrograms.SORT_LIMIT_ASC / SORT_LIMIT_DESC: ORDER BY a [DESC] LIMIT 3: the three rows
    of least (greatest) a, by their sort key."""
    best = sorted(ABC, reverse=descending)[:3]
    for savepoint in _releases("stream-exec-sort-limit_1", name):
        assert _state(savepoint, "data-state-with-append") == {NO_FIELDS: {(r[0],): [r] for r in best}}


# ----------------------------------------------------------------------------- window aggregates

# WindowAggregateTestPrograms.BEFORE_DATA, the columns these states use (ts, a_int, comment, name),
# in arrival order; the source's watermark is rowtime - 1 s, rowtime = TO_TIMESTAMP(ts).
WINDOW_ROWS = (
    ("2020-10-10 00:00:01", 1, "Hi", "a"),
    ("2020-10-10 00:00:02", 2, "Comment#1", "a"),
    ("2020-10-10 00:00:03", 2, "Comment#1", "a"),
    ("2020-10-10 00:00:04", 5, None, "a"),
    ("2020-10-10 00:00:07", 3, "Hello", "b"),
    ("2020-10-10 00:00:06", 6, "Hi", "b"),  # out of order
    ("2020-10-10 00:00:08", 3, "Comment#2", "a"),
    ("2020-10-10 00:00:04", 5, "Hi", "a"),  # late
    ("2020-10-10 00:00:16", 4, "Hi", "b"),
    ("2020-10-10 00:00:32", 7, None, None),
    ("2020-10-10 00:00:34", 1, "Comment#3", "b"),
)
SECOND = 1000
WATERMARK_DELAY = SECOND
SESSION_GAP = 5 * SECOND  # SESSION(..., INTERVAL '5' SECOND)
# SELECT name, window_start, window_end, COUNT(*), SUM(a_int), COUNT(DISTINCT comment) ... GROUP BY
# name, window_start, window_end: the accumulators (count, sum, distinct count, the distinct view).


def _millis(ts: str) -> int:
    """TO_TIMESTAMP(ts) as the epoch milliseconds a window's bounds are kept in (TIMESTAMP: UTC)."""
    return int(dt.datetime.fromisoformat(ts).replace(tzinfo=dt.UTC).timestamp() * 1000)


def _rowtime(ts: str) -> dt.datetime:
    return dt.datetime.fromisoformat(ts)


def _rowtime_of(millis: int) -> dt.datetime:
    """Epoch milliseconds as the TIMESTAMP(3) a key or row holds."""
    return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=millis)


WINDOW_WATERMARK = max(_millis(r[0]) for r in WINDOW_ROWS) - WATERMARK_DELAY


def _accumulate(rows: list[tuple]) -> tuple[tuple, dict, bool]:
    """(COUNT(*), SUM(a_int), COUNT(DISTINCT comment)), the distinct view's entries ({comment: 1}:
    the bit of the one DISTINCT aggregate) and whether a NULL comment came (kept apart)."""
    comments = {r[2] for r in rows if r[2] is not None}
    return (
        (len(rows), sum(r[1] for r in rows), len(comments)),
        dict.fromkeys(comments, 1),
        any(r[2] is None for r in rows),
    )


def _expect_windows(groups: dict) -> dict:
    """The states of a window aggregate from {(name, window namespace): rows}."""
    accumulators, views, nulls = {}, {}, {}
    for at, rows in groups.items():
        accumulators[at], view, has_null = _accumulate(rows)
        if view:
            views[at] = view
        if has_null:
            nulls[at] = 1
    return {"window-aggs": accumulators, "distinctAcc_0": views, "distinctAcc_0_null_state": nulls}


def _check_window_aggregate(savepoint: Path, expected: dict, timers: dict) -> None:
    states = {name: _state(savepoint, name, by_namespace=True) for name in expected}
    states["window-aggs"] = {at: acc[:3] for at, acc in states["window-aggs"].items()}  # the view's placeholder
    assert states == expected, savepoint
    assert _state(savepoint, "_timer_state/event_window-timers", by_namespace=True) == timers, savepoint
    assert {tuple(e) for e in _elements(savepoint, "watermark")} == {(WINDOW_WATERMARK,)}, savepoint


SLICED_WINDOWS = {  # (window size, slice: the slide or step)
    "tumble": (5 * SECOND, 5 * SECOND),  # TUMBLE(..., INTERVAL '5' SECOND)
    "hop": (10 * SECOND, 5 * SECOND),  # HOP(..., INTERVAL '5' SECOND, INTERVAL '10' SECOND)
    "cumulate": (15 * SECOND, 5 * SECOND),  # CUMULATE(..., INTERVAL '5' SECOND, INTERVAL '15' SECOND)
}


def _last_window_end(kind: str, slice_end: int, size: int, step: int, offset: int) -> int:
    """The end of the last window a slice belongs to: its state lives until that window fires."""
    if kind == "tumble":
        return slice_end
    if kind == "hop":
        return slice_end + size - step
    start = (slice_end - step - offset) // size * size + offset  # cumulate: its max-size window's
    return start + size


@pytest.mark.parametrize("kind", ["tumble", "hop", "cumulate"])
@pytest.mark.parametrize("offset", [0, SECOND])
@pytest.mark.parametrize("phases", ["", "-two-phase"])
def test_a_window_aggregate_keeps_the_accumulators_of_each_slice_not_yet_fired(kind, offset, phases):
    """WindowAggregateTestPrograms' tumble, hop and cumulate programs (event time, with an offset
    of 1 s or none, one phase or the global phase of two): window state is kept per slice (the
    slide or step; the namespace is the slice's end), until the last window holding the slice
    fires (its end - 1 ms passed by the watermark). At the savepoint the watermark is the last
    rowtime - 1 s (00:00:33), so only 00:00:32 and 00:00:34's slice is left, per name; its timer
    fires the next window, which ends at the slice's end."""
    size, step = SLICED_WINDOWS[kind]
    groups: dict = {}
    for row in WINDOW_ROWS:
        slice_end = (_millis(row[0]) - offset) // step * step + offset + step
        if _last_window_end(kind, slice_end, size, step, offset) - 1 > WINDOW_WATERMARK:
            groups.setdefault((row[3], slice_end), []).append(row)
    expected = _expect_windows(groups)
    timers = {at: at[1] - 1 for at in groups}
    name = f"window-aggregate-{kind}-event-time{phases}{'-with-offset' if offset else ''}"
    for savepoint in _releases("stream-exec-window-aggregate_1", name):
        _check_window_aggregate(savepoint, expected, timers)


def _sessions(rows: Iterable[tuple], gap: int, partition: Callable[[tuple], object]) -> dict:
    """Event-time session windows per partition, rows in arrival order: a row opens [t, t + gap)
    and merges with every window it overlaps; a row whose own window the watermark has passed is
    late and dropped. {(partition, (start, end)): rows}."""
    sessions: dict = {}
    watermark = LONG_MIN
    for row in rows:
        t = _millis(row[0])
        if t + gap - 1 > watermark:
            part = partition(row)
            start, end, members = t, t + gap, [row]
            for at in [at for at in sessions if at[0] == part and at[1][0] < end and start < at[1][1]]:
                merged = sessions.pop(at)
                start, end, members = min(start, at[1][0]), max(end, at[1][1]), merged + members
            sessions[(part, (start, end))] = members
        watermark = max(watermark, t - WATERMARK_DELAY)
    return sessions


@pytest.mark.parametrize("phases", ["", "-two-phase"])
def test_a_partitioned_session_window_keeps_the_accumulators_of_each_open_session(phases):
    """WindowAggregateTestPrograms.SESSION_WINDOW_PARTITION_EVENT_TIME(_TWO_PHASE): SESSION(TABLE
    window_source_t PARTITION BY name, DESCRIPTOR(rowtime), INTERVAL '5' SECOND): per name the
    sessions the watermark (00:00:33) has not closed, each with its accumulators, a mapping from
    the session to the window its state is kept under (itself: no open session merged) and a timer
    at its end - 1 ms."""
    open_sessions = {
        (part, bounds): rows
        for (part, bounds), rows in _sessions(WINDOW_ROWS, SESSION_GAP, lambda r: r[3]).items()
        if bounds[1] - 1 > WINDOW_WATERMARK
    }
    expected = _expect_windows(open_sessions)  # a TimeWindow namespace reads as (start, end)
    timers = {at: at[1][1] - 1 for at in open_sessions}
    mappings: dict = {}
    for part, bounds in open_sessions:
        mappings.setdefault(part, {})[bounds] = bounds
    for savepoint in _releases(
        "stream-exec-window-aggregate_1", f"window-aggregate-session-partition-event-time{phases}"
    ):
        _check_window_aggregate(savepoint, expected, timers)
        assert _state(savepoint, "session-window-mapping") == mappings


@pytest.mark.parametrize("phases", ["", "-two-phase"])
def test_a_session_window_over_every_row_buffers_the_open_sessions_rows(phases):
    """WindowAggregateTestPrograms.SESSION_WINDOW_EVENT_TIME(_TWO_PHASE): SESSION(TABLE
    window_source_t, DESCRIPTOR(rowtime), INTERVAL '5' SECOND) without partition is a window table
    function before a group aggregate. The function buffers the open session's rows (00:00:32 and
    00:00:34, merged into [32, 39) and kept under the window of its first row, [32, 37)) by arrival
    number, counts every row it took, and sets a timer at the session's end - 1 ms; the aggregate
    (GROUP BY name, window_start, window_end) holds the closed sessions' accumulators."""
    sessions = _sessions(WINDOW_ROWS, SESSION_GAP, lambda r: NO_FIELDS)
    closed = {at: rows for at, rows in sessions.items() if at[1][1] - 1 <= WINDOW_WATERMARK}
    ((_, session), buffered) = next((at, rows) for at, rows in sessions.items() if at not in closed)
    first = _millis(buffered[0][0])
    kept_under = (first, first + SESSION_GAP)
    groups: dict = {}
    for (_, (start, end)), rows in closed.items():
        for row in rows:
            groups.setdefault((row[3], _rowtime_of(start), _rowtime_of(end)), []).append(row)
    aggregated = _expect_windows(groups)
    aggregated["accState"] = aggregated.pop("window-aggs")
    numbered = {n: (r[1], r[2], r[3], _rowtime(r[0])) for n, r in enumerate(WINDOW_ROWS) if r in buffered}
    for savepoint in _releases("stream-exec-window-aggregate_1", f"window-aggregate-session-event-time{phases}"):
        assert _state(savepoint, "session-window-tvf-counter") == {NO_FIELDS: len(WINDOW_ROWS)}
        assert _state(savepoint, "session-window-mapping") == {NO_FIELDS: {session: kept_under}}
        assert _state(savepoint, "session-window-tvf-acc", by_namespace=True) == {(NO_FIELDS, kept_under): numbered}
        assert _state(savepoint, "_timer_state/event_session-window-tvf-timers", by_namespace=True) == {
            (NO_FIELDS, session): session[1] - 1
        }
        states = {name: _state(savepoint, name) for name in aggregated}
        states["accState"] = {key: acc[:3] for key, acc in states["accState"].items()}
        assert states == aggregated


# ----------------------------------------------------------------------------- over aggregates

# OverAggregateTestPrograms.DATA (ts, a, b, c) of the 1.20 release, whose savepoints the 1.20.3 jar
# holds (2.0 took them again from other rows): rowtime = TO_TIMESTAMP(FROM_UNIXTIME(ts)) in UTC, the
# watermark the rowtime itself. SELECT c, ts, rowtime, b, LTCNT(a, CAST('4' AS BIGINT)) OVER w,
# COUNT(a) OVER w, SUM(a) OVER w ... PARTITION BY c ORDER BY rowtime.
OVER_RELEASE = "1.20.3"
OVER_ROWS = (
    (10, 1, 1, "Hello"),
    (15, 1, 15, "Hello"),
    (16, 1, 16, "Hello"),
    (20, 2, 2, "Hello"),
    (20, 2, 2, "Hello"),
    (20, 2, 3, "Hello"),
    (30, 3, 3, "Hello"),
    (40, 4, 4, "Hello"),
    (50, 5, 5, "Hello"),
    (60, 6, 6, "Hello"),
    (65, 6, 65, "Hello"),
    (51, 19, 15, "Hello"),
    (90, 6, 9, "Hello"),
    (95, 6, 18, "Hello"),
    (90, 6, 10, "Hello"),
    (90, 7, 9, "Hello"),
    (92, 7, 9, "Hello"),
    (100, 7, 7, "Hello World"),
    (99, 19, 15, "Hello"),
    (110, 7, 17, "Hello World"),
    (110, 7, 77, "Hello World"),
    (140, 7, 18, "Hello World"),
    (53, 19, 15, "Hello"),
    (150, 8, 8, "Hello World"),
    (200, 20, 20, "Hello World"),
    (12, 1, 1, "Hello World"),
    (33, 17, 1, "Hello"),
    (37, 19, 15, "Hello"),
    (52, 19, 15, "Hello"),
    (13, 1, 1, "Hello"),
    (19, 1, 15, "Hello"),
)
LTCNT_LIMIT = 4  # the literal LTCNT's rows carry along


def _over_savepoint(name: str) -> Path:
    return program(OVER_RELEASE, "stream-exec-over-aggregate_1", name)


def test_an_unbounded_over_aggregate_accumulates_every_row_the_watermark_passed():
    """OverAggregateTestPrograms.OVER_AGGREGATE_UNBOUNDED_PARTITIONED_ROWS (1.20): RANGE UNBOUNDED
    PRECEDING drops a row whose rowtime the watermark (the greatest rowtime before it) has
    reached; per c, COUNT(a) and SUM(a) of the rows taken, all of them processed (nothing waits)."""
    taken: dict = {}
    watermark = LONG_MIN
    for ts, a, _, c in OVER_ROWS:
        if ts > watermark:
            taken.setdefault(c, []).append(a)
        watermark = max(watermark, ts)
    savepoint = _over_savepoint("over-aggregate-unbounded-partitioned-rows")
    accumulators = {c: acc[1:] for c, acc in _state(savepoint, "accState").items()}  # acc[0]: LTCNT's, shown as stored
    assert accumulators == {c: (len(a), sum(a)) for c, a in taken.items()}
    assert _state(savepoint, "inputState") == {}


def test_a_rows_bounded_over_aggregate_keeps_the_window_of_rows_per_key():
    """OverAggregateTestPrograms.OVER_AGGREGATE_ROW_BOUNDED_PARTITIONED_PRECEDING_ROWS (1.20):
    ROWS BETWEEN 5 PRECEDING AND CURRENT ROW drops a row not after its key's last processed rowtime
    (the watermark is the rowtime, so each is processed as the next arrives). Per c: the last 6
    rows processed (the input row with LTCNT's literal), their COUNT(a), SUM(a) and SUM's count,
    how many rows the window holds, and the last rowtime processed."""
    taken: dict = {}
    for ts, a, b, c in OVER_ROWS:
        if not taken.get(c) or ts > taken[c][-1][0]:
            taken.setdefault(c, []).append((ts, a, b, c))
    savepoint = _over_savepoint("over-aggregate-bounded-partitioned-preceding-rows")
    window = {c: rows[-6:] for c, rows in taken.items()}
    assert _state(savepoint, "inputState") == {
        c: {ts * SECOND: [(ts, a, b, c, _rowtime_of(ts * SECOND), LTCNT_LIMIT)] for ts, a, b, c in rows}
        for c, rows in window.items()
    }
    accumulators = {c: acc[1:] for c, acc in _state(savepoint, "accState").items()}
    assert accumulators == {c: (len(rows), sum(r[1] for r in rows), len(rows)) for c, rows in window.items()}
    assert _state(savepoint, "processedCountState") == {c: len(rows) for c, rows in window.items()}
    assert _state(savepoint, "lastTriggeringTsState") == {c: rows[-1][0] * SECOND for c, rows in taken.items()}


# OverWindowTestPrograms.getSource (key, val, ts; changelog I,UB,UA) and APPEND_SOURCE: producedBeforeRestore.
CHANGELOG = (
    ("+I", ("key1", 1, 100)),
    ("+I", ("key1", 2, 200)),
    ("+I", ("key1", 5, 500)),
    ("+I", ("key1", 6, 600)),
    ("-U", ("key1", 2, 200)),
    ("+U", ("key1", 3, 200)),
    ("+I", ("key2", 1, 100)),
    ("+I", ("key2", 2, 200)),
)
APPENDS = tuple(change for change in CHANGELOG if change[0] == "+I")


def _non_time_over_states(changes: Iterable[tuple[str, tuple]], frame: str) -> dict:
    """The states of SUM(val) OVER (PARTITION BY key ORDER BY val ROWS | RANGE BETWEEN UNBOUNDED
    PRECEDING AND CURRENT ROW): per key each live row under an id (counted from Long.MIN_VALUE, the
    next in idState), the ids by sort key in order, and the accumulators (rows so far, running sum)
    at each id (ROWS) or sort key (RANGE, a key's rows together)."""
    rows: dict = {}
    next_id: dict = {}
    for kind, row in changes:
        key = row[0]
        live = rows.setdefault(key, {})
        if kind in ("+I", "+U"):
            live[next_id.get(key, LONG_MIN)] = row
            next_id[key] = next_id.get(key, LONG_MIN) + 1
        else:  # a retraction removes the row it names
            del live[next(i for i, r in live.items() if r == row)]
    sorted_ids, accumulators = {}, {}
    for key, live in rows.items():
        by_val: dict = {}
        for i, row in sorted(live.items(), key=lambda item: item[1][1]):
            by_val.setdefault(row[1], []).append(i)
        sorted_ids[key] = [((val,), ids) for val, ids in by_val.items()]
        count = total = 0
        accumulators[key] = {}
        for val, ids in by_val.items():
            for i in ids:
                count, total = count + 1, total + val
                if frame == "rows":
                    accumulators[key][(i,)] = (count, total)
            if frame == "range":
                accumulators[key][(val,)] = (count, total)
    return {
        "valueMapState": rows,
        "idState": next_id,
        "sortedListState": sorted_ids,
        "accMapState": accumulators,
    }


@pytest.mark.parametrize("frame", ["rows", "range"])
@pytest.mark.parametrize("mode", ["append", "retract"])
def test_a_non_time_over_aggregate_keeps_each_row_its_sort_position_and_running_sums(frame, mode):
    """OverWindowTestPrograms.OVER_AGGREGATE_NON_TIME_{ROWS,RANGE}_UNBOUNDED_SUM_{APPEND,RETRACT}_MODE:
    SUM(val) OVER (PARTITION BY key ORDER BY val ...) over APPEND_SOURCE's inserts, or over
    getSource's changelog whose -U/+U replaces (key1, 2, 200) by (key1, 3, 200)."""
    expected = _non_time_over_states(APPENDS if mode == "append" else CHANGELOG, frame)
    name = f"over-aggregate-non-time-{frame}-unbounded-sum-{mode}-mode"
    for savepoint in _releases("stream-exec-over-aggregate_1", name):
        assert {state: _state(savepoint, state) for state in expected} == expected, savepoint


# ----------------------------------------------------------------------------- bytes

# Parts statecat cannot write back as Flink stored them (gaps in readers/codecs/decoders.py and
# readers/codecs/encoders.py), by program and state, with why. Any other part that does not round-trip
# fails; a gap closed needs no change here.
ENCODER_GAPS = {
    (
        "stream-exec-sink_1/insert-into-upsert-with-sink-upsert-materializer-writable-metadata-v1",
        "values",
    ): "the materializer's rows carry the sink's writable metadata columns, which its serializer "
    "snapshot does not declare (ROW<STRING, BIGINT> holding four fields): statecat reads and writes "
    "the declared two",
    **{
        (program_name, "_delta_join_operator_async_wait_state_"): "a buffered delta-join record holds "
        "a row of NULLs (the side not looked up yet) in fields its type declares NOT NULL, which the "
        "encoder refuses"
        for program_name in (
            "stream-exec-delta-join_1/delta-join-with-cdc-source-without-delete",
            "stream-exec-delta-join_1/delta-join-with-cache-and-cdc-source-without-delete",
            "stream-exec-delta-join_1/delta-join-with-cache-and-calc-on-cdc-source-without-delete",
            "stream-exec-delta-join_2/delta-join-with-cache-and-calc-on-cdc-source-without-delete",
        )
    },
}


class _EveryPartRebuilt:
    """A StateEditor that claims every key-group and operator state and changes nothing: the writer
    parses and frames each key-group and cuts each operator state into elements, as for an edit."""

    def __init__(self, savepoint: Path) -> None:
        meta = _reader(savepoint).meta
        self.key_groups_of = {op.id: frozenset(range(op.max_parallelism)) for op in meta.metadata.operators}
        self.operator_states_of = {
            op.id: frozenset({COORDINATOR_STATE, *(s.name for s in op.states if not s.is_keyed)})
            for op in meta.operators
        }

    def key_groups(self, operator_id: str) -> frozenset[int]:
        return self.key_groups_of[operator_id]

    def edit(self, operator, key_group: int, entries: dict) -> dict:
        return {}

    def operator_states(self, operator_id: str) -> frozenset[str]:
        return self.operator_states_of.get(operator_id, frozenset())

    def edit_elements(self, operator, state: str, subtask, elements: list[bytes]) -> list[bytes]:
        return list(elements)


def _program_of(savepoint: Path, version: str) -> str:
    return str(savepoint.parent.relative_to(restore_tests_root(version)))


def _encoding_failures(savepoint: Path, version: str) -> list[str]:
    """Every state's parts through the encoders: what failed outside ENCODER_GAPS."""
    reader = _reader(savepoint)
    failures = []
    for operator in reader.meta.operators:
        for state in operator.states:
            try:
                assert_parts_round_trip(state.name, stored_parts(reader, operator, state))
            except (AssertionError, StatecatError) as exc:
                if (_program_of(savepoint, version), state.name) not in ENCODER_GAPS:
                    first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    failures.append(
                        f"{_program_of(savepoint, version)} :: {operator.label} :: {state.name}: {first_line[:300]}"
                    )
    return failures


def _writer_failures(savepoint: Path, out: Path) -> list[str]:
    """The savepoint through the writer, unedited: copied, its _metadata is Flink's but for the
    properties of a plain savepoint (the restore tests stop with a savepoint); rebuilt part by part,
    every stream holds Flink's bytes (a key-group's runs perhaps in state-id order)."""
    failures = []
    copied, rebuilt = out / "copied", out / "rebuilt"
    meta = _reader(savepoint).meta  # parsed once for the reads and both writes
    write_savepoint(meta, str(copied))
    source, written = (savepoint / METADATA).read_bytes(), (copied / METADATA).read_bytes()
    flinks = metadata_properties(source) if meta.metadata.version >= FIRST_VERSION_WITH_PROPERTIES else b""
    plain = savepoint_properties(CANONICAL_FORMAT, SAVEPOINT_NAME, SAVEPOINT_ACTION) if flinks else b""
    if written != source[: len(source) - len(flinks)] + plain:
        failures.append(f"{savepoint}: an unedited copy's _metadata is not Flink's")
    write_savepoint(meta, str(rebuilt), editor=_EveryPartRebuilt(savepoint))
    before, after = handle_streams(savepoint), handle_streams(rebuilt)
    if [s[:4] for s in before] != [s[:4] for s in after]:
        failures.append(f"{savepoint}: a rebuilt copy's handles are not Flink's")
    for (op, subtask, handle, _, stored), (*_, got) in zip(before, after):
        if got != stored:
            failures.append(f"{savepoint}: operator {op} subtask {subtask} {handle}: rebuilt bytes differ")
    return failures


def _content(savepoint: Path) -> str:
    """A digest of the savepoint's files: most programs' savepoints are the same bytes in every release."""
    digest = hashlib.sha256()
    for path in sorted(savepoint.iterdir()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


# Failures by savepoint content: a savepoint another release's jar holds too is checked once.
_CHECKED: dict[str, list[str]] = {}


@pytest.mark.parametrize("version", RESTORE_TEST_VERSIONS)
def test_every_restore_test_state_comes_back_byte_for_byte(version, tmp_path):
    """Every state of every savepoint of the release: each part statecat decodes encodes back to
    the bytes Flink stored (tests/round_trip.py, as for the fixture corpus; parts shown as bytes
    have no encoder and say so), and the writer gives back Flink's bytes, copying or rebuilding."""
    failures, states = [], 0
    for n, savepoint in enumerate(savepoints(version)):
        states += sum(len(operator.states) for operator in _reader(savepoint).meta.operators)
        content = _content(savepoint)
        if content not in _CHECKED:
            _CHECKED[content] = _encoding_failures(savepoint, version) + _writer_failures(savepoint, tmp_path / str(n))
        failures += _CHECKED[content]
    assert states > 1300, f"{states} states in the {version} restore tests"
    assert failures == [], f"{len(failures)} failures in {states} states:\n" + "\n".join(failures[:40])
