"""sql_examples/: every file parses with sqlglot (Spark dialect) and answers its question on the fixtures.

Expected results come from the fixtures' ground truth (expected.json, written from the job input)
and, for the metadata questions, from statecat.statemeta. ``expected_rows`` is shared with
tests/test_catalog_cli.py, which runs the same files through the real ``spark-sql``.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
import sqlglot

from tests.fixtures.expected import load_expected, savepoint_dir

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "sql_examples"
EXAMPLES = sorted(p.name for p in EXAMPLES_DIR.glob("*.sql"))
TIMERS_BEFORE_MS = 1704067620000


def example_sql(name: str) -> str:
    return (EXAMPLES_DIR / name).read_text(encoding="utf-8")


def _state(case: str, name: str) -> dict:
    return next(s for op in load_expected(case)["operators"] for s in op["states"] if s["name"] == name)


def _utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).replace(tzinfo=None)


def expected_rows(name: str) -> list[tuple]:
    """The rows an example must return, in order (session time zone UTC)."""
    if name.startswith("01_"):
        from statecat.catalog.spark.tables import state_table_names
        from statecat.statemeta.model import load_state_meta

        meta = load_state_meta(str(savepoint_dir("sql_groupby_hashmap_2.3")))
        tables = state_table_names(meta)
        rows = [
            (
                op.name,
                s.name,
                s.kind,
                s.state_type,
                s.key.describe() if s.key else None,
                s.namespace.describe() if s.namespace else None,
                s.value.describe(),
                s.decode_status,
                tables[(op.id, s.name)],
            )
            for op, s in meta.states()
        ]
        return sorted(rows, key=lambda r: (r[0], r[1]))
    if name.startswith("02_"):
        # The job (a filesystem table: a FileSource) waited for all its input before the savepoint:
        # its readers hold no split, its enumerator nothing pending and every input file as seen.
        assert _state("sql_groupby_hashmap_2.3", "SourceReaderState")["rows"] == []
        seen = sorted(p.rsplit("/", 1)[1] for p in _state("sql_groupby_hashmap_2.3", "_coordinator")["raw_contains"])
        return [("file", None, None, None, None, None, None, 0, ",".join(seen))]
    if name.startswith("03_"):
        row = next(r for r in _state("sql_groupby_hashmap_2.3", "accState")["rows"] if r["key"] == "key_662")
        return [("key_662", row["value"]["f0"], row["value"]["f1"])]
    if name.startswith("04_"):
        rows = [r for r in _state("sql_window_2.3", "window-aggs")["rows"] if r["key"] == "w_8"]
        return [
            (r["key"], r["namespace"], _utc(r["namespace"]), r["value"]["f0"], r["value"]["f1"])
            for r in sorted(rows, key=lambda r: r["namespace"])
        ]
    if name.startswith("05_"):
        left = next(r for r in _state("sql_join_2.3", "left-records")["rows"] if r["key"] == "j_0")
        right = next(r for r in _state("sql_join_2.3", "right-records")["rows"] if r["key"] == "j_0")
        rows = [("left", "j_0", rec["f1"], str(rec["f2"]), count) for rec, count in left["value"]]
        rows += [("right", "j_0", rec["f1"], rec["f2"], 1) for _, rec in right["value"]]
        return sorted(rows, key=lambda r: (r[0], r[2]))
    if name.startswith("06_"):
        entries: dict[str, int] = {}
        states: dict[str, int] = {}
        for state in ("left-records", "right-records"):
            for r in _state("sql_join_2.3", state)["rows"]:
                entries[r["key"]] = entries.get(r["key"], 0) + len(r["value"])
                states[r["key"]] = states.get(r["key"], 0) + 1
        return [(k, states[k], n) for k, n in entries.items()]  # compared by check_largest_keys
    if name.startswith("07_"):
        rows = [
            r
            for r in _state("sql_window_2.3", "_timer_state/event_window-timers")["rows"]
            if r["value"] < TIMERS_BEFORE_MS
        ]
        return [
            (r["key"], r["namespace"], r["value"], _utc(r["value"]))
            for r in sorted(rows, key=lambda r: (r["value"], r["key"]))
        ]
    if name.startswith("08_"):
        return _bytes_per_state_rows(["sql_groupby_hashmap_2.3", "sql_join_2.3", "sql_window_2.3"])
    if name.startswith("09_"):
        return _key_history_rows(
            ["sql_groupby_hashmap_1.20", "sql_groupby_hashmap_2.3", "sql_groupby_rocksdb_2.3"], "key_662"
        )
    if name.startswith("10_"):
        return _diff_counts("sql_groupby_hashmap_1.20", "sql_groupby_rocksdb_2.3", "accState")
    raise AssertionError(f"no expected result for example {name}")


def _bytes_per_state_rows(cases: list[str]) -> list[tuple]:
    """Bytes and operator totals measured without statecat's readers (the fixtures' _metadata parser
    and a plain key-group walk, tests/test_catalog_views.probe_state_bytes); entries as the jobs'
    input implies them (expected.json)."""
    from tests.test_catalog_views import probe_state_bytes

    rows = []
    for case in cases:
        expected = {
            s["name"]: len(s["rows"])
            for op in load_expected(case)["operators"]
            for s in op["states"]
            if s["rows"] is not None and s["state_type"] != "MAP"
        }
        for (operator, state), (entries, size, total) in probe_state_bytes(case).items():
            if size > 0:
                assert state not in expected or expected[state] == entries, (case, state)
                rows.append((case.replace(".", "_"), operator, state, entries, size, total))
    return sorted(rows, key=lambda r: (r[0], -r[4], r[1], r[2]))


def _key_history_rows(cases: list[str], key: str) -> list[tuple]:
    """The key's aggregate in each savepoint (expected.json), ordered by when each was taken and then by
    database (times and checkpoint ids are metadata: statecat.statemeta)."""
    from statecat.statemeta.model import load_state_meta
    from statecat.statemeta.snapshotter.taken_at import savepoint_time

    rows = []
    for case in cases:
        value = next(r for r in _state(case, "accState")["rows"] if r["key"] == key)["value"]
        taken_at, _ = savepoint_time(str(savepoint_dir(case)))
        database = case.replace(".", "_")
        rows.append(
            (
                (taken_at, database),
                (
                    database,
                    load_state_meta(str(savepoint_dir(case))).checkpoint_id,
                    "accState",
                    value["f0"],
                    value["f1"],
                ),
            )
        )
    return [row for _, row in sorted(rows)]


def _diff_counts(case_a: str, case_b: str, state: str) -> list[tuple]:
    """(state, change, entries) the two savepoints' expected contents imply (tests/test_diff.expected_changes)."""
    from statecat.statemeta.model import load_state_meta
    from tests.test_diff import expected_changes

    op = next(op for op, s in load_state_meta(str(savepoint_dir(case_a))).states() if s.name == state)
    changes = expected_changes(case_a, case_b)[(op.id, state)]
    return [(state, change, len(changes[change])) for change in ("added", "changed", "removed") if changes[change]]


