-- Migration 0012: task dependencies and pipelines (service/dependencies.py,
-- service/pipelines.py, service/pipeline_store.py).
--
-- tasks is rebuilt: its state CHECK gains BLOCKED (a task waiting on other tasks' final
--   states; SQLite cannot alter a CHECK). Columns, indexes and triggers (0008's change
--   sequence, 0011's task counts) are as before.
--   The migration runs with foreign keys off (db.initialize), then checks them.
-- task_deps: one row per (dependent, parent) with the condition (Slurm's afterok /
--   afternotok / afterany) and the dependent's depth in the dependency graph (1: its
--   parents have none), so a new dependent's depth is one indexed read per parent.
-- tasks_blocked: the scheduler reads the BLOCKED tasks each tick (never a scan of tasks).
-- pipelines: a DAG submitted as one document; its state derives from its stages'.
-- pipeline_stages: each stage's task, its place in the document, its template (the stage's
--   JobSpec with its output references unresolved, JSON) and whether it was skipped (ended
--   CANCELED because a dependency could never hold: not counted against the pipeline).

CREATE TABLE tasks_new (
    seq                 INTEGER PRIMARY KEY AUTOINCREMENT,  -- FIFO order
    task_id             TEXT    NOT NULL UNIQUE,
    workload            TEXT    NOT NULL,
    state               TEXT    NOT NULL CHECK (state IN (
                            'BLOCKED', 'QUEUED', 'PENDING_RESOURCES', 'SUBMITTING',
                            'SUBMITTED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELED')),
    jobspec_yaml        TEXT    NOT NULL,
    spec_json           TEXT    NOT NULL,
    nnodes              INTEGER NOT NULL CHECK (nnodes >= 1),
    n_gpus_per_node     INTEGER NOT NULL CHECK (n_gpus_per_node >= 1),
    user                TEXT,
    created_at          REAL    NOT NULL,
    updated_at          REAL    NOT NULL,
    next_run_at         REAL    NOT NULL,
    runnable_since      REAL    NOT NULL,
    error_summary       TEXT,
    pending_reason      TEXT,
    latest_attempt_no   INTEGER NOT NULL DEFAULT 0,
    cancel_requested_at REAL,
    priority            INTEGER NOT NULL DEFAULT 0
                            CHECK (priority BETWEEN -1000 AND 1000),
    retry_not_before    REAL,
    resource_failures   INTEGER NOT NULL DEFAULT 0,
    preemptions         INTEGER NOT NULL DEFAULT 0,
    max_runtime_s       REAL CHECK (max_runtime_s > 0)
);
INSERT INTO tasks_new (seq, task_id, workload, state, jobspec_yaml, spec_json, nnodes,
                       n_gpus_per_node, user, created_at, updated_at, next_run_at,
                       runnable_since, error_summary, pending_reason, latest_attempt_no,
                       cancel_requested_at, priority, retry_not_before, resource_failures,
                       preemptions, max_runtime_s)
SELECT seq, task_id, workload, state, jobspec_yaml, spec_json, nnodes, n_gpus_per_node, user,
       created_at, updated_at, next_run_at, runnable_since, error_summary, pending_reason,
       latest_attempt_no, cancel_requested_at, priority, retry_not_before, resource_failures,
       preemptions, max_runtime_s
FROM tasks;
DROP TABLE tasks;
ALTER TABLE tasks_new RENAME TO tasks;

CREATE INDEX tasks_runnable ON tasks (priority DESC, seq, state, next_run_at)
    WHERE state IN ('QUEUED', 'PENDING_RESOURCES');
CREATE INDEX tasks_user_runnable ON tasks (user, priority DESC, seq, next_run_at)
    WHERE state IN ('QUEUED', 'PENDING_RESOURCES');
CREATE INDEX tasks_active ON tasks (seq)
    WHERE state IN ('SUBMITTING', 'SUBMITTED', 'RUNNING');
CREATE INDEX tasks_state_seq ON tasks (state, seq);
CREATE INDEX tasks_user_seq ON tasks (user, seq);
CREATE INDEX tasks_user_state_seq ON tasks (user, state, seq);
CREATE INDEX tasks_blocked ON tasks (seq) WHERE state = 'BLOCKED';
CREATE TRIGGER tasks_changed_insert AFTER INSERT ON tasks
BEGIN
    UPDATE task_changes SET seq = seq + 1 WHERE id = 1;
END;
CREATE TRIGGER tasks_changed_update AFTER UPDATE OF updated_at ON tasks
WHEN OLD.updated_at IS NOT NEW.updated_at
BEGIN
    UPDATE task_changes SET seq = seq + 1 WHERE id = 1;
END;
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

CREATE TABLE task_deps (
    task_id   TEXT    NOT NULL REFERENCES tasks (task_id),   -- the dependent
    parent_id TEXT    NOT NULL REFERENCES tasks (task_id),
    condition TEXT    NOT NULL CHECK (condition IN ('ok', 'notok', 'any')),
    depth     INTEGER NOT NULL CHECK (depth >= 1),
    PRIMARY KEY (task_id, parent_id)
) WITHOUT ROWID;
CREATE INDEX task_deps_parent ON task_deps (parent_id);

-- dep_wakeups: the BLOCKED tasks to look at again, written by the trigger below in the
--   transaction that ends a parent (and by the store for a new dependent), so a tick reads
--   what changed instead of every BLOCKED task; the tick deletes the rows it has handled.
CREATE TABLE dep_wakeups (
    id      INTEGER PRIMARY KEY,
    task_id TEXT    NOT NULL
);
CREATE TRIGGER task_deps_parent_ended AFTER UPDATE OF state ON tasks
WHEN NEW.state IN ('SUCCEEDED', 'FAILED', 'CANCELED') AND OLD.state IS NOT NEW.state
BEGIN
    INSERT INTO dep_wakeups (task_id)
    SELECT task_id FROM task_deps WHERE parent_id = NEW.task_id;
END;

CREATE TABLE pipelines (
    pipeline_id         TEXT    PRIMARY KEY,
    name                TEXT    NOT NULL,
    user                TEXT    NOT NULL,
    state               TEXT    NOT NULL CHECK (state IN (
                            'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELED')),
    document            TEXT    NOT NULL,                   -- raw, as received
    created_at          REAL    NOT NULL,
    updated_at          REAL    NOT NULL,
    ended_at            REAL,
    cancel_requested_at REAL
) WITHOUT ROWID;
CREATE INDEX pipelines_running ON pipelines (created_at) WHERE state = 'RUNNING';
CREATE INDEX pipelines_created ON pipelines (created_at);
CREATE INDEX pipelines_user_created ON pipelines (user, created_at);

CREATE TABLE pipeline_stages (
    pipeline_id   TEXT    NOT NULL REFERENCES pipelines (pipeline_id),
    stage         TEXT    NOT NULL,
    task_id       TEXT    NOT NULL UNIQUE REFERENCES tasks (task_id),
    position      INTEGER NOT NULL CHECK (position >= 0),
    template_json TEXT    NOT NULL,
    skipped       INTEGER NOT NULL DEFAULT 0 CHECK (skipped IN (0, 1)),
    PRIMARY KEY (pipeline_id, stage)
) WITHOUT ROWID;
