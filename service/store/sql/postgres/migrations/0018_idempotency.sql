-- Migration 0018 (as ../../migrations/0018_idempotency.sql): idempotent submits.
CREATE TABLE idempotency_keys (
    "user"       text NOT NULL,
    key          text NOT NULL,
    fingerprint  text NOT NULL,
    result_json  text NOT NULL,
    created_at   double precision NOT NULL,
    PRIMARY KEY ("user", key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
