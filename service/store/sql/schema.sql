-- Argus task service: the fresh schema (equal to applying every file in migrations/).
-- Times are epoch seconds (REAL); the API renders them as ISO-8601.
-- The state lists below mirror service/states.py (TaskState, RayStatus, FailureKind).

CREATE TABLE tasks (
    seq                 INTEGER PRIMARY KEY AUTOINCREMENT,  -- FIFO order
    task_id             TEXT    NOT NULL UNIQUE,
    workload            TEXT    NOT NULL,
    state               TEXT    NOT NULL CHECK (state IN (
                            'BLOCKED', 'QUEUED', 'PENDING_RESOURCES', 'SUBMITTING',
                            'SUBMITTED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELED')),
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
    cancel_requested_at REAL,
    priority            INTEGER NOT NULL DEFAULT 0          -- higher is admitted first
                            CHECK (priority BETWEEN -1000 AND 1000),
    retry_not_before    REAL,                               -- retry backoff, kept in place
    resource_failures   INTEGER NOT NULL DEFAULT 0,         -- consecutive, for the backoff
    preemptions         INTEGER NOT NULL DEFAULT 0,         -- not counted as attempts
    max_runtime_s       REAL CHECK (max_runtime_s > 0),     -- time limit; NULL: none
    reason_kind         TEXT                                -- reasons.WaitKind of pending_reason
);

-- Picking runnable work and queue positions touch runnable rows only, in admission order
-- (priority first, then FIFO).
CREATE INDEX tasks_runnable ON tasks (priority DESC, seq, state, next_run_at)
    WHERE state IN ('QUEUED', 'PENDING_RESOURCES');
-- Each user's runnable tasks in admission order (fair share looks at every user's head).
CREATE INDEX tasks_user_runnable ON tasks (user, priority DESC, seq, next_run_at)
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
                           'RUNTIME_ERROR', 'UNKNOWN', 'PREEMPTED', 'TIME_LIMIT')),
    message            TEXT,                                -- truncated
    created_at         REAL    NOT NULL,                    -- claimed for submit
    submitted_at       REAL,                                -- NULL until Ray accepted it
    start_time         REAL,
    end_time           REAL,
    exit_code          INTEGER,
    stop_requested     INTEGER NOT NULL DEFAULT 0,
    preempted_for      TEXT,                                -- stopped for this task
    PRIMARY KEY (task_id, attempt_no)
) WITHOUT ROWID;

CREATE TABLE attempt_nodes (
    task_id     TEXT    NOT NULL,
    attempt_no  INTEGER NOT NULL,
    name        TEXT    NOT NULL,
    role        TEXT    NOT NULL CHECK (role IN ('driver', 'gang')),
    gpus        REAL    NOT NULL DEFAULT 0,
    seen_at     REAL    NOT NULL,
    PRIMARY KEY (task_id, attempt_no, name, role),
    FOREIGN KEY (task_id, attempt_no) REFERENCES attempts (task_id, attempt_no)
) WITHOUT ROWID;
CREATE INDEX attempt_nodes_name ON attempt_nodes (name, seen_at);

CREATE TABLE events (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id      TEXT    NOT NULL REFERENCES tasks (task_id),
    ts           REAL    NOT NULL,
    event_type   TEXT    NOT NULL,
    payload_json TEXT    NOT NULL DEFAULT '{}'
);
CREATE INDEX events_task ON events (task_id, id);

-- Users and their API tokens (tasks.user names the owner; NULL only for tasks created
-- before users existed, until start-up gives them to the configured default user).
CREATE TABLE users (
    name        TEXT    PRIMARY KEY CHECK (
                    length(name) BETWEEN 1 AND 32 AND name GLOB '[a-z]*'
                    AND name NOT GLOB '*[^a-z0-9_-]*'),
    role        TEXT    NOT NULL CHECK (role IN ('admin', 'user')),
    enabled     INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    created_at  REAL    NOT NULL,
    disabled_at REAL                                     -- NULL while enabled
) WITHOUT ROWID;

