-- What did key `key_662` hold in each savepoint of the GROUP BY job, oldest first?
-- statecat.key_view is the key view of every attached savepoint: every keyed state (values and timers)
-- that holds the key, each read through the key's one key-group. It needs WHERE key = '...'; ordered
-- by checkpoint_id (the id Flink gave each snapshot of the job; taken_at may be a copy's time, and
-- breaks ties only) it is the key's history. Values are JSON text: get_json_object picks their fields.
-- Drop the database filter to follow the key through every attached savepoint.
SELECT database, checkpoint_id, state,
       CAST(get_json_object(value, '$.f0') AS BIGINT) AS count,
       CAST(get_json_object(value, '$.f1') AS BIGINT) AS total
FROM statecat.key_view
WHERE key = 'key_662'
  AND database IN ('sql_groupby_hashmap_1_20', 'sql_groupby_hashmap_2_3', 'sql_groupby_rocksdb_2_3')
ORDER BY checkpoint_id, taken_at, database, state
