-- Migration 0020 (as ../../migrations/0020_node_evidence.sql): the quarantine's evidence.
CREATE TABLE node_evidence (
    node        text   NOT NULL,
    task_id     text   NOT NULL,
    attempt_no  bigint NOT NULL,
    at          double precision NOT NULL,
    line        text   NOT NULL,
    PRIMARY KEY (node, task_id, attempt_no)
);
CREATE INDEX node_evidence_at ON node_evidence (at);
