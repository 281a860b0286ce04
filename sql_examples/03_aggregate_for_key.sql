-- What is the aggregate (GROUP BY word: count and sum) for key `key_662`?
-- WHERE key = ... reads only the key-group that can hold the key.
SELECT key, value.f0 AS count, value.f1 AS total
FROM sql_groupby_hashmap_2_3.accstate
WHERE key = 'key_662'
