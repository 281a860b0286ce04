"""The serializers Flink's own restore-test savepoints held as bytes, decoded and encoded back (issue 41):
SortedMapSerializer (rank with retraction), CEP's NFA state and shared buffer (NFAStateSerializer,
EventId, NodeId, Lockable, SharedBufferNode/Edge, DeweyNumber) and JavaSerializer values.

Ground truth is each test program's input before the savepoint (RankTestPrograms,
MatchRecognizeTestPrograms, the same in every release read): which sort keys the rank counts, which
events CEP's shared buffer holds and at which pattern stage a partial match waits. Every entry of
every state using these serializers, cut from the key-groups by framing alone, encodes back to the
bytes Flink wrote. No savepoint of the corpus has JavaSerializer state (legacy ``_default_``
operator state, which SQL jobs do not write); its decoder is held to streams Flink wrote with the
same ``InstantiationUtil.serializeObject``: the rank's comparator inside the SortedMap snapshot and
the CheckpointProperties trailer of ``_metadata``. Hand-made bytes test only the error paths.
"""

from __future__ import annotations

import json
import shutil
import struct
from functools import cache
from pathlib import Path

import pytest

from statecat.readers import SavepointReader
from statecat.readers.codecs.decoders import DecodeError, build_decoder
from statecat.readers.codecs.encoders import build_encoder
from statecat.readers.codecs.java_serialized import REPEATED_TEXT_BUDGET, decode_java_serialized, encode_java_serialized
from statecat.readers.codecs.values import EncodeError
from statecat.statemeta.errors import FormatError
from statecat.statemeta.files.snapshots import NESTED_DELEGATE_MAGIC
from statecat.statemeta.java.javaser import BASE_WIRE_HANDLE, STREAM_MAGIC, STREAM_VERSION
from statecat.statemeta.types import TypeDescriptor
from statecat.writers.entry_codec import EntryCodec
from tests.fixtures.restore_tests import RESTORE_TEST_VERSIONS, program, restore_tests_root
from tests.test_kryo_encoder import _key_groups  # (key-group, entries) by framing alone

pytestmark = pytest.mark.restore_tests

T = TypeDescriptor.of
RANK = ("stream-exec-rank_1", "rank-test-retract-strategy")
MATCH_NODE = "stream-exec-match_1"
CEP_STATES = ("nfaStateName", "sharedBuffer-events", "sharedBuffer-entries-with-lockable-edges")
JAVA_STREAM_HEADER = struct.pack(">HH", STREAM_MAGIC, STREAM_VERSION)
SORTED_MAP_SNAPSHOT = b"org.apache.flink.table.runtime.typeutils.SortedMapSerializerSnapshot"
COMPARATOR = "org.apache.flink.table.runtime.operators.rank.ComparableRecordComparator"

# RankTestPrograms.RANK_TEST_RETRACT_STRATEGY: (a, b, c) before the savepoint, c the primary key,
# ROW_NUMBER() OVER (PARTITION BY b ORDER BY c): the sorted map counts each partition's sort keys.
RANK_INPUT = [(2, "a", 6), (4, "b", 8), (6, "c", 10), (1, "a", 5), (3, "b", 7), (5, "c", 9)]
# MatchRecognizeTestPrograms.SIMPLE_DATA (id, name), PATTERN (`A"` l C) over names 'a', 'b', 'c'
# in strict contiguity, no PARTITION BY (one key, the empty row).
SIMPLE_DATA = [(1, "a"), (2, "z"), (3, "b"), (4, "c"), (5, "d"), (6, "a"), (7, "b"), (8, "c"), (9, "a"), (10, "b")]
SIMPLE_PATTERN = (('A"', "a"), ("l", "b"), ("C", "c"))
# COMPLEX_DATA (symbol, tstamp, price, tax), PARTITION BY symbol, PATTERN (DOWN{2,} UP), AFTER MATCH
# SKIP PAST LAST ROW: ACME's 19, 17, 13, 20 matched (the sink got it); BETA's 18, 16 wait for an UP.
COMPLEX_DATA = [("ACME", 1, 19, 1), ("BETA", 2, 18, 1), ("ACME", 3, 17, 2), ("ACME", 4, 13, 3), ("BETA", 5, 16, 2)]
COMPLEX_DATA += [("ACME", 6, 20, 4)]


@cache
def _reader(version: str, node: str, name: str) -> SavepointReader:
    return SavepointReader(str(program(version, node, name)))


@cache
def _keyed(version: str, node: str, name: str, state: str) -> dict:
    """{key: value} of one state, read once for the module."""
    return {row["key"]: row["value"] for row in _reader(version, node, name).table(state).to_pylist()}


