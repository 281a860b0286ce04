-- Where did the source stop reading, and what is left to read?
-- sourcereaderstate holds one row per split a reader had: value.file (path, offset, length and
-- the reader's position: records_to_skip lines after value.file.offset, or reader_offset when the
-- format checkpoints bytes), value.kafka (topic, partition, starting_offset = next offset to
-- read), value.number_sequence (from_value = next number); value.raw keeps the bytes and
-- value.reason says why a split of an unknown connector is not decoded. The coordinator table is
-- the split enumerator: splits not handed out yet and, for a FileSource, every path it has seen.
-- A source that read all its input holds no split: the LEFT JOIN keeps a row with NULL split columns.
SELECT c.value.connector AS connector, s.subtask, s.value.split_id AS split_id, s.value.file.path AS path,
       s.value.file.records_to_skip AS lines_read, s.value.kafka.topic AS topic,
       s.value.kafka.starting_offset AS kafka_offset, size(c.value.file.pending_splits) AS pending_splits,
       array_join(array_sort(transform(c.value.file.processed_paths, p -> regexp_extract(p, '[^/]+$', 0))), ',')
           AS files_seen
FROM sql_groupby_hashmap_2_3.coordinator AS c
LEFT JOIN sql_groupby_hashmap_2_3.sourcereaderstate AS s ON TRUE
ORDER BY s.subtask
