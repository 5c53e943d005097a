-- Migration 0019 (as ../../migrations/0019_leader_view.sql): the leader's view, shared.
CREATE TABLE leader_view (
    name       text   NOT NULL PRIMARY KEY,
    holder     text   NOT NULL,
    epoch      bigint NOT NULL,
    at         double precision NOT NULL,
    view_json  text   NOT NULL
);
