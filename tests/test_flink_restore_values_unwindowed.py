"""Flink's own restore-test savepoints held to the programs that made them, as
tests/test_flink_restore_values_more.py does (its docstring says how): the operators without
windows (changelog normalize, multi-joins, sinks and lookup joins, group aggregates, process table
functions, the test sinks).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable

import pytest

from tests.fixtures.restore_tests import RESTORE_TEST_VERSIONS, program
from tests.test_flink_restore_values import (
    LONG_MIN,
    NO_FIELDS,
    _elements,
    _reader,
    _releases,
    _rowtime,
    _same_states,
    _state,
    _states,
)
from tests.test_flink_restore_values_timed import DISTINCT_BUCKETS, _bucket

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
