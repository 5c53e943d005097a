-- Migration 0002: users, their API tokens, and the indexes of per-user reads.
-- Tasks created before users existed keep user NULL here; the store gives them to the
-- configured default user at start-up (SQL cannot read the configuration).
-- The name and role rules mirror service/users.py (the CHECKs are a backstop).

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
