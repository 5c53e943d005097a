-- The named queries whose PostgreSQL text is not the mechanical rewrite of queries.sql's
-- (service/store/sql/translate.py says what that rewrite does). Same names, same
-- parameters (:name), same columns in the same order; PostgreSQL's spelling: the column
-- "user" quoted, no INDEXED BY. Every name here must exist in queries.sql.

-- name: insert_event
-- the new id comes back by RETURNING (SQLite's cursor.lastrowid)
INSERT INTO events (task_id, ts, event_type, payload_json)
VALUES (:task_id, :ts, :event_type, :payload_json)
RETURNING id;

-- name: set_user_enabled
UPDATE users SET enabled = :enabled,
                 disabled_at = CASE WHEN CAST(:enabled AS bigint) <> 0 THEN NULL
                               ELSE CAST(:now AS double precision) END
WHERE name = :name AND enabled != :enabled;

-- JSON: SQLite's json_each(:array) is jsonb_array_elements_text(CAST(:array AS jsonb))
-- (text values: cast where the column is a number); json_extract(x, '$.k') is
-- x::jsonb -> 'k' (a scalar comes back as its Python value) or ->> 'k' (as text).

-- name: webhook_enqueue
INSERT INTO webhook_deliveries (hook_id, event_id, event_type, event_ts, data_json, next_at)
SELECT h.hook_id, :event_id, :event_type, :now, :data_json, :now
FROM webhooks AS h
WHERE h.owner = :owner
  AND jsonb_exists(CAST(h.events AS jsonb), CAST(:event_type AS text));

-- name: user_task_counts
SELECT count(*) AS n FROM tasks
WHERE user = :user
  AND state IN (SELECT value FROM jsonb_array_elements_text(CAST(:states AS jsonb)) AS value);

-- name: queue_positions
-- A ranking of every waiting row, not queries.sql's gaps between the page's rows: PostgreSQL
-- plans those correlated counts with the generic estimate of a range (a third of the
-- table: sequential scans), and their summed cost passes jit_above_cost, so each page paid
-- ~440 ms of JIT compilation (60,000 tasks, 54,000 waiting: 490 ms a page, against 35-43
-- ms for this ranking).
SELECT seq, pos FROM (
    SELECT seq, row_number() OVER (ORDER BY priority DESC, seq) AS pos
    FROM tasks
    WHERE state IN ('QUEUED', 'PENDING_RESOURCES')
) AS ranked
WHERE seq IN (SELECT CAST(value AS bigint)
              FROM jsonb_array_elements_text(CAST(:seqs AS jsonb)) AS value);

-- name: active
SELECT t.task_id, t.state, t.user, t.nnodes, t.n_gpus_per_node, t.cancel_requested_at,
       t.priority, t.preemptions, t.resource_failures, t.max_runtime_s,
       t.spec_json::jsonb -> 'save_freq' AS save_freq,
       t.spec_json,
       a.attempt_no, a.ray_submission_id, a.ray_status, a.message, a.start_time,
       a.submitted_at, a.stop_requested, a.preempted_for,
       a.created_at - t.runnable_since AS waited_s
FROM tasks t
JOIN attempts a ON a.task_id = t.task_id AND a.attempt_no = t.latest_attempt_no
WHERE t.state IN ('SUBMITTING', 'SUBMITTED', 'RUNNING')
ORDER BY t.seq;

-- name: mark_pending
UPDATE tasks SET state = :to_state, pending_reason = w.reason, reason_kind = w.kind,
                 updated_at = :now, next_run_at = coalesce(:next_run_at, tasks.next_run_at)
FROM (SELECT value ->> 0 AS task_id, value ->> 1 AS reason, value ->> 2 AS kind
      FROM jsonb_array_elements(CAST(:items AS jsonb)) AS value) AS w
WHERE tasks.task_id = w.task_id AND tasks.state = :from_state
RETURNING tasks.task_id, tasks.pending_reason;

-- name: insert_pending_events
INSERT INTO events (task_id, ts, event_type, payload_json)
SELECT value ->> 0, :now, 'STATE_TRANSITION',
       jsonb_build_object('from', CAST(:from_state AS text), 'reason', value ->> 1,
                          'to', CAST(:to_state AS text))::text
FROM jsonb_array_elements(CAST(:moved AS jsonb)) AS value;

-- name: list_tasks_by_labels
SELECT {task_columns}
FROM tasks t
{latest_attempt}
WHERE t.seq < :before_seq
  AND (:state IS NULL OR t.state = :state) AND (:user IS NULL OR t.user = :user)
  AND (:reason IS NULL OR (t.state IN ('QUEUED', 'PENDING_RESOURCES')
                           AND coalesce(t.reason_kind, 'new') = :reason))
  AND coalesce(t.spec_json::jsonb -> 'labels', '{}'::jsonb) @> CAST(:labels AS jsonb)
ORDER BY t.seq DESC LIMIT :limit;

-- name: queue_pending_page
SELECT q.*, (SELECT (l.spec_json::jsonb -> 'labels')::text FROM tasks l WHERE l.seq = q.seq
            ) AS labels_json FROM (
    SELECT t.seq, t.task_id, t.state, t.workload, t.user, t.nnodes, t.n_gpus_per_node,
           t.created_at, t.updated_at, t.next_run_at, t.runnable_since, t.error_summary,
           t.pending_reason, t.reason_kind, t.cancel_requested_at, t.latest_attempt_no, t.priority,
           row_number() OVER (ORDER BY t.priority DESC, t.seq) AS queue_position
    FROM tasks t
    WHERE t.state IN ('QUEUED', 'PENDING_RESOURCES')
) q
WHERE (:user IS NULL OR q.user = :user) AND (:workload IS NULL OR q.workload = :workload)
  AND (:reason IS NULL OR coalesce(q.reason_kind, 'new') = :reason)
ORDER BY q.queue_position LIMIT :limit OFFSET :offset;

-- name: insert_sample
INSERT INTO samples (ts, pending, running, gpus_used, gpus_total)
VALUES (:ts, :pending, :running, :gpus_used, :gpus_total)
ON CONFLICT (ts) DO UPDATE SET pending = excluded.pending, running = excluded.running,
    gpus_used = excluded.gpus_used, gpus_total = excluded.gpus_total;

-- name: usage_parts
SELECT task_id, user, sum(secs) AS gpu_seconds,
       sum(CASE WHEN failure_kind IS NOT NULL THEN secs ELSE 0.0 END) AS failed_gpu_seconds,
       count(*) AS attempts, sum(CASE WHEN end_time IS NULL THEN 1 ELSE 0 END) AS running_attempts,
       max(whole) AS whole_gpu_seconds
FROM (
    SELECT task_id, user, failure_kind, end_time, whole, gpus * (hi - lo) AS secs FROM (
        SELECT task_id, user, gpus, failure_kind, end_time, whole,
               max(start_time, :from) AS lo,
               max(min(coalesce(end_time, :now), :to), max(start_time, :from)) AS hi
        FROM (
            SELECT a.task_id, t.user, t.nnodes * t.n_gpus_per_node AS gpus, a.failure_kind,
                   a.start_time, a.end_time, CAST(NULL AS double precision) AS whole
            FROM attempts a
            JOIN tasks t ON t.task_id = a.task_id
            WHERE a.task_id IN (SELECT value
                                FROM jsonb_array_elements_text(CAST(:edges AS jsonb)) AS value)
              AND a.end_time > :from AND a.start_time < :to
            UNION ALL
            SELECT a.task_id, t.user, t.nnodes * t.n_gpus_per_node AS gpus, a.failure_kind,
                   a.start_time, a.end_time,
                   (SELECT gpu_seconds FROM task_usage
                    WHERE task_id = a.task_id AND {inside_window}) AS whole
            FROM attempts a
            JOIN tasks t ON t.task_id = a.task_id
            WHERE a.end_time IS NULL AND a.start_time < :to
              AND t.state IN ('SUBMITTING', 'SUBMITTED', 'RUNNING')
              AND (:user IS NULL OR t.user = :user)
        ) AS spans
    ) AS clipped WHERE hi > lo
) AS parts
GROUP BY task_id, user;

-- name: usage_spans_of_tasks
SELECT a.task_id, a.attempt_no, t.user, t.nnodes * t.n_gpus_per_node AS gpus,
       a.start_time, a.end_time, a.ray_status, a.failure_kind
FROM attempts a
JOIN tasks t ON t.task_id = a.task_id
WHERE a.task_id IN (SELECT value
                    FROM jsonb_array_elements_text(CAST(:task_ids AS jsonb)) AS value)
  AND a.start_time < :to
  AND (a.end_time > :from
       OR (a.end_time IS NULL AND t.state IN ('SUBMITTING', 'SUBMITTED', 'RUNNING')));

-- name: follow_state
SELECT t.spec_json::jsonb -> 'total_training_steps' AS jobspec_total,
       p.log_offset, p.step, p.total_steps, p.resumed_from, p.first_step, p.first_at,
       p.last_at
FROM tasks t
LEFT JOIN attempt_progress p ON p.task_id = t.task_id AND p.attempt_no = :attempt_no
WHERE t.task_id = :task_id;

-- name: put_point
INSERT INTO metric_points (series_id, step, value)
VALUES (:series_id, :step, :value)
ON CONFLICT (series_id, step) DO UPDATE SET value = excluded.value;

-- name: task_progress
SELECT t.task_id, t.state, t.spec_json::jsonb -> 'total_training_steps' AS jobspec_total,
       p.attempt_no, p.step, p.total_steps, p.resumed_from, p.first_step, p.first_at,
       p.last_at, p.rate, p.eta_at, p.updated_at
FROM tasks t
JOIN attempt_progress p ON p.task_id = t.task_id AND p.attempt_no = t.latest_attempt_no
WHERE t.task_id = :task_id;

-- name: active_progress
SELECT t.task_id, t.state, t.spec_json::jsonb -> 'total_training_steps' AS jobspec_total,
       p.attempt_no, p.step, p.total_steps, p.resumed_from, p.first_step, p.first_at,
       p.last_at, p.rate, p.eta_at, p.updated_at
FROM tasks t
JOIN attempt_progress p ON p.task_id = t.task_id AND p.attempt_no = t.latest_attempt_no
WHERE t.state IN ('SUBMITTING', 'SUBMITTED', 'RUNNING');

-- name: metric_points
SELECT s.attempt_no, s.key, m.step, m.value
FROM metric_series s
JOIN metric_points m ON m.series_id = s.series_id
WHERE s.task_id = :task_id
  AND s.key IN (SELECT value FROM jsonb_array_elements_text(CAST(:keys AS jsonb)) AS value)
ORDER BY s.attempt_no, s.key, m.step;

-- name: webhook_tries_of
SELECT delivery_id, attempt, at, status, error FROM webhook_tries
WHERE delivery_id IN (SELECT CAST(value AS bigint)
                      FROM jsonb_array_elements_text(CAST(:ids AS jsonb)) AS value)
ORDER BY delivery_id, attempt;

-- name: woken_deps
SELECT t.task_id, t.user,
       coalesce(t.spec_json::jsonb ->> 'on_unsatisfiable', 'cancel') AS on_unsatisfiable,
       d.parent_id, d.condition, p.state AS parent_state,
       s.pipeline_id, s.stage, s.template_json
FROM tasks t
JOIN task_deps d ON d.task_id = t.task_id
JOIN tasks p ON p.task_id = d.parent_id
LEFT JOIN pipeline_stages s ON s.task_id = t.task_id
WHERE t.task_id IN (SELECT task_id FROM dep_wakeups WHERE id <= :upto)
  AND t.state = 'BLOCKED'
ORDER BY t.seq;

-- name: deps_of_tasks
SELECT d.task_id, d.parent_id, d.condition, p.state AS parent_state
FROM task_deps d JOIN tasks p ON p.task_id = d.parent_id
WHERE d.task_id IN (SELECT value FROM jsonb_array_elements_text(CAST(:ids AS jsonb)) AS value);

-- name: task_on_unsatisfiable
SELECT coalesce(spec_json::jsonb ->> 'on_unsatisfiable', 'cancel') AS on_unsatisfiable
FROM tasks WHERE task_id = :task_id;

-- Times that may be NULL are cast: PostgreSQL cannot type NULL - NULL.

-- name: add_gpu_seconds
INSERT INTO user_gpu_seconds (user, gpu_seconds)
SELECT t.user, max(0.0, CAST(:end_time AS double precision)
                        - CAST(:start_time AS double precision)) * t.nnodes * t.n_gpus_per_node
FROM tasks t
WHERE t.task_id = :task_id AND t.user IS NOT NULL AND :start_time IS NOT NULL
  AND :end_time IS NOT NULL
ON CONFLICT (user) DO UPDATE SET gpu_seconds = gpu_seconds + excluded.gpu_seconds;

-- name: add_task_usage
INSERT INTO task_usage (task_id, user, gpu_seconds, failed_gpu_seconds, attempts,
                        first_start, last_end)
SELECT t.task_id, t.user,
       (CAST(:end_time AS double precision) - CAST(:start_time AS double precision))
       * t.nnodes * t.n_gpus_per_node,
       CASE WHEN :failure_kind IS NOT NULL
            THEN (CAST(:end_time AS double precision) - CAST(:start_time AS double precision))
                 * t.nnodes * t.n_gpus_per_node ELSE 0.0 END, 1,
       :start_time, :end_time
FROM tasks t
WHERE t.task_id = :task_id AND :start_time IS NOT NULL
  AND CAST(:end_time AS double precision) > CAST(:start_time AS double precision)
ON CONFLICT (task_id) DO UPDATE SET
    gpu_seconds = gpu_seconds + excluded.gpu_seconds,
    failed_gpu_seconds = failed_gpu_seconds + excluded.failed_gpu_seconds,
    attempts = attempts + 1,
    first_start = min(first_start, excluded.first_start),
    last_end = max(last_end, excluded.last_end);

-- name: webhook_enqueue_admins
INSERT INTO webhook_deliveries (hook_id, event_id, event_type, event_ts, data_json, next_at)
SELECT h.hook_id, :event_id, :event_type, :now, :data_json, :now
FROM users AS u JOIN webhooks AS h ON h.owner = u.name
WHERE u.role = 'admin' AND u.enabled = 1
  AND jsonb_exists(CAST(h.events AS jsonb), CAST(:event_type AS text));

-- name: node_event_insert
-- the new id comes back by RETURNING (SQLite's cursor.lastrowid)
INSERT INTO node_events (name, ts, kind, source, by_user, reason)
VALUES (:name, :ts, :kind, :source, :by_user, :reason)
RETURNING id;

-- fragment: task_place
-- As queries.sql's (this file's texts get this one). jsonb_agg for SQLite's
-- json_group_array, read back as the same text ('[]': no nodes). The queue position is
-- queries.sql's rows_ahead, its INDEXED BY dropped: PostgreSQL too read one count of
-- "priority > p OR (priority = p AND seq < s)" badly, as a bitmap scan that visits the
-- table's page of every waiting row ahead (0.73 ms with 500 ahead, against 0.10 for the
-- two ranges, which read the index alone where the visibility map allows).
CASE WHEN t.state IN ('QUEUED', 'PENDING_RESOURCES') THEN 1 + {rows_ahead}
END AS queue_position,
(SELECT coalesce(jsonb_agg(jsonb_build_array(name, role, gpus, seen_at))::text, '[]')
 FROM attempt_nodes
 WHERE task_id = t.task_id AND attempt_no = t.latest_attempt_no) AS latest_nodes

