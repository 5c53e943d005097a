-- Migration 0004: the web console's sign-in sessions, the scheduler's samples its charts
-- draw, and the index that finds the attempts admitted since the last tick.

-- A session is an opaque random cookie value: only its SHA-256 is kept. token_id names the
-- API token signed in with (NULL: the bootstrap token, then token_fp is a hash of it), so a
-- session dies with its token (revoked, expired) or its user (disabled).
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

-- One row per sample interval, kept for a bounded window (the store deletes older rows).
-- gpus_* are what admission sees (allocatable GPUs, NULL when Ray did not answer).
CREATE TABLE samples (
    ts         REAL    PRIMARY KEY,
    pending    INTEGER NOT NULL,
    running    INTEGER NOT NULL,
    gpus_used  REAL,
    gpus_total REAL
) WITHOUT ROWID;

CREATE INDEX attempts_created_at ON attempts (created_at);
