-- Migration 0015: cordoned and drained nodes (issue 55), and their events.
--
-- node_states holds one row per node that is out of admission: its Ray node name, the
-- state (cordoned: no new attempt is placed there; drained: the same, the attempts on it
-- finish on their own), who put it there (source: an operator, or the service's health
-- check), when and why. A resumed node has no row. Every change is a guarded write with
-- its row in node_events (the task events are per task; a node's are its own).
CREATE TABLE node_states (
    name      TEXT NOT NULL PRIMARY KEY,
    state     TEXT NOT NULL CHECK (state IN ('cordoned', 'drained')),
    source    TEXT NOT NULL CHECK (source IN ('operator', 'health')),
    by_user   TEXT,
    at        REAL NOT NULL,
    reason    TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE node_events (
    id        INTEGER PRIMARY KEY,
    name      TEXT NOT NULL,
    ts        REAL NOT NULL,
    kind      TEXT NOT NULL CHECK (kind IN ('NODE_CORDONED', 'NODE_DRAINED', 'NODE_RESUMED')),
    source    TEXT NOT NULL CHECK (source IN ('operator', 'health')),
    by_user   TEXT,
    reason    TEXT NOT NULL
);
CREATE INDEX node_events_name ON node_events (name, ts);
