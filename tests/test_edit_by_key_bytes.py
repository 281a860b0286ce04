"""A one-key edit finds its rows by their keys' bytes (catalog/spark/edits.py ``_found_by_bytes``):
only the edited rows' entries are decoded, whatever the key-group holds, and the savepoint written is
byte for byte the one decoding the whole key-group gives. No Spark: the changes are given as rows,
as Spark's comparison hands them over."""

from __future__ import annotations

import copy

import pytest

from statecat.catalog.spark import edits
from statecat.catalog.spark.edit_plan import KEYED_KINDS
from statecat.readers import SavepointReader
from statecat.statemeta.errors import StatecatError
from statecat.statemeta.model import load_state_meta
from statecat.writers.entry_codec import EntryCodec
from statecat.writers.savepoint_writer import write_savepoint as write_canonical
from tests.fixtures.edits import RowChanges
from tests.fixtures.expected import savepoint_dir
from tests.round_trip import handle_streams

# Value, list, map and reducing state, timers, windows as namespaces, SQL row keys.
CASES = ["datastream_thread_2.3", "datastream_windows_thread_2.3", "sql_groupby_hashmap_2.3", "sql_join_2.3"]


def _edits(meta) -> list[tuple[str, str, dict, dict]]:
    """Per writable keyed state: a row of its fullest key-group, and the same row with its value
    replaced by another row's (a timer: another timestamp), the change an UPDATE of one key makes."""
    reader = SavepointReader(meta)
    out = []
    for operator in meta.operators:
        for state in operator.states:
            if state.kind not in KEYED_KINDS:
                continue
            try:
                EntryCodec(meta, operator, state).writable()
            except StatecatError:
                continue
            codec = EntryCodec(meta, operator, state)
            by_group: dict[int, list[dict]] = {}
            for row in reader.table(state.name, operator.id).to_pylist():
                by_group.setdefault(codec.key_group(row["key"]), []).append(row)
            rows = max(by_group.values(), key=len, default=[])  # the fullest key-group: the row is one of many
            if len(rows) < 2:
                continue
            old, other = rows[0], rows[1]
            new = {**copy.deepcopy(old), "value": copy.deepcopy(other["value"])}
            if new == old:
                continue
            out.append((operator.id, state.name, old, new))
    return out


@pytest.mark.parametrize("case", CASES)
def test_a_one_key_edit_decodes_only_its_rows_and_writes_what_decoding_everything_writes(tmp_path, case, monkeypatch):
    src = savepoint_dir(case)
    meta = load_state_meta(str(src))
    changes = [RowChanges.of(meta, op, state, [old], [new]) for op, state, old, new in _edits(meta)]
    assert changes, case
    decoded = []
    rows = EntryCodec.rows

    def counted(self, key_group, entries):
        decoded.append(len(entries))
        return rows(self, key_group, entries)

    monkeypatch.setattr(EntryCodec, "rows", counted)
    write_canonical(meta, str(tmp_path / "by_bytes"), editor=edits.ChangesEditor(meta, changes))
    by_bytes = list(decoded)
    decoded.clear()
    monkeypatch.setattr(edits, "FEW_ROWS", -1)  # every key-group decoded whole
    write_canonical(meta, str(tmp_path / "decoded"), editor=edits.ChangesEditor(meta, changes))

    # Every stream and handle the same (the files' names are UUIDs of their own).
    assert handle_streams(tmp_path / "by_bytes") == handle_streams(tmp_path / "decoded")
    # One row decoded per edit (a map row: its entries), against whole key-groups the other way.
    assert len(by_bytes) == len(changes) and sum(by_bytes) < sum(decoded), (by_bytes, decoded)
    assert all(n < whole for n, whole in zip(by_bytes, decoded)), (by_bytes, decoded)
    edited = SavepointReader(str(tmp_path / "by_bytes"))
    for op, state, _, new in _edits(meta):
        kind = EntryCodec(meta, meta.operator(op), meta.operator(op).state(state)).kind
        held = [
            r["value"]
            for r in edited.table(state, op).to_pylist()
            if (r["key"], r["namespace"]) == (new["key"], new["namespace"])
        ]
        assert [_unordered(v, kind) for v in held].count(_unordered(new["value"], kind)) == 1, (state, new, held)


def _unordered(value, kind: str):
    """A map's entries in the order its serialized keys sort in (which a rebuilt entry list has)."""
    return sorted(map(repr, value)) if kind == "map" else value
