"""Column types of FLIP-27 source state: the readers' splits and the split enumerator's checkpoint.

A source operator keeps its splits in the operator list state ``SourceReaderState`` (each element
a ``byte[]``: the split serializer's version, then its bytes) and its split enumerator's
checkpoint in the operator coordinator state. Neither names its connector, so
``statecat.readers.codecs.source_splits`` recognises the formats it knows by their structure and fills
the connector's struct; anything else keeps only ``raw`` and ``reason``. The column types are the
same whatever the connector (one stable schema), declared here so that a table's schema is known
before its bytes are read.

Split (``SourceReaderState.value``)::

    connector       file | kafka | number_sequence; null when not recognised (see reason)
    split_version   the split serializer's version written before the split
    split_id        the split's id (Kafka: topic-partition, as KafkaPartitionSplit names it)
    file            path, offset, length, modification_time, file_size, hostnames,
                    reader_offset, records_to_skip (the reader's CheckpointedPosition; null when
                    none; reader_offset -1 = NO_OFFSET: resume at the split's offset, then skip
                    records_to_skip records)
    kafka           topic, partition, starting_offset (next offset to read), stopping_offset
                    (null: unbounded), starting_marker / stopping_marker (earliest, latest,
                    committed, migrated: the meaning of a negative stored offset)
    number_sequence from_value (next number to emit), to_value (last, inclusive); also DataGen's
                    DataGeneratorSource, which reuses NumberSequenceSource's splits
    raw             the element's bytes as stored (version + split)
    reason          why the split is not decoded (null when decoded)

Enumerator (the coordinator table's ``value``)::

    coordinator_version, enumerator_version, connector
    file            split_version, pending_splits (as above, with split_id), processed_paths
    kafka           split_version (null before enumerator version 3), initial_discovery_finished,
                    partitions (topic, partition, offsets as above, status ASSIGNED | UNASSIGNED)
    number_sequence remaining_splits (split_id, from_value, to_value)
    raw, reason     as above (raw: the whole coordinator state)
"""

from __future__ import annotations

from statecat.statemeta.types import TypeDescriptor

SOURCE_READER_STATE = "SourceReaderState"
# attrs that select statecat.readers.codecs.source_splits' decoders (see readers.decoders.build_decoder)
SPLIT_CODEC = "source_split"
ENUMERATOR_CODEC = "source_enumerator"


def _t(kind: str) -> TypeDescriptor:
    return TypeDescriptor.of(kind)


def _row(*fields: tuple[str, TypeDescriptor]) -> TypeDescriptor:
    return TypeDescriptor.of("row", list(fields))


def _list(element: TypeDescriptor) -> TypeDescriptor:
    return TypeDescriptor.of("list", [("element", element)])


FILE_SPLIT = _row(
    ("split_id", _t("string")),
    ("path", _t("string")),
    ("offset", _t("long")),
    ("length", _t("long")),
    ("modification_time", _t("long")),
    ("file_size", _t("long")),
    ("hostnames", _list(_t("string"))),
    ("reader_offset", _t("long")),
    ("records_to_skip", _t("long")),
)
KAFKA_FIELDS = (
    ("topic", _t("string")),
    ("partition", _t("int")),
    ("starting_offset", _t("long")),
    ("stopping_offset", _t("long")),
    ("starting_marker", _t("string")),
    ("stopping_marker", _t("string")),
)
KAFKA_SPLIT = _row(*KAFKA_FIELDS)
NUMBER_SEQUENCE_SPLIT = _row(("split_id", _t("string")), ("from_value", _t("long")), ("to_value", _t("long")))

SPLIT_TYPE = TypeDescriptor.of(
    "row",
    [
        ("connector", _t("string")),
        ("split_version", _t("int")),
        ("split_id", _t("string")),
        ("file", FILE_SPLIT),
        ("kafka", KAFKA_SPLIT),
        ("number_sequence", _row(*NUMBER_SEQUENCE_SPLIT.fields[1:])),
        ("raw", _t("bytes")),
        ("reason", _t("string")),
    ],
    codec=SPLIT_CODEC,
)

ENUMERATOR_TYPE = TypeDescriptor.of(
    "row",
    [
        ("coordinator_version", _t("int")),
        ("enumerator_version", _t("int")),
        ("connector", _t("string")),
        (
            "file",
            _row(
                ("split_version", _t("int")),
                ("pending_splits", _list(FILE_SPLIT)),
                ("processed_paths", _list(_t("string"))),
            ),
        ),
        (
            "kafka",
            _row(
                ("split_version", _t("int")),
                ("initial_discovery_finished", _t("boolean")),
                ("partitions", _list(_row(*KAFKA_FIELDS, ("status", _t("string"))))),
            ),
        ),
        ("number_sequence", _row(("remaining_splits", _list(NUMBER_SEQUENCE_SPLIT)))),
        ("raw", _t("bytes")),
        ("reason", _t("string")),
    ],
    codec=ENUMERATOR_CODEC,
)
