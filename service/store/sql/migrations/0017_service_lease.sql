-- Migration 0017: the service's lease (issue 54). One row per lease name ('leader'): the
-- instance that holds it (an id, its host, pid and address), since when, until when, and
-- its epoch (1 on the first take, +1 at every change of holder: what fences a deposed
-- holder's late writes). An instance takes it at start and renews it while it runs; a
-- second instance on the same database is refused while the lease is live.
CREATE TABLE service_lease (
    name         TEXT    NOT NULL PRIMARY KEY,
    holder       TEXT    NOT NULL,
    host         TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    address      TEXT    NOT NULL,
    epoch        INTEGER NOT NULL CHECK (epoch >= 1),
    acquired_at  REAL    NOT NULL,
    renewed_at   REAL    NOT NULL,
    expires_at   REAL    NOT NULL
) WITHOUT ROWID;
