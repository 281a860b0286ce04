-- What do the open windows hold for one key?
-- The namespace of window state is the window's end in epoch milliseconds.
SELECT key, namespace AS window_end_ms, timestamp_millis(namespace) AS window_end, value.f0 AS count, value.f1 AS total
FROM sql_window_2_3.window_aggs
WHERE key = 'w_8'
ORDER BY namespace
