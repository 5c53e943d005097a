-- Migration 0018: idempotent submits (issue 54): the Idempotency-Key of a created task or
-- pipeline, per user, written in the same transaction as what it created (a key never
-- without its task, a task never without its key). fingerprint: a hash of the request
-- (route and canonical body); result_json: what the first answer said (the ids), replayed
-- to a retry. Rows older than the retention (24 h) are purged as new keys are written.
CREATE TABLE idempotency_keys (
    user         TEXT NOT NULL,
    key          TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,
    result_json  TEXT NOT NULL,
    created_at   REAL NOT NULL,
    PRIMARY KEY (user, key)
) WITHOUT ROWID;
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
