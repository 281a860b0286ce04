-- Which states does this job keep, and of what types?
-- One row per state of the savepoint (statecat attach names the database after the savepoint).
SELECT operator_name, state_name, kind, state_type, key_type, namespace_type, value_type, decode_status, table_name
FROM sql_groupby_hashmap_2_3.state_meta
ORDER BY operator_name, state_name