-- name: get_task
SELECT {task_columns}, {task_place}
FROM tasks t
{latest_attempt}
WHERE t.task_id = :task_id;

-- name: task_page
-- As SQLite's text, with this file's task_place (its two counts) and jsonb.
SELECT {task_columns}, {task_place},
       t.spec_json::jsonb -> 'total_training_steps' AS jobspec_total,
       {page_progress},
       coalesce(t.spec_json::jsonb ->> 'on_unsatisfiable', 'cancel') AS on_unsatisfiable,
       s.pipeline_id AS stage_pipeline_id, s.stage AS stage_name,
       EXISTS (SELECT 1 FROM task_deps d WHERE d.task_id = t.task_id) AS has_deps
FROM tasks t
{latest_attempt}
LEFT JOIN attempt_progress p ON p.task_id = t.task_id AND p.attempt_no = t.latest_attempt_no
LEFT JOIN pipeline_stages s ON s.task_id = t.task_id
WHERE t.task_id = :task_id;

-- name: runnable_of_user
-- As runnable, of one owner (tasks_user_runnable). Not "user" IS NOT DISTINCT FROM :user,
-- the rewrite of SQLite's IS, which PostgreSQL cannot look up in an index: it scanned
-- every runnable row for each owner, each tick. The owner NULL (tasks from before users
-- existed) is the second branch; one of the two is empty.
SELECT * FROM (
    (SELECT seq, task_id, state, "user", nnodes, n_gpus_per_node, runnable_since,
            pending_reason, reason_kind, priority, retry_not_before, latest_attempt_no,
            max_runtime_s
     FROM tasks
     WHERE "user" = CAST(:user AS text) AND state IN ('QUEUED', 'PENDING_RESOURCES')
       AND next_run_at <= :now
     ORDER BY priority DESC, seq LIMIT :limit)
    UNION ALL
    (SELECT seq, task_id, state, "user", nnodes, n_gpus_per_node, runnable_since,
            pending_reason, reason_kind, priority, retry_not_before, latest_attempt_no,
            max_runtime_s
     FROM tasks
     WHERE "user" IS NULL AND CAST(:user AS text) IS NULL
       AND state IN ('QUEUED', 'PENDING_RESOURCES') AND next_run_at <= :now
     ORDER BY priority DESC, seq LIMIT :limit)
) AS mine
ORDER BY priority DESC, seq;
