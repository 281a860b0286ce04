-- What does the join buffer for one key, on each side?
-- Left records map each row to how often it arrived; right records map the right side's unique key
-- (id) to the row.
SELECT 'left' AS side, key, rec.f1 AS id, CAST(rec.f2 AS STRING) AS payload, cnt AS occurrences
FROM (SELECT key, explode(value) AS (rec, cnt) FROM sql_join_2_3.left_records WHERE key = 'j_0') AS l
UNION ALL
SELECT 'right' AS side, key, rec.f1 AS id, rec.f2 AS payload, 1 AS occurrences
FROM (SELECT key, explode(value) AS (id, rec) FROM sql_join_2_3.right_records WHERE key = 'j_0') AS r
ORDER BY side, id
