-- Migration 0017 (as ../../migrations/0017_service_lease.sql): the service's lease.
CREATE TABLE service_lease (
    name         text   NOT NULL PRIMARY KEY,
    holder       text   NOT NULL,
    host         text   NOT NULL,
    pid          bigint NOT NULL,
    address      text   NOT NULL,
    epoch        bigint NOT NULL CHECK (epoch >= 1),
    acquired_at  double precision NOT NULL,
    renewed_at   double precision NOT NULL,
    expires_at   double precision NOT NULL
);