def _match_programs(version: str) -> list[str]:
    return sorted(path.name for path in (restore_tests_root(version) / MATCH_NODE).iterdir())


# ----------------------------------------------------------------------------- SortedMapSerializer


@pytest.mark.parametrize("version", RESTORE_TEST_VERSIONS)
def test_rank_with_retraction_counts_each_partitions_sort_keys_in_order(version):
    _, state = _reader(version, *RANK).find("sorted-map")
    assert state.value.kind == "map" and state.value.attr("comparator") == COMPARATOR
    assert state.value.describe() == "SORTED_MAP<ROW<INTEGER>, LONG>"
    assert state.raw_reasons == []
    expected = {b: [({"f0": c}, 1) for c in sorted(c for _, bb, c in RANK_INPUT if bb == b)] for _, b, _ in RANK_INPUT}
    assert _keyed(version, *RANK, "sorted-map") == expected


# ----------------------------------------------------------------------------- CEP


def _pending_prefix(data: list[tuple[int, str]], pattern: tuple[tuple[str, str], ...]) -> list[tuple[int, str, str]]:
    """The events a strictly contiguous pattern holds after ``data``: the longest run at the end that
    is a proper prefix of the pattern, as (id, name, page)."""
    for length in range(len(pattern) - 1, 0, -1):
        tail = data[-length:]
        if [name for _, name in tail] == [name for _, name in pattern[:length]]:
            return [(ident, name, page) for (ident, name), (page, _) in zip(tail, pattern)]
    return []


@pytest.mark.parametrize("version", RESTORE_TEST_VERSIONS)
def test_a_simple_match_holds_the_events_of_its_unfinished_match_and_waits_at_the_next_stage(version):
    args = (version, MATCH_NODE, "match-simple")
    pending = _pending_prefix(SIMPLE_DATA, SIMPLE_PATTERN)
    assert [ident for ident, _, _ in pending] == [9, 10]
    (events,) = _keyed(*args, "sharedBuffer-events").values()
    event_of = {(row["value"]["f0"], row["value"]["f1"]): event_id for event_id, row in events}
    assert sorted(event_of) == [(ident, name) for ident, name, _ in pending]
    assert {row["ref_count"] for _, row in events} == {1}  # each event is in one shared-buffer node

    (nodes,) = _keyed(*args, "sharedBuffer-entries-with-lockable-edges").values()
    node_ids = {(node["event_id"]["id"], node["event_id"]["timestamp"], node["page_name"]) for node, _ in nodes}
    assert node_ids == {(event_of[(i, n)]["id"], event_of[(i, n)]["timestamp"], page) for i, n, page in pending}
    by_page = {node["page_name"]: lockable["value"]["edges"] for node, lockable in nodes}
    # The second event's node points back to the first's.
    assert [edge["value"]["target"]["page_name"] for edge in by_page["l"]] == ['A"']
    assert [edge["value"]["target"] for edge in by_page['A"']] == [None]

    (nfa,) = _keyed(*args, "nfaStateName").values()
    assert nfa["completed_matches"] == []
    waiting = {match["state_name"]: match for match in nfa["partial_matches"]}
    assert set(waiting) == {"C", 'A"'}  # C for the unfinished match, A" for one starting anew
    last_id, last_name, last_page = pending[-1]
    assert waiting["C"]["previous_entry"] == {"event_id": event_of[(last_id, last_name)], "page_name": last_page}
    assert waiting["C"]["start_event"] == event_of[pending[0][:2]]
    assert waiting['A"']["previous_entry"] is None and waiting['A"']["start_event"] is None


@pytest.mark.parametrize("version", RESTORE_TEST_VERSIONS)
def test_a_partitioned_match_holds_only_the_unmatched_partitions_events(version):
    args = (version, MATCH_NODE, "match-complex")
    events = _keyed(*args, "sharedBuffer-events")
    assert set(events) == {"BETA"}  # ACME's match completed and was skipped past
    beta = [row for symbol, *row in COMPLEX_DATA if symbol == "BETA"]
    held = {(row["value"]["f1"], row["value"]["f2"]): event_id for event_id, row in events["BETA"]}
    assert sorted(held) == [(tstamp, price) for tstamp, price, _ in beta]
    last = held[(beta[-1][0], beta[-1][1])]

    nfa = _keyed(*args, "nfaStateName")
    assert [match["previous_entry"] for match in nfa["ACME"]["partial_matches"]] == [None]  # only a new start
    beta_matches = nfa["BETA"]["partial_matches"]
    assert {match["state_name"].split(":")[0] for match in beta_matches} == {"DOWN"}  # no UP yet
    continuing = [match for match in beta_matches if match["previous_entry"] is not None]
    assert continuing and all(m["previous_entry"] == {"event_id": last, "page_name": "DOWN"} for m in continuing)
    assert {m["start_event"]["timestamp"] for m in continuing} <= {e["timestamp"] for e in held.values()}


