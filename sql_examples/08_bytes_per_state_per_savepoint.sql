-- How many bytes does each state take, in each savepoint?
-- statecat.states lists every state of every attached savepoint (registered lazily or not) with its
-- entries and the bytes they take in the savepoint. The bytes of an operator's states add up to its
-- operator_bytes less stream headers and key-group end markers (operator_bytes repeats on each of its
-- states: do not sum it). Drop the WHERE clause to see every attached savepoint.
SELECT database, operator, state_name, entries, bytes, operator_bytes
FROM statecat.states
WHERE database IN ('sql_groupby_hashmap_2_3', 'sql_join_2_3', 'sql_window_2_3') AND bytes > 0
ORDER BY database, bytes DESC, operator, state_name
