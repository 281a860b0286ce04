-- Which keys hold the largest state?
-- The operator table spans all states of the join operator (values as JSON text), so one query
-- measures every state a key has; entries counts the buffered rows. Keys there are JSON text too.
SELECT get_json_object(key, '$') AS key, count(DISTINCT state_name) AS states, sum(json_array_length(value)) AS entries,
       sum(length(value)) AS json_bytes
FROM sql_join_2_3.join_op
GROUP BY key
ORDER BY entries DESC, json_bytes DESC, key
LIMIT 10