@pytest.mark.parametrize("version", RESTORE_TEST_VERSIONS)
def test_shared_buffer_reference_counts_are_what_the_nfa_and_the_edges_hold(version):
    """Flink's SharedBuffer keeps a node while partial matches or later nodes point to it and an
    event while nodes hold it: each count equals the pointers the other states hold."""
    for name in _match_programs(version):
        args = (version, MATCH_NODE, name)
        nfas, node_maps = _keyed(*args, "nfaStateName"), _keyed(*args, "sharedBuffer-entries-with-lockable-edges")
        for key, nodes in node_maps.items():
            pointers: list[str] = [
                json.dumps(match["previous_entry"], sort_keys=True)
                for match in nfas[key]["partial_matches"]
                if match["previous_entry"] is not None
            ]
            pointers += [
                json.dumps(edge["value"]["target"], sort_keys=True)
                for _, lockable in nodes
                for edge in lockable["value"]["edges"]
                if edge["value"]["target"] is not None
            ]
            for node, lockable in nodes:
                assert lockable["ref_count"] == pointers.count(json.dumps(node, sort_keys=True)), (name, key, node)
            events = {json.dumps(e, sort_keys=True): row for e, row in _keyed(*args, "sharedBuffer-events")[key]}
            for event, row in events.items():
                held_by = [node for node, _ in nodes if json.dumps(node["event_id"], sort_keys=True) == event]
                assert row["ref_count"] == len(held_by), (name, key, event)


@pytest.mark.parametrize("version", RESTORE_TEST_VERSIONS)
def test_every_entry_of_the_newly_decoded_states_encodes_back_to_flinks_bytes(version):
    checked = dict.fromkeys(("sorted-map", *CEP_STATES), 0)
    targets = [(RANK, "sorted-map")] + [
        ((MATCH_NODE, name), s) for name in _match_programs(version) for s in CEP_STATES
    ]
    for (node, name), state_name in targets:
        reader = _reader(version, node, name)
        operator, state = reader.meta.find_state(state_name)
        assert state.raw_reasons == [], (name, state_name)
        codec = EntryCodec(reader.meta, operator, state)
        codec.writable()
        for key_group, entries in _key_groups(reader.meta, state):
            for row in codec.rows(key_group, entries):
                assert sorted(codec.entries(key_group, row)) == sorted(row.entries), (name, state_name, row.key)
                checked[state_name] += len(row.entries)
    assert all(checked.values()), checked


def test_the_nfa_snapshot_records_the_previous_events_timestamp():
    """NFAStateSerializerSnapshot's outer version 2 (Flink 1.16 on) says computation states carry it."""
    for version in RESTORE_TEST_VERSIONS:
        _, state = _reader(version, MATCH_NODE, "match-simple").find("nfaStateName")
        match = state.value.child("partial_matches").child("element")
        assert [n for n, _ in match.fields] == [
            "state_name",
            "previous_entry",
            "version",
            "start_timestamp",
            "previous_timestamp",
            "start_event",
        ]


def test_damaged_cep_bytes_are_errors_naming_what_was_expected():
    node_id = build_decoder(
        T(
            "cep_node_id",
            [("event_id", T("cep_event_id", [("id", T("int")), ("timestamp", T("long"))])), ("page_name", T("string"))],
        )
    )
    with pytest.raises(DecodeError, match="presence byte 0 or 1, got 7"):
        node_id(b"\x07" + bytes(20), 0)
    dewey = build_decoder(T("dewey_number"))
    with pytest.raises(DecodeError, match="fits the 4 bytes left, got 1000"):
        dewey(struct.pack(">ii", 1000, 1), 0)
    encode = build_encoder(T("dewey_number"))
    for bad in ("1..2", "1.x", "9999999999", 3):
        with pytest.raises(EncodeError, match="DeweyNumber"):
            encode(bad, bytearray())


def test_a_damaged_nfa_state_in_a_savepoint_names_the_file_and_offset(tmp_path):
    source = program("2.3.0", MATCH_NODE, "match-simple")
    reader = _reader("2.3.0", MATCH_NODE, "match-simple")
    _, state = reader.meta.find_state("nfaStateName")
    ((_, entries),) = _key_groups(reader.meta, state)
    ((_, value),) = entries
    copy = tmp_path / "savepoint"
    shutil.copytree(source, copy)
    metadata = (copy / "_metadata").read_bytes()
    at = metadata.index(value)
    # The partial-match count: far more computation states than the value's bytes could hold.
    (copy / "_metadata").write_bytes(metadata[:at] + struct.pack(">i", 1 << 30) + metadata[at + 4 :])
    with pytest.raises(FormatError, match="element count that fits") as caught:
        SavepointReader(str(copy)).table("nfaStateName")
    assert Path(caught.value.file or "").name == "_metadata" and caught.value.offset is not None
    assert caught.value.state == "nfaStateName"