def check_largest_keys(got: list[tuple], all_keys: list[tuple]) -> None:
    """The ten keys with most entries (ties ordered by JSON size, which only statecat renders)."""
    by_key = {k: (s, n) for k, s, n in all_keys}
    top = sorted((n for _, _, n in all_keys), reverse=True)[:10]
    assert [row[2] for row in got] == top
    for key, states, entries, json_bytes in got:
        assert by_key[key] == (states, entries) and json_bytes > 0


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_parses_with_sqlglot_spark_dialect(name):
    statements = sqlglot.parse(example_sql(name), read="spark")
    assert len([s for s in statements if s is not None]) == 1
    assert not any(isinstance(s, sqlglot.exp.Command) for s in statements)


def test_every_scenario_has_an_example():
    assert len(EXAMPLES) == 10
    for name in EXAMPLES:
        first = example_sql(name).splitlines()[0]
        assert first.startswith("-- ") and first.endswith("?"), f"{name} starts with the question it answers"


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    from tests.test_catalog import attached_spark

    return attached_spark(tmp_path_factory)


@pytest.mark.spark
@pytest.mark.parametrize("name", EXAMPLES)
def test_example_answers_its_question(spark, name):
    from statecat.catalog import sql

    got = [tuple(r) for r in sql(spark, example_sql(name)).collect()]
    if name.startswith("06_"):
        check_largest_keys(got, expected_rows(name))
    else:
        assert got == expected_rows(name)


def test_main_example_is_the_key_662_aggregate():
    assert expected_rows("03_aggregate_for_key.sql") == [("key_662", 1, 336)]
    assert json.loads(json.dumps(expected_rows("03_aggregate_for_key.sql")))  # plain values for the CLI test
