-- One key's history: what the aggregate held for key 'key_662' in each snapshot (count, total).
-- Snapshots in checkpoint order: the ids Flink gave them (taken_at may be a copy's time, see taken_at_source).
SELECT s.checkpoint_id, s.taken_at, s.taken_at_source, a.snapshot_id, a.value.f0 AS count, a.value.f1 AS total
FROM accstate a JOIN snapshots s ON s.snapshot_id = a.snapshot_id
WHERE a.key = 'key_662'
ORDER BY s.checkpoint_id, s.taken_at, a.snapshot_id
