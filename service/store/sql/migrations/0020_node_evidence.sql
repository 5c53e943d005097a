-- Migration 0020: the quarantine's evidence kept in the database (issue 54; issue 55's
-- quarantine): an attempt that failed with a hardware error, against each node it ran on,
-- within the quarantine's window. It was the scheduler's memory: a restart of the service,
-- or another instance taking the lead, forgot it, and a bad node then ate as many tasks
-- again before it was quarantined. Rows older than the window are dropped as new ones come.
CREATE TABLE node_evidence (
    node        TEXT    NOT NULL,
    task_id     TEXT    NOT NULL,
    attempt_no  INTEGER NOT NULL,
    at          REAL    NOT NULL,
    line        TEXT    NOT NULL,
    PRIMARY KEY (node, task_id, attempt_no)
) WITHOUT ROWID;
CREATE INDEX node_evidence_at ON node_evidence (at);
