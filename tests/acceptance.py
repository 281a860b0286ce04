"""Checks a savepoint against its case's expected.json (ground truth derived from the job's input).

Shared by the committed-fixture tests and the live-Flink test that regenerates savepoints, so both
hold fresh bytes to the same standard.
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

from statecat.catalog.cli.inspect import describe
from statecat.catalog.render import json_value
from statecat.readers import SavepointReader
from statecat.readers.keygroups import key_group_for
from statecat.readers.scans.scan import KeyedStateScanner
from statecat.statemeta.model import OperatorMeta, StateMeta, load_state_meta

PYFLINK_PROCESS_PREFIX = "python-state-"


def snapshot_dir(path: Path) -> Path:
    """The snapshot to read: ``path`` itself when it holds ``_metadata`` (a savepoint or one phase's
    checkpoint), else the case directory's savepoint (tests/fixtures/expected.py)."""
    path = Path(path)
    if (path / "_metadata").exists():
        return path
    from tests.fixtures.expected import savepoint_dir

    return savepoint_dir(path)


def find_operator(meta: StateMeta, expected_op: dict) -> OperatorMeta:
    if expected_op.get("uid"):
        return meta.operator(expected_op["uid"])
    matches = [op for op in meta.operators if op.name and expected_op["name_contains"] in op.name]
    if not any(op.name for op in meta.operators):
        # _metadata before version 5 (Flink < 2.0) keeps no operator names: match by the states held.
        wanted = {s["name"] for s in expected_op["states"]}
        matches = [op for op in meta.operators if op.states and wanted <= {s.name for s in op.states}]
    assert len(matches) == 1, f"operators named like {expected_op['name_contains']!r}: {[op.name for op in matches]}"
    return matches[0]


def canonical(value):
    """JSON form with maps as sorted pair lists, so comparisons ignore map order but keep list order."""
    value = json_value(value)
    return _sorted_maps(value)