# ----------------------------------------------------------------------------- JavaSerializer


def _comparator_stream(version: str) -> tuple[bytes, int]:
    """The rank's _metadata and where the comparator's stream starts in it: after the snapshot's class
    name and version (SortedMapSerializerSnapshot.writeSnapshot: serializeObject, then the nested snapshots)."""
    data = (program(version, *RANK) / "_metadata").read_bytes()
    start = data.index(SORTED_MAP_SNAPSHOT) + len(SORTED_MAP_SNAPSHOT) + 4
    assert data[start : start + 4] == JAVA_STREAM_HEADER
    return data, start


@pytest.mark.parametrize("version", RESTORE_TEST_VERSIONS)
def test_a_java_serialized_comparator_reads_and_writes_back_its_bytes(version):
    data, start = _comparator_stream(version)
    value, end = decode_java_serialized(data, start)
    # The stream ends where Flink's nested serializer snapshots begin.
    assert struct.unpack_from(">i", data, end)[0] == NESTED_DELEGATE_MAGIC
    assert value["class"] == COMPARATOR and value["raw"] == data[start:end]
    assert "org.apache.flink.table.runtime.generated.GeneratedRecordComparator" in value["value"]
    json.loads(value["value"])
    out = bytearray()
    build_encoder(T("java_serialized", [("class", T("string")), ("value", T("string")), ("raw", T("bytes"))]))(
        value, out
    )
    assert bytes(out) == data[start:end]


@pytest.mark.parametrize("version", RESTORE_TEST_VERSIONS)
def test_the_checkpoint_properties_trailer_reads_as_java_serialized_and_writes_back(version):
    data = (program(version, MATCH_NODE, "match-simple") / "_metadata").read_bytes()
    start = data.rindex(JAVA_STREAM_HEADER)
    value, end = decode_java_serialized(data, start)
    assert end == len(data) and value["class"] == "org.apache.flink.runtime.checkpoint.CheckpointProperties"
    assert "checkpointType" in json.loads(value["value"])
    out = bytearray()
    encode_java_serialized(value, out)
    assert bytes(out) == data[start:]


def test_an_edited_reading_or_a_damaged_stream_is_refused():
    data, start = _comparator_stream("2.3.0")
    value, end = decode_java_serialized(data, start)
    with pytest.raises(EncodeError, match="a reading of raw"):
        encode_java_serialized({**value, "value": "{}"}, bytearray())
    with pytest.raises(EncodeError, match="one Java serialization stream"):
        encode_java_serialized({**value, "raw": value["raw"] + b"\x70"}, bytearray())
    with pytest.raises(EncodeError, match="raw holding a Java serialization stream"):
        encode_java_serialized({**value, "raw": value["raw"][:-3]}, bytearray())
    with pytest.raises(DecodeError, match="not a Java serialization stream at byte 0"):
        decode_java_serialized(b"\x00" * 8, 0)
    with pytest.raises(DecodeError, match="truncated"):
        decode_java_serialized(data[start : start + 40], 0)


def test_a_string_named_by_many_back_references_renders_within_a_bound():
    """Hostile bytes: one long string referenced from every element of a large array (five bytes a
    reference). Repeats are written out within a budget, then shown as references."""
    text, refs = "x" * 1000, 20_000
    name = b"[Ljava.lang.String;"
    # TC_ARRAY, its class descriptor (handle 0; serializable, no fields, no superclass), handle 1 the array
    stream = JAVA_STREAM_HEADER + b"\x75\x72" + struct.pack(">H", len(name)) + name + bytes(8) + b"\x02\x00\x00\x78\x70"
    stream += struct.pack(">i", refs) + b"\x74" + struct.pack(">H", len(text)) + text.encode()  # handle 2
    stream += (b"\x71" + struct.pack(">i", BASE_WIRE_HANDLE + 2)) * (refs - 1)
    value, end = decode_java_serialized(stream, 0)
    assert end == len(stream)
    shown = json.loads(value["value"])
    assert len(shown) == refs and shown[0] == text and shown[-1] == {"@ref": "java.lang.String"}
    # The repeats' budget, and a reference's few characters for each of its five bytes.
    assert len(value["value"]) < REPEATED_TEXT_BUDGET + 12 * len(stream)
