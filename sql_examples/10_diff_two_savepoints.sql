-- How many aggregates were added, removed and changed between two savepoints of the GROUP BY job?
-- statecat.diff compares savepoint a (the old database) with b (the new one), both required, state by
-- state and key-group by key-group; a large state is split into key-group ranges over Spark tasks.
-- Each row is one key: change added | removed | changed with old_value and new_value (JSON text); a
-- state it cannot compare (in one savepoint only, another max parallelism, a changed type) is one row
-- with change = 'reason'. Here Flink 1.20 on the heap backend, then Flink 2.3 on RocksDB.
SELECT state, change, count(*) AS entries
FROM statecat.diff
WHERE a = 'sql_groupby_hashmap_1_20' AND b = 'sql_groupby_rocksdb_2_3' AND state = 'accState'
GROUP BY state, change
ORDER BY state, change
