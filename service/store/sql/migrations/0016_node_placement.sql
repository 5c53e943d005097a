-- Migration 0016: where each attempt ran, quarantine, and drains that re-queue (issue 55).
--
-- attempt_nodes: the nodes an attempt ran on, by name: its driver's node ('driver') and
-- the nodes its placement groups hold GPUs on ('gang', with the GPUs held there). Written
-- as the scheduler first sees them; what connects three failures to one machine.
-- node_states/node_events are rebuilt (SQLite cannot alter a CHECK): a third source,
-- 'quarantine' (the service cordoned the node on the evidence of failed attempts; only
-- an operator lifts it), the event NODE_QUARANTINED, and node_states.requeue (a drain
-- whose attempts are stopped and re-queued, as a preemption, instead of finishing there).
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

CREATE TABLE node_states_new (
    name      TEXT NOT NULL PRIMARY KEY,
    state     TEXT NOT NULL CHECK (state IN ('cordoned', 'drained')),
    source    TEXT NOT NULL CHECK (source IN ('operator', 'health', 'quarantine')),
    by_user   TEXT,
    at        REAL NOT NULL,
    reason    TEXT NOT NULL,
    requeue   INTEGER NOT NULL DEFAULT 0 CHECK (requeue IN (0, 1))
) WITHOUT ROWID;
INSERT INTO node_states_new (name, state, source, by_user, at, reason)
    SELECT name, state, source, by_user, at, reason FROM node_states;
DROP TABLE node_states;
ALTER TABLE node_states_new RENAME TO node_states;

CREATE TABLE node_events_new (
    id        INTEGER PRIMARY KEY,
    name      TEXT NOT NULL,
    ts        REAL NOT NULL,
    kind      TEXT NOT NULL CHECK (kind IN ('NODE_CORDONED', 'NODE_DRAINED', 'NODE_RESUMED',
                                            'NODE_QUARANTINED')),
    source    TEXT NOT NULL CHECK (source IN ('operator', 'health', 'quarantine')),
    by_user   TEXT,
    reason    TEXT NOT NULL
);
INSERT INTO node_events_new (id, name, ts, kind, source, by_user, reason)
    SELECT id, name, ts, kind, source, by_user, reason FROM node_events;
DROP TABLE node_events;
ALTER TABLE node_events_new RENAME TO node_events;
CREATE INDEX node_events_name ON node_events (name, ts);
