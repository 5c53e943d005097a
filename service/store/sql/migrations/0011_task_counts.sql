-- Migration 0011: tasks per owner and state, kept by triggers.
--
-- Tasks per owner and state, kept by the triggers below in the transaction that creates a
-- task or moves it: /metrics and the console read these few rows instead of counting the
-- tasks table at every scrape (a scan of ~300k rows: 20-40 ms). user is '' for a task
-- without an owner (NULL would make every such row distinct under the key).
CREATE TABLE task_counts (
    user  TEXT    NOT NULL,
    state TEXT    NOT NULL,
    n     INTEGER NOT NULL CHECK (n >= 0),
    PRIMARY KEY (user, state)
) WITHOUT ROWID;
CREATE TRIGGER task_counts_insert AFTER INSERT ON tasks
BEGIN
    INSERT INTO task_counts (user, state, n) VALUES (coalesce(NEW.user, ''), NEW.state, 1)
    ON CONFLICT (user, state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER task_counts_update AFTER UPDATE OF state, user ON tasks
WHEN OLD.state IS NOT NEW.state OR OLD.user IS NOT NEW.user
BEGIN
    UPDATE task_counts SET n = n - 1
    WHERE user = coalesce(OLD.user, '') AND state = OLD.state;
    INSERT INTO task_counts (user, state, n) VALUES (coalesce(NEW.user, ''), NEW.state, 1)
    ON CONFLICT (user, state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER task_counts_delete AFTER DELETE ON tasks
BEGIN
    UPDATE task_counts SET n = n - 1
    WHERE user = coalesce(OLD.user, '') AND state = OLD.state;
END;

INSERT INTO task_counts (user, state, n)
SELECT coalesce(user, ''), state, count(*) FROM tasks GROUP BY coalesce(user, ''), state;
