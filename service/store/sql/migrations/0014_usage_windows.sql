-- Migration 0014: usage over any window from each task's running totals, not its attempts.
--
-- task_usage gains the span of the task's ended attempts that held their gang
-- (first_start: the earliest start, last_end: the latest end). A task whose span lies
-- inside a window [from, to) used its whole totals there, so GET /api/v2/usage sums one
-- narrow index entry per such task (task_usage_user, a range of last_end per owner) and
-- reads attempts only for the tasks whose span crosses an edge of the window, and for the
-- attempts running now. Top tasks come from task_usage_span (a range, sorted) or, over all
-- history, from the ordered indexes that now carry last_end. Before this, a window that
-- did not start at the beginning read every attempt it overlapped (about 12 us each).
ALTER TABLE task_usage ADD COLUMN first_start REAL;
ALTER TABLE task_usage ADD COLUMN last_end REAL;

UPDATE task_usage SET (first_start, last_end) = (
    SELECT min(a.start_time), max(a.end_time) FROM attempts a
    WHERE a.task_id = task_usage.task_id AND a.start_time IS NOT NULL
      AND a.end_time > a.start_time);

DROP INDEX task_usage_user;
DROP INDEX task_usage_top;
DROP INDEX task_usage_all_top;
CREATE INDEX task_usage_user ON task_usage (user, last_end, first_start, gpu_seconds,
                                            failed_gpu_seconds, attempts);
CREATE INDEX task_usage_top ON task_usage (user, gpu_seconds DESC, task_id, last_end,
                                           first_start);
CREATE INDEX task_usage_all_top ON task_usage (gpu_seconds DESC, task_id, last_end,
                                               first_start);
CREATE INDEX task_usage_span ON task_usage (last_end, first_start, gpu_seconds, user);
CREATE INDEX task_usage_length ON task_usage (last_end - first_start);
