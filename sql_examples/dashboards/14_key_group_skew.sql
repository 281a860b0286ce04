-- Key-group skew per keyed state and snapshot: the busiest key-group against the average one
-- (1.0 is perfectly even; Flink spreads key-groups over subtasks, so a hot key-group is a hot subtask).
-- Snapshots in checkpoint order: the ids Flink gave them (taken_at may be a copy's time, see taken_at_source).
SELECT s.checkpoint_id, s.taken_at, s.taken_at_source, st.snapshot_id, st.table_name,
       COUNT(*) AS key_groups,
       SUM(st.entries) AS entries,
       MAX(st.entries) AS max_entries,
       ROUND(MAX(st.entries) / NULLIF(AVG(st.entries), 0), 2) AS skew,
       MAX(st.bytes) AS max_key_group_bytes
FROM state_stats st JOIN snapshots s ON s.snapshot_id = st.snapshot_id
WHERE st.key_group IS NOT NULL
GROUP BY s.checkpoint_id, s.taken_at, s.taken_at_source, st.snapshot_id, st.table_name
HAVING SUM(st.entries) > 0
ORDER BY s.checkpoint_id, s.taken_at, st.snapshot_id, st.table_name