-- A token is argus_<token_id>_<secret>: only the SHA-256 of the whole token is kept.
CREATE TABLE tokens (
    token_id     TEXT    PRIMARY KEY,                    -- not secret; finds the row
    user         TEXT    NOT NULL REFERENCES users (name),
    label        TEXT    NOT NULL,
    sha256       TEXT    NOT NULL,
    created_at   REAL    NOT NULL,
    last_used_at REAL,                                   -- written at most once a minute
    expires_at   REAL,                                   -- NULL: never
    revoked_at   REAL
) WITHOUT ROWID;
CREATE INDEX tokens_user ON tokens (user, created_at);

-- Listing one user's tasks newest first; with a state too, and counts per user and state.
CREATE INDEX tasks_user_seq ON tasks (user, seq);
CREATE INDEX tasks_user_state_seq ON tasks (user, state, seq);
-- GPU accounting over a window reads the attempts that ended inside it (or still run).
CREATE INDEX attempts_end_time ON attempts (end_time);

-- GPU-seconds of every ended attempt, per owner: a ledger the store adds to in the
-- transaction that ends an attempt (and when it gives ownerless tasks an owner), so
-- /metrics reads one row per user however long the history.
CREATE TABLE user_gpu_seconds (
    user        TEXT    PRIMARY KEY,
    gpu_seconds REAL    NOT NULL CHECK (gpu_seconds >= 0)
) WITHOUT ROWID;

-- The web console's sign-in sessions: only the SHA-256 of the cookie's value is kept;
-- token_id names the API token signed in with (NULL: the bootstrap token, whose hash is
-- token_fp), so a session dies with its token or its user.
CREATE TABLE ui_sessions (
    id_sha256  TEXT    PRIMARY KEY,
    user       TEXT    NOT NULL,
    token_id   TEXT,
    token_fp   TEXT,
    csrf       TEXT    NOT NULL,                    -- the synchronizer token of forms
    created_at REAL    NOT NULL,
    expires_at REAL    NOT NULL
) WITHOUT ROWID;
CREATE INDEX ui_sessions_expires ON ui_sessions (expires_at);

-- The scheduler's samples for the console's charts, one per interval, bounded in age.
CREATE TABLE samples (
    ts         REAL    PRIMARY KEY,
    pending    INTEGER NOT NULL,
    running    INTEGER NOT NULL,
    gpus_used  REAL,                                -- NULL: Ray did not answer
    gpus_total REAL
) WITHOUT ROWID;

-- The attempts admitted since a time (the admission wait-time histogram).
CREATE INDEX attempts_created_at ON attempts (created_at);

-- Progress and training curves of attempts, read from their driver logs (migration 0007).
-- service/curves.py, service/progress_follower.py).
--
-- attempt_progress: one row per followed attempt. log_offset is how many characters of the
--   driver log have been read (the follower's guard: each write names the offset it read
--   from). step / total_steps / resumed_from / first_step / first_at / last_at are
--   progress.Progress; rate (steps/s) and eta_at (epoch s) derive from them, kept for reads.
-- metric_series: each metric of an attempt, its downsampling stride and how many points it
--   has received (curves.keeps, curves.thin).
-- metric_points: the kept points, at most v2.progress.max_points per series, keyed by the
--   series' integer id (a third of the cost of a (task, attempt, key, step) key to insert).
CREATE TABLE attempt_progress (
    task_id      TEXT    NOT NULL,
    attempt_no   INTEGER NOT NULL,
    log_offset   INTEGER NOT NULL DEFAULT 0 CHECK (log_offset >= 0),
    step         INTEGER,
    total_steps  INTEGER CHECK (total_steps >= 1),
    resumed_from INTEGER,
    first_step   INTEGER,
    first_at     REAL,
    last_at      REAL,
    rate         REAL,
    eta_at       REAL,
    updated_at   REAL    NOT NULL,
    PRIMARY KEY (task_id, attempt_no)
) WITHOUT ROWID;
CREATE TABLE metric_series (
    series_id  INTEGER PRIMARY KEY,                 -- what the points name (a small key)
    task_id    TEXT    NOT NULL,
    attempt_no INTEGER NOT NULL,
    key        TEXT    NOT NULL,
    stride     INTEGER NOT NULL CHECK (stride >= 1),
    seen       INTEGER NOT NULL CHECK (seen >= 0),
    UNIQUE (task_id, attempt_no, key)
);
CREATE TABLE metric_points (
    series_id INTEGER NOT NULL,
    step      INTEGER NOT NULL,
    value     REAL    NOT NULL,
    PRIMARY KEY (series_id, step)
) WITHOUT ROWID;

