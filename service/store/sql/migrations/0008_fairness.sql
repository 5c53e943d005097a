-- Migration 0008: what one user may cost everyone.
--
-- task_changes: one row whose seq grows whenever a task is created or its updated_at moves
--   (the triggers below), or an attempt's progress moves (migration 0007's
--   attempt_progress), so a live console page learns of a change by reading one row by
--   its key instead of counting the tasks table.
-- user_spec_bytes: JobSpec bytes (raw YAML + normalised JSON) each user stored per hour,
--   for the per-user quota on what a day of submissions may add to the database. The
--   store adds to it in the transaction that inserts the task and drops a user's hours
--   older than the window as it goes. The last day of tasks before this migration counts.
-- ui_sessions_user: a user's sessions by age (a user keeps a bounded number of them).

CREATE TABLE task_changes (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL
);
INSERT INTO task_changes (id, seq) VALUES (1, 0);
CREATE TRIGGER tasks_changed_insert AFTER INSERT ON tasks
BEGIN
    UPDATE task_changes SET seq = seq + 1 WHERE id = 1;
END;
CREATE TRIGGER tasks_changed_update AFTER UPDATE OF updated_at ON tasks
WHEN OLD.updated_at IS NOT NEW.updated_at
BEGIN
    UPDATE task_changes SET seq = seq + 1 WHERE id = 1;
END;

-- An attempt's progress moving counts as a change too: open pages refresh as a run steps.
CREATE TRIGGER attempt_progress_changed_insert AFTER INSERT ON attempt_progress
BEGIN
    UPDATE task_changes SET seq = seq + 1 WHERE id = 1;
END;
CREATE TRIGGER attempt_progress_changed_update AFTER UPDATE OF updated_at ON attempt_progress
WHEN OLD.updated_at IS NOT NEW.updated_at
BEGIN
    UPDATE task_changes SET seq = seq + 1 WHERE id = 1;
END;

CREATE TABLE user_spec_bytes (
    user  TEXT    NOT NULL,
    hour  INTEGER NOT NULL,                         -- floor(created_at / 3600)
    bytes INTEGER NOT NULL CHECK (bytes >= 0),
    PRIMARY KEY (user, hour)
) WITHOUT ROWID;
INSERT INTO user_spec_bytes (user, hour, bytes)
SELECT user, CAST(created_at / 3600 AS INTEGER),
       sum(length(CAST(jobspec_yaml AS BLOB)) + length(CAST(spec_json AS BLOB)))
FROM tasks
WHERE user IS NOT NULL AND created_at >= (SELECT max(created_at) FROM tasks) - 86400
GROUP BY 1, 2;

-- A user's console sessions, oldest first: signing in past the per-user bound drops the
-- oldest ones.
CREATE INDEX ui_sessions_user ON ui_sessions (user, created_at);
