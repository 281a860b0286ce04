-- State size over time, per operator: bytes on disk and entries, one row per snapshot and operator.
-- Keyed states of an operator share their key-groups' bytes (state_stats repeats a key-group's
-- bytes on each of its states), so each key-group's bytes count once; operator states have their own.
-- Snapshots in checkpoint order: the ids Flink gave them (taken_at may be a copy's time, see taken_at_source).
WITH stats AS (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY snapshot_id, operator_id, subtask, key_group
                               ORDER BY state_name) AS nth_state_of_group
  FROM state_stats
)
SELECT s.checkpoint_id, s.taken_at, s.taken_at_source, st.snapshot_id, st.operator,
       SUM(st.entries) AS entries,
       SUM(CASE WHEN st.key_group IS NULL OR st.nth_state_of_group = 1 THEN st.bytes ELSE 0 END) AS bytes
FROM stats st JOIN snapshots s ON s.snapshot_id = st.snapshot_id
GROUP BY s.checkpoint_id, s.taken_at, s.taken_at_source, st.snapshot_id, st.operator
ORDER BY s.checkpoint_id, s.taken_at, st.snapshot_id, st.operator
