-- Migration 0005: the scheduling policy (priorities, fair share, retry when the room is
-- back, preemption).
--
-- tasks.priority: higher is admitted first (-1000..1000; tasks from before get 0, the
--   default of the default priority). The runnable index now follows admission order.
-- tasks.retry_not_before: a task waiting out a short retry backoff stays in the scan in
--   its place (NULL: no backoff).
-- tasks.resource_failures: consecutive INSUFFICIENT_RESOURCES failures (the backoff grows
--   with them); tasks.preemptions: attempts preempted (not counted against max_attempts).
-- attempts is rebuilt: its failure_kind CHECK gains PREEMPTED (SQLite cannot alter a
--   CHECK), and attempts.preempted_for names the task an attempt is stopped for.

ALTER TABLE tasks ADD COLUMN priority INTEGER NOT NULL DEFAULT 0
    CHECK (priority BETWEEN -1000 AND 1000);
ALTER TABLE tasks ADD COLUMN retry_not_before REAL;
ALTER TABLE tasks ADD COLUMN resource_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;

DROP INDEX tasks_runnable;
CREATE INDEX tasks_runnable ON tasks (priority DESC, seq, state, next_run_at)
    WHERE state IN ('QUEUED', 'PENDING_RESOURCES');
CREATE INDEX tasks_user_runnable ON tasks (user, priority DESC, seq, next_run_at)
    WHERE state IN ('QUEUED', 'PENDING_RESOURCES');

CREATE TABLE attempts_new (
    task_id            TEXT    NOT NULL REFERENCES tasks (task_id),
    attempt_no         INTEGER NOT NULL CHECK (attempt_no >= 1),
    ray_submission_id  TEXT    NOT NULL UNIQUE,
    ray_status         TEXT CHECK (ray_status IN (
                           'PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'STOPPED')),
    failure_kind       TEXT CHECK (failure_kind IN (
                           'INSUFFICIENT_RESOURCES', 'CLUSTER_LOST', 'USER_ERROR',
                           'RUNTIME_ERROR', 'UNKNOWN', 'PREEMPTED')),
    message            TEXT,
    created_at         REAL    NOT NULL,
    submitted_at       REAL,
    start_time         REAL,
    end_time           REAL,
    exit_code          INTEGER,
    stop_requested     INTEGER NOT NULL DEFAULT 0,
    preempted_for      TEXT,
    PRIMARY KEY (task_id, attempt_no)
) WITHOUT ROWID;
INSERT INTO attempts_new (task_id, attempt_no, ray_submission_id, ray_status, failure_kind,
                          message, created_at, submitted_at, start_time, end_time,
                          exit_code, stop_requested)
SELECT task_id, attempt_no, ray_submission_id, ray_status, failure_kind, message, created_at,
       submitted_at, start_time, end_time, exit_code, stop_requested
FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_new RENAME TO attempts;
CREATE INDEX attempts_end_time ON attempts (end_time);
CREATE INDEX attempts_created_at ON attempts (created_at);