-- Live pages: a sequence that grows whenever a task is created or its updated_at moves,
-- read by its key (no count over tasks).
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

-- JobSpec bytes (raw YAML + normalised JSON) each user stored per hour: the per-user
-- quota on what a day of submissions may add (the store adds to it with each task).
CREATE TABLE user_spec_bytes (
    user  TEXT    NOT NULL,
    hour  INTEGER NOT NULL,                         -- floor(created_at / 3600)
    bytes INTEGER NOT NULL CHECK (bytes >= 0),
    PRIMARY KEY (user, hour)
) WITHOUT ROWID;

-- A user's console sessions, oldest first: signing in past the per-user bound drops the
-- oldest ones.
CREATE INDEX ui_sessions_user ON ui_sessions (user, created_at);

-- Each task's running usage totals of its ended attempts (migrations 0009, 0014) and the
-- span they held their gang (earliest start, latest end): usage over any window sums these
-- for the tasks whose span lies inside it, and reads attempts only at the window's edges.
CREATE TABLE task_usage (
    task_id            TEXT    PRIMARY KEY REFERENCES tasks(task_id),
    user               TEXT,
    gpu_seconds        REAL    NOT NULL CHECK (gpu_seconds >= 0),
    failed_gpu_seconds REAL    NOT NULL CHECK (failed_gpu_seconds >= 0),
    attempts           INTEGER NOT NULL CHECK (attempts >= 0),
    first_start        REAL,
    last_end           REAL
) WITHOUT ROWID;
CREATE INDEX task_usage_user ON task_usage (user, last_end, first_start, gpu_seconds,
                                            failed_gpu_seconds, attempts);
CREATE INDEX task_usage_top ON task_usage (user, gpu_seconds DESC, task_id, last_end,
                                           first_start);
CREATE INDEX task_usage_all_top ON task_usage (gpu_seconds DESC, task_id, last_end,
                                               first_start);
CREATE INDEX task_usage_span ON task_usage (last_end, first_start, gpu_seconds, user);
CREATE INDEX task_usage_length ON task_usage (last_end - first_start);

-- Per-user webhooks and their outbox (service/webhooks/): a delivery row is written in the
-- same transaction as the event that causes it, so no state change is ever told to nobody.
-- The signing secret is stored as issued (whsec_<base64>): signing needs it back; the API
-- shows it only in the answer that created the hook.
CREATE TABLE webhooks (
    hook_id    TEXT    PRIMARY KEY,                 -- wh_<12 hex>
    owner      TEXT    NOT NULL REFERENCES users (name),
    url        TEXT    NOT NULL,
    events     TEXT    NOT NULL,                    -- JSON array of event types
    format     TEXT    NOT NULL DEFAULT 'standard' CHECK (format IN ('standard', 'slack')),
    secret     TEXT    NOT NULL,
    created_at REAL    NOT NULL
) WITHOUT ROWID;
CREATE INDEX webhooks_owner ON webhooks (owner);

