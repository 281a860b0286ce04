-- What offsets / splits does the source hold?
-- The source operator's SourceReaderState holds one element per assigned split (Flink's serialized
-- split, e.g. a Kafka partition with its offset). A finished bounded source holds none, which the
-- LEFT JOIN keeps visible as a row with NULL split columns.
SELECT m.operator_name, m.state_name, m.stream_bytes, s.subtask, length(s.value) AS split_bytes, hex(s.value) AS split_hex
FROM sql_groupby_hashmap_2_3.state_meta AS m
LEFT JOIN sql_groupby_hashmap_2_3.sourcereaderstate AS s ON TRUE
WHERE m.state_name = 'SourceReaderState'
ORDER BY s.subtask
