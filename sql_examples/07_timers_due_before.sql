-- Which event-time timers of the window operator are due before a time?
-- The value of a timer table is the timer's timestamp in epoch milliseconds.
SELECT key, namespace AS window_end_ms, value AS due_ms, timestamp_millis(value) AS due
FROM sql_window_2_3.timer_state_event_window_timers
WHERE value < 1704067620000
ORDER BY value, key
