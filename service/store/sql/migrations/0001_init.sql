-- Migration 0001: the initial schema.
-- The state lists below mirror service/states.py (TaskState, RayStatus, FailureKind).

CREATE TABLE tasks (
    seq                 INTEGER PRIMARY KEY AUTOINCREMENT,  -- FIFO order
    task_id             TEXT    NOT NULL UNIQUE,
    workload            TEXT    NOT NULL,
    state               TEXT    NOT NULL CHECK (state IN (
                            'QUEUED', 'PENDING_RESOURCES', 'SUBMITTING', 'SUBMITTED',
                            'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELED')),
    jobspec_yaml        TEXT    NOT NULL,                   -- raw, as received
    spec_json           TEXT    NOT NULL,                   -- normalised JobSpec
    nnodes              INTEGER NOT NULL CHECK (nnodes >= 1),
    n_gpus_per_node     INTEGER NOT NULL CHECK (n_gpus_per_node >= 1),
    user                TEXT,
    created_at          REAL    NOT NULL,
    updated_at          REAL    NOT NULL,
    next_run_at         REAL    NOT NULL,                   -- not picked before this time
    runnable_since      REAL    NOT NULL,                   -- for the starvation guard
    error_summary       TEXT,
    pending_reason      TEXT,
    latest_attempt_no   INTEGER NOT NULL DEFAULT 0,
    cancel_requested_at REAL
);

-- Picking runnable work and queue positions touch runnable rows only, in FIFO order.
CREATE INDEX tasks_runnable ON tasks (seq, state, next_run_at)
    WHERE state IN ('QUEUED', 'PENDING_RESOURCES');
-- Reconcile and in-flight accounting touch active rows only.
CREATE INDEX tasks_active ON tasks (seq)
    WHERE state IN ('SUBMITTING', 'SUBMITTED', 'RUNNING');
-- Listing by state, newest first (and counts per state).
CREATE INDEX tasks_state_seq ON tasks (state, seq);

CREATE TABLE attempts (
    task_id            TEXT    NOT NULL REFERENCES tasks (task_id),
    attempt_no         INTEGER NOT NULL CHECK (attempt_no >= 1),
    ray_submission_id  TEXT    NOT NULL UNIQUE,
    ray_status         TEXT CHECK (ray_status IN (
                           'PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'STOPPED')),
    failure_kind       TEXT CHECK (failure_kind IN (
                           'INSUFFICIENT_RESOURCES', 'CLUSTER_LOST', 'USER_ERROR',
                           'RUNTIME_ERROR', 'UNKNOWN')),
    message            TEXT,                                -- truncated
    created_at         REAL    NOT NULL,                    -- claimed for submit
    submitted_at       REAL,                                -- NULL until Ray accepted it
    start_time         REAL,
    end_time           REAL,
    exit_code          INTEGER,
    stop_requested     INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (task_id, attempt_no)
) WITHOUT ROWID;

CREATE TABLE events (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id      TEXT    NOT NULL REFERENCES tasks (task_id),
    ts           REAL    NOT NULL,
    event_type   TEXT    NOT NULL,
    payload_json TEXT    NOT NULL DEFAULT '{}'
);
CREATE INDEX events_task ON events (task_id, id);
