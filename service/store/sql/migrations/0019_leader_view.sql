-- Migration 0019: the leader's view of the cluster, shared with the standbys (issue 54;
-- service.engine.shared_view). One row per lease: what the leader's last published tick
-- saw (nodes' free resources, health reports, fair shares, start estimates) as JSON, the
-- tick's time and the lease term that wrote it. Written only by the lease's holder (its
-- writes are fenced by the lease's epoch), read by a standby every second.
CREATE TABLE leader_view (
    name       TEXT    NOT NULL PRIMARY KEY,
    holder     TEXT    NOT NULL,
    epoch      INTEGER NOT NULL,
    at         REAL    NOT NULL,
    view_json  TEXT    NOT NULL
) WITHOUT ROWID;
