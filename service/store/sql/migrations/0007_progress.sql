-- Migration 0007: progress and training curves.
--
-- Progress and training curves of attempts, read from their driver logs (service/progress.py,
-- service/curves.py, service/progress_follower.py).
--
-- attempt_progress: one row per followed attempt. log_offset is how many characters of the
--   driver log have been read (the follower's guard: each write names the offset it read
--   from). step / total_steps / resumed_from / first_step / first_at / last_at are
--   progress.Progress; rate (steps/s) and eta_at (epoch s) derive from them, kept for reads.
-- metric_series: each metric of an attempt, its downsampling stride and how many points it
--   has received (curves.keeps, curves.thin).
-- metric_points: the kept points, at most v2.progress.max_points per series, keyed by the
--   series' integer id (a third of the cost of a (task, attempt, key, step) key to insert).
CREATE TABLE attempt_progress (
    task_id      TEXT    NOT NULL,
    attempt_no   INTEGER NOT NULL,
    log_offset   INTEGER NOT NULL DEFAULT 0 CHECK (log_offset >= 0),
    step         INTEGER,
    total_steps  INTEGER CHECK (total_steps >= 1),
    resumed_from INTEGER,
    first_step   INTEGER,
    first_at     REAL,
    last_at      REAL,
    rate         REAL,
    eta_at       REAL,
    updated_at   REAL    NOT NULL,
    PRIMARY KEY (task_id, attempt_no)
) WITHOUT ROWID;
CREATE TABLE metric_series (
    series_id  INTEGER PRIMARY KEY,                 -- what the points name (a small key)
    task_id    TEXT    NOT NULL,
    attempt_no INTEGER NOT NULL,
    key        TEXT    NOT NULL,
    stride     INTEGER NOT NULL CHECK (stride >= 1),
    seen       INTEGER NOT NULL CHECK (seen >= 0),
    UNIQUE (task_id, attempt_no, key)
);
CREATE TABLE metric_points (
    series_id INTEGER NOT NULL,
    step      INTEGER NOT NULL,
    value     REAL    NOT NULL,
    PRIMARY KEY (series_id, step)
) WITHOUT ROWID;
