-- Key-count trend: how many keys the GROUP BY's aggregate state (table accstate) holds in each snapshot.
-- Snapshots in checkpoint order: the ids Flink gave them (taken_at may be a copy's time, see taken_at_source).
SELECT s.checkpoint_id, s.taken_at, s.taken_at_source, a.snapshot_id, COUNT(DISTINCT a.key) AS keys
FROM accstate a JOIN snapshots s ON s.snapshot_id = a.snapshot_id
GROUP BY s.checkpoint_id, s.taken_at, s.taken_at_source, a.snapshot_id
ORDER BY s.checkpoint_id, s.taken_at, a.snapshot_id
