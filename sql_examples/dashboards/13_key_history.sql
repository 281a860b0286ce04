-- One key's history: what the aggregate held for key 'key_662' in each snapshot (count, total).
SELECT s.taken_at, s.checkpoint_id, a.snapshot_id, a.value.f0 AS count, a.value.f1 AS total
FROM accstate a JOIN snapshots s ON s.snapshot_id = a.snapshot_id
WHERE a.key = 'key_662'
ORDER BY s.taken_at, a.snapshot_id