def _sorted_maps(value):
    if isinstance(value, dict):
        return {k: _sorted_maps(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_sorted_maps(v) for v in value]
    return value


def _row_sort_key(row: dict) -> str:
    return json.dumps(row, sort_keys=True, default=str)


def _normalise_expected_map(value):
    """expected.json writes non-string-keyed maps as [k, v] pairs; order is irrelevant."""
    if isinstance(value, list) and value and all(isinstance(p, list) and len(p) == 2 for p in value):
        return sorted(value, key=_row_sort_key)
    return value


def check_inspect(case_dir: Path, expected: dict) -> None:
    meta = load_state_meta(snapshot_dir(case_dir))
    report = describe(meta)
    assert report["metadata_version"] == expected["metadata_version"]
    assert report["savepoint_format"] == expected.get("savepoint_format", "CANONICAL")
    by_id = {op["id"]: op for op in report["operators"]}
    named = set()
    for expected_op in expected["operators"]:
        op = find_operator(meta, expected_op)
        named.add(op.id)
        listed = by_id[op.id]
        assert listed["parallelism"] == expected_op["parallelism"]
        assert listed["max_parallelism"] == expected_op["max_parallelism"]
        assert {s["name"] for s in listed["states"]} == {s["name"] for s in expected_op["states"]}, op.label
        if "unsupported_contains" in expected_op:
            assert listed["unsupported"], f"{op.label} holds state statecat must report as unsupported"
            assert all(expected_op["unsupported_contains"] in reason for reason in listed["unsupported"])
        kinds = {s["name"]: (s["kind"], s["state_type"]) for s in listed["states"]}
        for state in expected_op["states"]:
            assert kinds[state["name"]] == (state["kind"], state["state_type"]), state["name"]
    unnamed = [op for op in report["operators"] if op["states"] and op["id"] not in named]
    assert not unnamed, (
        f"states not in expected.json: {[(op['name'], [s['name'] for s in op['states']]) for op in unnamed]}"
    )
    handle_kinds = {kind.split("/")[-1] for op in report["operators"] for kind in op["handles"]}
    if expected["expect_file_handles"]:
        assert "relative" in handle_kinds or "file" in handle_kinds
    if expected["expect_inline_handles"]:
        assert "inline" in handle_kinds


def _pyflink_row(fields, values, row_kind=None):
    """A pyflink.common.Row in its expected.json form: named by field, else f0, f1, ..."""
    return dict(zip(fields, values)) if fields else {f"f{i}": v for i, v in enumerate(values)}


class _FixtureUnpickler(pickle.Unpickler):
    """pickle.loads that reads PyFlink Row pickles without pyflink installed: a Row pickles as
    (pyflink.common.types._create_row, (fields, values, RowKind.INSERT)) (Row.__reduce__)."""

    def find_class(self, module, name):
        if module == "pyflink.common.types" and name == "_create_row":
            return _pyflink_row
        if module == "pyflink.common.types" and name == "RowKind":
            return lambda value: value
        return super().find_class(module, name)


def _json_of_pickle(data: bytes):
    """The test's own reading of PyFlink pickled bytes (trusted fixture): JSON form of the object."""
    return json.loads(json.dumps(_FixtureUnpickler(io.BytesIO(data)).load()))  # noqa: S301 - fixture bytes written by our own job


def _comparable(rows: list[dict], columns: list[str]) -> list[dict]:
    return sorted(({c: _normalise_expected_map(r.get(c)) for c in columns} for r in rows), key=_row_sort_key)


def _is_bytes(value) -> bool:
    return isinstance(value, dict) and set(value) == {"hex"}


def check_kryo_bytes(rows: list[dict], expected_rows: list[dict], state_info, expected_state: dict) -> None:
    """A Kryo state read without the job's classes: the expected keys, each value bytes in the
    state's shape (a list of them for ListState, one per map key for MapState), the reason naming
    the class and --classpath, and per key the bytes expected.json says a value holds."""
    assert state_info.decode_status == "raw", f"{expected_state['name']}: Kryo values decoded without classes"
    reason = "; ".join(state_info.raw_reasons)
    assert expected_state["kryo_class"] in reason and "--classpath" in reason, reason
    got = {json.dumps(r["key"]): r["value"] for r in rows}
    want = {json.dumps(r["key"]): r["value"] for r in expected_rows}
    assert sorted(got) == sorted(want)
    for key, value in got.items():
        if expected_state["state_type"] == "LIST":
            # one bytes value per element, or the whole list's bytes (a ListState read as one value)
            assert _is_bytes(value) or (
                isinstance(value, list) and len(value) == len(want[key]) and all(map(_is_bytes, value))
            ), key
        elif expected_state["state_type"] == "MAP":
            assert isinstance(value, dict) and sorted(value) == sorted(want[key]), key
            assert all(map(_is_bytes, value.values())), key
        else:
            assert _is_bytes(value), key
    for key, hex_part in (expected_state.get("value_hex_contains") or {}).items():
        assert hex_part in got[json.dumps(key)]["hex"], key


def check_state_rows(case_dir: Path, expected_op: dict, expected_state: dict) -> None:
    reader = SavepointReader(snapshot_dir(case_dir))
    op = find_operator(reader.meta, expected_op)
    table = reader.table(expected_state["name"], op.id)
    rows = [{name: canonical(value) for name, value in row.items()} for row in table.to_pylist()]
    if expected_state["rows"] is None:
        # a decoded source enumerator keeps its bytes in value.raw (statemeta/source_splits.py)
        blob = b"".join(
            bytes.fromhex(r["value"].get("raw", r["value"])["hex"]) for r in rows if isinstance(r.get("value"), dict)
        )
        assert expected_state.get("raw_contains"), "a state without rows must name strings its bytes contain"
        for text in expected_state["raw_contains"]:
            assert text.encode() in blob, f"{text!r} not in the raw bytes of {expected_state['name']}"
        return
    expected_rows = expected_state["rows"]
    if expected_state.get("serializer") == "kryo":
        # Read without the job's classes, Kryo values stay bytes, with the reason
        # (tests/test_java_type_matrix.py decodes them with the job's jar).
        check_kryo_bytes(rows, expected_rows, reader.meta.find_state(expected_state["name"], op.id)[1], expected_state)
        return
    if expected_state["name"].startswith(PYFLINK_PROCESS_PREFIX):
        # PyFlink coder bytes; typed reads need the job's descriptors (tests/test_stateinfo_pyflink.py).
        assert (
            reader.meta.find_state(expected_state["name"], op.id)[1].decode_status == "raw"
            or expected_state["kind"] == "broadcast"
        )
        assert len({json.dumps(r.get("key"), sort_keys=True) for r in rows}) == len(
            {json.dumps(r.get("key"), sort_keys=True) for r in expected_rows}
        )
        return
    if (
        expected_state.get("declared_type")
        and rows
        and all(isinstance(r["value"], dict) and set(r["value"]) == {"hex"} for r in rows)
    ):
        # Thread mode keeps pickled values as byte[]: check that the bytes are the expected objects.
        rows = [{**r, "value": _json_of_pickle(bytes.fromhex(r["value"]["hex"]))} for r in rows]
    columns = [c for c in table.column_names if c != "subtask"]
    if "ttl_timestamp" in columns and not any("ttl_timestamp" in r for r in expected_rows):
        # The job's clock, not its input, sets TTL timestamps: tests/test_ttl_timestamp.py checks them.
        columns.remove("ttl_timestamp")
        assert all(r["ttl_timestamp"] is not None for r in rows), "a TTL value without its timestamp"
    if expected_state["kind"] == "broadcast":
        # Every subtask holds the whole broadcast state.
        subtasks = {r["subtask"] for r in rows}
        assert subtasks, "broadcast state has no rows"
        for subtask in subtasks:
            assert _comparable([r for r in rows if r["subtask"] == subtask], columns) == _comparable(
                expected_rows, columns
            )
        return
    if any("subtask" in r for r in expected_rows):
        columns.append("subtask")
    got, want = _comparable(rows, columns), _comparable(expected_rows, columns)
    assert len(got) == len(want), f"{len(got)} rows decoded, {len(want)} expected"
    for g, w in zip(got, want):
        assert g == w


def check_key_groups(case_dir: Path) -> int:
    """Every decoded key lies in the key-group Flink's assignment predicts; returns keys checked."""
    meta = load_state_meta(snapshot_dir(case_dir))
    checked = 0
    for op, state in meta.states():
        if not state.is_keyed or state.decode_status != "full":
            continue
        scanner = KeyedStateScanner(meta, op, state)
        for location in state.locations:
            for key_group, data, file, base in scanner._key_groups(location, None):
                columns = ([], [], [])
                scanner._decode_key_group(key_group, data, location, columns, file, base, None)
                for key in columns[0]:
                    assert key_group_for(key, state.key, op.max_parallelism) == key_group, (state.name, key)
                    checked += 1
    return checked
