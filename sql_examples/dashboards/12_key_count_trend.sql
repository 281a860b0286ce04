-- Key-count trend: how many keys the GROUP BY's aggregate state (table accstate) holds in each snapshot.
SELECT s.taken_at, s.checkpoint_id, a.snapshot_id, COUNT(DISTINCT a.key) AS keys
FROM accstate a JOIN snapshots s ON s.snapshot_id = a.snapshot_id
GROUP BY s.taken_at, s.checkpoint_id, a.snapshot_id
ORDER BY s.taken_at, a.snapshot_id
