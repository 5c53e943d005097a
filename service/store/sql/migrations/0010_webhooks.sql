-- Migration 0010: webhooks and their outbox.
--
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