-- One row per (event, subscribed hook). PENDING rows are due at next_at; a worker that
-- claims one holds it until lease_until (a restart releases every lease: one service per
-- database). attempts counts the tries begun; last_* is the outcome of the latest one.
CREATE TABLE webhook_deliveries (
    delivery_id     INTEGER PRIMARY KEY AUTOINCREMENT,
    hook_id         TEXT    NOT NULL REFERENCES webhooks (hook_id) ON DELETE CASCADE,
    event_id        INTEGER NOT NULL,
    event_type      TEXT    NOT NULL,
    event_ts        REAL    NOT NULL,
    data_json       TEXT    NOT NULL,
    state           TEXT    NOT NULL DEFAULT 'PENDING'
                    CHECK (state IN ('PENDING', 'DELIVERED', 'FAILED')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_at         REAL    NOT NULL,
    lease_until     REAL,
    last_attempt_at REAL,
    last_status     INTEGER,                        -- HTTP status of the latest try
    last_error      TEXT,                           -- why the latest try failed
    ended_at        REAL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at) WHERE state = 'PENDING';
CREATE INDEX webhook_deliveries_hook ON webhook_deliveries (hook_id, delivery_id);
CREATE INDEX webhook_deliveries_ended ON webhook_deliveries (ended_at)
    WHERE ended_at IS NOT NULL;

-- Every try of a delivery and its outcome (the delivery row keeps the latest).
CREATE TABLE webhook_tries (
    delivery_id INTEGER NOT NULL REFERENCES webhook_deliveries (delivery_id)
                ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    at          REAL    NOT NULL,
    status      INTEGER,                            -- HTTP status (NULL: no answer)
    error       TEXT,
    PRIMARY KEY (delivery_id, attempt)
) WITHOUT ROWID;

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

-- Dependencies and pipelines (migration 0012): BLOCKED tasks wait on their parents'
-- final states (task_deps); a pipeline is a DAG of stages, each a task.
CREATE INDEX tasks_blocked ON tasks (seq) WHERE state = 'BLOCKED';
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
CREATE TABLE node_states (
    name      TEXT NOT NULL PRIMARY KEY,
    state     TEXT NOT NULL CHECK (state IN ('cordoned', 'drained')),
    source    TEXT NOT NULL CHECK (source IN ('operator', 'health', 'quarantine')),
    by_user   TEXT,
    at        REAL NOT NULL,
    reason    TEXT NOT NULL,
    requeue   INTEGER NOT NULL DEFAULT 0 CHECK (requeue IN (0, 1))
) WITHOUT ROWID;
CREATE TABLE node_events (
    id        INTEGER PRIMARY KEY,
    name      TEXT NOT NULL,
    ts        REAL NOT NULL,
    kind      TEXT NOT NULL CHECK (kind IN ('NODE_CORDONED', 'NODE_DRAINED', 'NODE_RESUMED',
                                            'NODE_QUARANTINED')),
    source    TEXT NOT NULL CHECK (source IN ('operator', 'health', 'quarantine')),
    by_user   TEXT,
    reason    TEXT NOT NULL
);
CREATE INDEX node_events_name ON node_events (name, ts);
CREATE TABLE service_lease (
    name         TEXT    NOT NULL PRIMARY KEY,
    holder       TEXT    NOT NULL,
    host         TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    address      TEXT    NOT NULL,
    epoch        INTEGER NOT NULL CHECK (epoch >= 1),
    acquired_at  REAL    NOT NULL,
    renewed_at   REAL    NOT NULL,
    expires_at   REAL    NOT NULL
) WITHOUT ROWID;
CREATE TABLE idempotency_keys (
    user         TEXT NOT NULL,
    key          TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,
    result_json  TEXT NOT NULL,
    created_at   REAL NOT NULL,
    PRIMARY KEY (user, key)
) WITHOUT ROWID;
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
CREATE TABLE leader_view (
    name       TEXT    NOT NULL PRIMARY KEY,
    holder     TEXT    NOT NULL,
    epoch      INTEGER NOT NULL,
    at         REAL    NOT NULL,
    view_json  TEXT    NOT NULL
) WITHOUT ROWID;
CREATE TABLE node_evidence (
    node        TEXT    NOT NULL,
    task_id     TEXT    NOT NULL,
    attempt_no  INTEGER NOT NULL,
    at          REAL    NOT NULL,
    line        TEXT    NOT NULL,
    PRIMARY KEY (node, task_id, attempt_no)
) WITHOUT ROWID;
CREATE INDEX node_evidence_at ON node_evidence (at);
