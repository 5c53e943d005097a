-- Migration 0009: usage over all history without reading every attempt.
--
-- task_usage: each task's running totals of its ended attempts (GPU-seconds, those of
--   failed attempts, attempts that held their gang some time), added in the transaction
--   that ends an attempt, so GET /api/v2/usage over all history sums one narrow row per
--   task (task_usage_user covers the per-user sums) and finds its top tasks by index
--   (task_usage_top) instead of clipping every attempt. Windows that start later still
--   read the attempts they overlap. The attempts that ended before this migration are
--   counted here once.
CREATE TABLE task_usage (
    task_id            TEXT    PRIMARY KEY REFERENCES tasks(task_id),
    user               TEXT,
    gpu_seconds        REAL    NOT NULL CHECK (gpu_seconds >= 0),
    failed_gpu_seconds REAL    NOT NULL CHECK (failed_gpu_seconds >= 0),
    attempts           INTEGER NOT NULL CHECK (attempts >= 0)
) WITHOUT ROWID;
CREATE INDEX task_usage_user ON task_usage (user, gpu_seconds, failed_gpu_seconds, attempts);
CREATE INDEX task_usage_top ON task_usage (user, gpu_seconds DESC, task_id);
CREATE INDEX task_usage_all_top ON task_usage (gpu_seconds DESC, task_id);

INSERT INTO task_usage (task_id, user, gpu_seconds, failed_gpu_seconds, attempts)
SELECT a.task_id, t.user,
       sum((a.end_time - a.start_time) * t.nnodes * t.n_gpus_per_node),
       sum(CASE WHEN a.failure_kind IS NOT NULL
                THEN (a.end_time - a.start_time) * t.nnodes * t.n_gpus_per_node
                ELSE 0.0 END),
       count(*)
FROM attempts a
JOIN tasks t ON t.task_id = a.task_id
WHERE a.start_time IS NOT NULL AND a.end_time > a.start_time
GROUP BY a.task_id;
