-- Migration 0006: time limits.
--
-- tasks.max_runtime_s: each attempt's time limit in seconds from its driver's start (the
--   JobSpec's max_runtime_s or the configured default; NULL: none). Past it the attempt
--   is stopped and ends TIME_LIMIT; admission also reads it as a promise of when a
--   running task ends (backfill onto nodes kept for a waiting gang).
-- attempts is rebuilt: its failure_kind CHECK gains TIME_LIMIT (SQLite cannot alter a
--   CHECK).

ALTER TABLE tasks ADD COLUMN max_runtime_s REAL CHECK (max_runtime_s > 0);

CREATE TABLE attempts_new (
    task_id            TEXT    NOT NULL REFERENCES tasks (task_id),
    attempt_no         INTEGER NOT NULL CHECK (attempt_no >= 1),
    ray_submission_id  TEXT    NOT NULL UNIQUE,
    ray_status         TEXT CHECK (ray_status IN (
                           'PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'STOPPED')),
    failure_kind       TEXT CHECK (failure_kind IN (
                           'INSUFFICIENT_RESOURCES', 'CLUSTER_LOST', 'USER_ERROR',
                           'RUNTIME_ERROR', 'UNKNOWN', 'PREEMPTED', 'TIME_LIMIT')),
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
                          exit_code, stop_requested, preempted_for)
SELECT task_id, attempt_no, ray_submission_id, ray_status, failure_kind, message, created_at,
       submitted_at, start_time, end_time, exit_code, stop_requested, preempted_for
FROM attempts;
DROP TABLE attempts;
ALTER TABLE attempts_new RENAME TO attempts;
CREATE INDEX attempts_end_time ON attempts (end_time);
CREATE INDEX attempts_created_at ON attempts (created_at);
