-- Every statement of the task store (service/store.py), by name.
--
-- Partial indexes: SQLite uses tasks_runnable / tasks_active only when a query repeats the
-- index's WHERE term word for word, so the queries over runnable or active rows below
-- spell it out literally (state IN ('QUEUED', 'PENDING_RESOURCES') and
-- state IN ('SUBMITTING', 'SUBMITTED', 'RUNNING')) and name the index with INDEXED BY: the
-- planner cannot fall back to sorting tasks_state_seq, and SQLite refuses the statement
-- outright if the terms ever drift apart from schema.sql.
--
-- Task reads return the task's columns and its latest attempt's (NULL without one); the
-- attempt's created_at is renamed attempt_created_at wherever both tables are read. A
-- runnable task's queue_position (1-based, in admission order: priority first, then FIFO)
-- is two indexed counts of the runnable rows ahead of it (task_place), evaluated only for
-- runnable rows; it is NULL for the others. (Fair share reorders users of one priority
-- tick by tick: the position is the priority-and-FIFO order the pending reason explains
-- departures from.)

-- tasks: create and read ------------------------------------------------------------------

-- fragment: task_columns
-- A task as every task read returns it (service.store.reads.task_row decodes it by name):
-- the task's columns and its latest attempt's, the attempt's created_at renamed. A new
-- task column is added here once; a JobSpec field shown with the task is not: {shown_spec}
-- (made from the declaration, service.store.sql.shown_spec) reads each from the stored
-- JSON (TaskRow.spec). Used with {latest_attempt} (a) after FROM tasks t.
t.seq, t.task_id, t.state, t.workload, t.user, t.nnodes, t.n_gpus_per_node,
t.created_at, t.updated_at, t.next_run_at, t.error_summary, t.pending_reason, t.reason_kind,
t.cancel_requested_at, t.priority, t.max_runtime_s, {shown_spec},
a.attempt_no, a.ray_submission_id, a.ray_status, a.failure_kind, a.message,
a.created_at AS attempt_created_at, a.submitted_at, a.start_time, a.end_time,
a.exit_code, a.stop_requested, a.preempted_for

-- fragment: latest_attempt
LEFT JOIN attempts a ON a.task_id = t.task_id AND a.attempt_no = t.latest_attempt_no

-- name: insert_task
INSERT INTO tasks (task_id, workload, state, jobspec_yaml, spec_json, nnodes, n_gpus_per_node,
                   user, created_at, updated_at, next_run_at, runnable_since, priority,
                   max_runtime_s)
VALUES (:task_id, :workload, :state, :jobspec_yaml, :spec_json, :nnodes, :n_gpus_per_node,
        :user, :now, :now, :now, :now, :priority, :max_runtime_s);

-- name: idempotency_key
-- An Idempotency-Key of a user (service.store.idempotency), in the submit's transaction.
SELECT fingerprint, result_json, created_at FROM idempotency_keys
WHERE user = :user AND key = :key;

-- name: insert_idempotency_key
INSERT INTO idempotency_keys (user, key, fingerprint, result_json, created_at)
VALUES (:user, :key, :fingerprint, :result_json, :created_at);

-- name: purge_idempotency_keys
-- Keys past their retention, a bounded batch at a time (each new key purges up to
-- :limit: the purge keeps ahead of the inserts without one long transaction).
DELETE FROM idempotency_keys WHERE (user, key) IN (
    SELECT user, key FROM idempotency_keys WHERE created_at < :before LIMIT :limit);

-- name: task_exists
SELECT 1 AS found FROM tasks WHERE task_id = :task_id;

-- name: task_state
SELECT state FROM tasks WHERE task_id = :task_id;

-- fragment: rows_ahead
-- The waiting rows ahead of the waiting task t (its priority and seq) in admission order:
-- two counts, each a range of tasks_runnable (priority DESC, seq), the rows of a higher
-- priority, then those of its own ahead of it. SQLite reads the one count of
-- "priority > p OR (priority = p AND seq < s)" as the range priority >= p, every waiting
-- row of its priority and above whatever the task's place: 2.0 ms a read at 25,000
-- waiting for the first of them as for the last, against 0.007 ms (first), 0.45 (middle),
-- 0.95 (last) for the two ranges. (PostgreSQL's text, INDEXED BY dropped, too.)
(
    SELECT count(*) FROM tasks r INDEXED BY tasks_runnable
    WHERE r.state IN ('QUEUED', 'PENDING_RESOURCES') AND r.priority > t.priority
) + (
    SELECT count(*) FROM tasks r INDEXED BY tasks_runnable
    WHERE r.state IN ('QUEUED', 'PENDING_RESOURCES') AND r.priority = t.priority
      AND r.seq < t.seq
)

-- fragment: task_place
-- One task's queue position (a waiting task's: 1 + rows_ahead) and its latest attempt's
-- nodes as a JSON array of [name, role, gpus, seen_at] (in the primary key's order:
-- service.store.placement orders them): get_task and task_page. Used after FROM tasks t.
CASE WHEN t.state IN ('QUEUED', 'PENDING_RESOURCES') THEN 1 + {rows_ahead}
END AS queue_position,
(SELECT json_group_array(json_array(name, role, gpus, seen_at)) FROM attempt_nodes
 WHERE task_id = t.task_id AND attempt_no = t.latest_attempt_no) AS latest_nodes

-- fragment: page_progress
-- The latest attempt's progress as a task's page reads it (p_*: NULL when never
-- followed), from attempt_progress p joined on the task's latest attempt.
p.attempt_no AS p_attempt_no, p.step AS p_step, p.total_steps AS p_total_steps,
p.resumed_from AS p_resumed_from, p.first_step AS p_first_step,
p.first_at AS p_first_at, p.last_at AS p_last_at, p.rate AS p_rate,
p.eta_at AS p_eta_at, p.updated_at AS p_updated_at

-- name: get_task
SELECT {task_columns}, {task_place}
FROM tasks t
{latest_attempt}
WHERE t.task_id = :task_id;

-- name: task_page
-- A task's page in one statement (GET /api/v2/tasks/{id}, the console's task page): the
-- row of get_task, the progress of its latest attempt (p_*, as task_progress: NULL when
-- never followed), what it does when its dependencies cannot hold (task_on_unsatisfiable),
-- its pipeline stage (stage_of_task) and whether it has dependencies at all (their rows,
-- deps_of_task, are read only then). Five statements before: on PostgreSQL each cost the
-- server and psycopg about as much as the task's own row.
SELECT {task_columns}, {task_place},
       json_extract(t.spec_json, '$.total_training_steps') AS jobspec_total,
       {page_progress},
       coalesce(json_extract(t.spec_json, '$.on_unsatisfiable'), 'cancel') AS on_unsatisfiable,
       s.pipeline_id AS stage_pipeline_id, s.stage AS stage_name,
       EXISTS (SELECT 1 FROM task_deps d WHERE d.task_id = t.task_id) AS has_deps
FROM tasks t
{latest_attempt}
LEFT JOIN attempt_progress p ON p.task_id = t.task_id AND p.attempt_no = t.latest_attempt_no
LEFT JOIN pipeline_stages s ON s.task_id = t.task_id
WHERE t.task_id = :task_id;

-- name: list_tasks
-- Newest first, one page: rows before :before_seq (the page's cursor). The runnable rows'
-- queue positions are read for the whole page at once (queue_positions), not per row.
SELECT {task_columns}
FROM tasks t
{latest_attempt}
WHERE t.seq < :before_seq
ORDER BY t.seq DESC LIMIT :limit;

-- name: list_tasks_in_state
-- As list_tasks, in one state (walks tasks_state_seq).
SELECT {task_columns}
FROM tasks t
{latest_attempt}
WHERE t.state = :state AND t.seq < :before_seq
ORDER BY t.seq DESC LIMIT :limit;

-- name: list_tasks_of_user
-- As list_tasks, of one owner (walks tasks_user_seq).
SELECT {task_columns}
FROM tasks t INDEXED BY tasks_user_seq
{latest_attempt}
WHERE t.user = :user AND t.seq < :before_seq
ORDER BY t.seq DESC LIMIT :limit;

-- name: list_tasks_of_user_in_state
-- As list_tasks, of one owner in one state (walks tasks_user_state_seq).
SELECT {task_columns}
FROM tasks t INDEXED BY tasks_user_state_seq
{latest_attempt}
WHERE t.user = :user AND t.state = :state AND t.seq < :before_seq
ORDER BY t.seq DESC LIMIT :limit;

-- name: list_tasks_by_labels
-- As list_tasks, the tasks whose JobSpec has every label of :labels (a JSON object of
-- key: value; json_each over the stored spec), in :state, of :user, waiting for a reason
-- of kind :reason, each when given (NULL: any). No index: it walks seq down to the page.
SELECT {task_columns}
FROM tasks t
{latest_attempt}
WHERE t.seq < :before_seq
  AND (:state IS NULL OR t.state = :state) AND (:user IS NULL OR t.user = :user)
  AND (:reason IS NULL OR (t.state IN ('QUEUED', 'PENDING_RESOURCES')
                           AND coalesce(t.reason_kind, 'new') = :reason))
  AND NOT EXISTS (
      SELECT 1 FROM json_each(:labels) f
      WHERE NOT EXISTS (SELECT 1 FROM json_each(t.spec_json, '$.labels') l
                        WHERE l.key = f.key AND l.value = f.value))
ORDER BY t.seq DESC LIMIT :limit;

-- name: queue_positions
-- The queue positions of the runnable tasks among :seqs (a JSON array of seq), in one
-- statement, without ranking the whole queue: the page's waiting rows in admission order
-- (ordered, a sort of the page alone), each one's gap to the one before it (the first: the
-- rows ahead of it, rows_ahead's two counts for the row o (that fragment reads t, a name
-- the plan test keeps for the tasks table); the next ones: the rows between the two, one
-- to three ranges of tasks_runnable), the positions the running sum of the gaps. The
-- index is walked once up to the page's last row at most, where a ranking of every waiting
-- row cost about a microsecond a row (27.6 ms a page at 56,772 waiting, against 0.34 ms
-- for a page at the front of the queue and 2.3 ms at its back). PostgreSQL keeps the
-- ranking (its text says why).
WITH ordered AS (
    SELECT t.seq, t.priority,
           lag(t.priority) OVER w AS prev_priority, lag(t.seq) OVER w AS prev_seq
    FROM tasks t
    WHERE t.seq IN (SELECT value FROM json_each(:seqs))
      AND t.state IN ('QUEUED', 'PENDING_RESOURCES')
    WINDOW w AS (ORDER BY t.priority DESC, t.seq)
), gaps AS (
    SELECT o.seq, o.priority, 1 + CASE
        WHEN o.prev_seq IS NULL THEN (
            SELECT count(*) FROM tasks r INDEXED BY tasks_runnable
            WHERE r.state IN ('QUEUED', 'PENDING_RESOURCES') AND r.priority > o.priority
        ) + (
            SELECT count(*) FROM tasks r INDEXED BY tasks_runnable
            WHERE r.state IN ('QUEUED', 'PENDING_RESOURCES')
              AND r.priority = o.priority AND r.seq < o.seq)
        WHEN o.prev_priority = o.priority THEN (
            SELECT count(*) FROM tasks r INDEXED BY tasks_runnable
            WHERE r.state IN ('QUEUED', 'PENDING_RESOURCES')
              AND r.priority = o.priority AND r.seq > o.prev_seq AND r.seq < o.seq)
        ELSE (
            SELECT count(*) FROM tasks r INDEXED BY tasks_runnable
            WHERE r.state IN ('QUEUED', 'PENDING_RESOURCES')
              AND r.priority = o.prev_priority AND r.seq > o.prev_seq
        ) + (
            SELECT count(*) FROM tasks r INDEXED BY tasks_runnable
            WHERE r.state IN ('QUEUED', 'PENDING_RESOURCES')
              AND r.priority < o.prev_priority AND r.priority > o.priority
        ) + (
            SELECT count(*) FROM tasks r INDEXED BY tasks_runnable
            WHERE r.state IN ('QUEUED', 'PENDING_RESOURCES')
              AND r.priority = o.priority AND r.seq < o.seq)
    END AS gap
    FROM ordered o
)
SELECT seq, sum(gap) OVER (ORDER BY priority DESC, seq) AS pos FROM gaps;

-- name: queue_pending
-- One page of the queue in admission order (OFFSET walks the index: no sort).
SELECT {task_columns}
FROM tasks t INDEXED BY tasks_runnable
{latest_attempt}
WHERE t.state IN ('QUEUED', 'PENDING_RESOURCES')
ORDER BY t.priority DESC, t.seq LIMIT :limit OFFSET :offset;

-- name: queue_pending_of_user
-- One page of :user's part of the queue in admission order (tasks_user_runnable).
SELECT {task_columns}
FROM tasks t INDEXED BY tasks_user_runnable
{latest_attempt}
WHERE t.user = :user AND t.state IN ('QUEUED', 'PENDING_RESOURCES')
ORDER BY t.priority DESC, t.seq LIMIT :limit OFFSET :offset;

-- name: queue_pending_by_reason
-- One page of the waiting tasks whose reason is of kind :reason ('new': none yet), of :user
-- when given (NULL: any), in admission order; positions are read apart (queue_positions).
SELECT {task_columns}
FROM tasks t INDEXED BY tasks_runnable
{latest_attempt}
WHERE t.state IN ('QUEUED', 'PENDING_RESOURCES') AND coalesce(t.reason_kind, 'new') = :reason
  AND (:user IS NULL OR t.user = :user)
ORDER BY t.priority DESC, t.seq LIMIT :limit OFFSET :offset;

-- name: list_tasks_by_reason
-- As list_tasks, the waiting tasks whose reason is of kind :reason, in :state when given,
-- of :user when given (NULL: any). Only runnable rows can match: it walks tasks_runnable.
SELECT {task_columns}
FROM tasks t INDEXED BY tasks_runnable
{latest_attempt}
WHERE t.state IN ('QUEUED', 'PENDING_RESOURCES') AND t.seq < :before_seq
  AND (:state IS NULL OR t.state = :state) AND coalesce(t.reason_kind, 'new') = :reason
  AND (:user IS NULL OR t.user = :user)
ORDER BY t.seq DESC LIMIT :limit;

-- name: queue_running
SELECT {task_columns}
FROM tasks t INDEXED BY tasks_active
{latest_attempt}
WHERE t.state IN ('SUBMITTING', 'SUBMITTED', 'RUNNING')
ORDER BY t.seq;

-- name: counts_by_state
-- The trigger-kept counts (migration 0011): a few rows, however many tasks there are.
SELECT state, sum(n) AS n FROM task_counts GROUP BY state;

-- name: counts_by_user_and_state
SELECT nullif(user, '') AS user, state, n FROM task_counts WHERE n > 0;

-- attempts and events ------------------------------------------------------------------------

-- name: list_attempts
SELECT a.task_id, a.attempt_no, a.ray_submission_id, a.ray_status, a.failure_kind, a.message,
       a.created_at AS attempt_created_at, a.submitted_at, a.start_time, a.end_time,
       a.exit_code, a.stop_requested, a.preempted_for
FROM attempts a WHERE a.task_id = :task_id
ORDER BY a.attempt_no;

-- name: get_attempt
SELECT a.task_id, a.attempt_no, a.ray_submission_id, a.ray_status, a.failure_kind, a.message,
       a.created_at AS attempt_created_at, a.submitted_at, a.start_time, a.end_time,
       a.exit_code, a.stop_requested, a.preempted_for
FROM attempts a WHERE a.task_id = :task_id AND a.attempt_no = :attempt_no;

-- name: get_latest_attempt
SELECT a.task_id, a.attempt_no, a.ray_submission_id, a.ray_status, a.failure_kind, a.message,
       a.created_at AS attempt_created_at, a.submitted_at, a.start_time, a.end_time,
       a.exit_code, a.stop_requested, a.preempted_for
FROM tasks t
JOIN attempts a ON a.task_id = t.task_id AND a.attempt_no = t.latest_attempt_no
WHERE t.task_id = :task_id;

-- name: insert_attempt
INSERT INTO attempts (task_id, attempt_no, ray_submission_id, created_at)
VALUES (:task_id, :attempt_no, :ray_submission_id, :now);

-- name: insert_ended_attempt
-- Benchmarks and large fixtures only (Store.bulk_load): attempt 1, already ended.
INSERT INTO attempts (task_id, attempt_no, ray_submission_id, ray_status, created_at,
                      submitted_at, start_time, end_time)
VALUES (:task_id, 1, :ray_submission_id, :ray_status, :start_time, :start_time,
        :start_time, :end_time);

-- name: insert_event
INSERT INTO events (task_id, ts, event_type, payload_json)
VALUES (:task_id, :ts, :event_type, :payload_json);

-- name: list_events
SELECT id, task_id, ts, event_type, payload_json FROM events
WHERE task_id = :task_id
ORDER BY id;

-- cancel -------------------------------------------------------------------------------------

-- name: cancel_target
SELECT t.state, t.user, t.cancel_requested_at, t.priority, a.ray_submission_id
FROM tasks t
{latest_attempt}
WHERE t.task_id = :task_id;

-- name: flag_cancel
-- An active task: the scheduler stops its attempt and finishes the cancel.
UPDATE tasks SET cancel_requested_at = :now, updated_at = :now
WHERE task_id = :task_id AND state = :expected;

-- scheduler reads ----------------------------------------------------------------------------

-- name: runnable
-- Admission order (priority, then FIFO), up to :limit runnable tasks due by :now (a scan
-- of tasks_runnable only).
SELECT seq, task_id, state, user, nnodes, n_gpus_per_node, runnable_since, pending_reason, reason_kind,
       priority, retry_not_before, latest_attempt_no, max_runtime_s
FROM tasks INDEXED BY tasks_runnable
WHERE state IN ('QUEUED', 'PENDING_RESOURCES') AND next_run_at <= :now
ORDER BY priority DESC, seq LIMIT :limit;

-- name: runnable_users
-- The owners of runnable tasks, one index seek each (a skip scan of tasks_user_runnable,
-- never a walk over the queue); NULL last when tasks from before users are runnable.
WITH RECURSIVE owners(user) AS (
    SELECT (SELECT min(user) FROM tasks INDEXED BY tasks_user_runnable
            WHERE state IN ('QUEUED', 'PENDING_RESOURCES'))
    UNION ALL
    SELECT (SELECT min(r.user) FROM tasks r INDEXED BY tasks_user_runnable
            WHERE r.state IN ('QUEUED', 'PENDING_RESOURCES') AND r.user > o.user)
    FROM owners o WHERE o.user IS NOT NULL
)
SELECT user FROM owners WHERE user IS NOT NULL
UNION ALL
SELECT NULL FROM (SELECT 1 FROM tasks INDEXED BY tasks_user_runnable
                  WHERE state IN ('QUEUED', 'PENDING_RESOURCES') AND user IS NULL LIMIT 1);

-- name: runnable_of_user
-- As runnable, of one owner (tasks_user_runnable).
SELECT seq, task_id, state, user, nnodes, n_gpus_per_node, runnable_since, pending_reason, reason_kind,
       priority, retry_not_before, latest_attempt_no, max_runtime_s
FROM tasks INDEXED BY tasks_user_runnable
WHERE user IS :user AND state IN ('QUEUED', 'PENDING_RESOURCES') AND next_run_at <= :now
ORDER BY priority DESC, seq LIMIT :limit;

-- name: active
-- SUBMITTING / SUBMITTED / RUNNING tasks with their latest attempt (tasks_active only).
-- save_freq: whether the task writes checkpoints (preemption spares those that do not);
-- waited_s: how long the task had waited when this attempt was claimed (a retry keeps it).
-- spec_json: the JobSpec as stored (ActiveRow.spec decodes it when asked: an attempt's end).
SELECT t.task_id, t.state, t.user, t.nnodes, t.n_gpus_per_node, t.cancel_requested_at,
       t.priority, t.preemptions, t.resource_failures, t.max_runtime_s,
       json_extract(t.spec_json, '$.save_freq') AS save_freq,
       t.spec_json,
       a.attempt_no, a.ray_submission_id, a.ray_status, a.message, a.start_time,
       a.submitted_at, a.stop_requested, a.preempted_for,
       a.created_at - t.runnable_since AS waited_s
FROM tasks t INDEXED BY tasks_active
JOIN attempts a ON a.task_id = t.task_id AND a.attempt_no = t.latest_attempt_no
WHERE t.state IN ('SUBMITTING', 'SUBMITTED', 'RUNNING')
ORDER BY t.seq;

-- name: claim_target
SELECT t.latest_attempt_no, a.submitted_at, t.jobspec_yaml, t.spec_json, t.priority,
       t.max_runtime_s, t.user
FROM tasks t
{latest_attempt}
WHERE t.task_id = :task_id;

-- name: cancel_requested_at
SELECT cancel_requested_at FROM tasks WHERE task_id = :task_id;

-- state transitions --------------------------------------------------------------------------
-- Each is a compare-and-set: it moves the row only from the :expected state (zero rows
-- changed means the task moved meanwhile). The store checks the move against the one
-- transition table first and writes its event in the same transaction.

-- name: move
UPDATE tasks SET state = :dst, updated_at = :now
WHERE task_id = :task_id AND state = :expected;

-- name: move_claimed
-- Runnable -> SUBMITTING for attempt :attempt_no.
UPDATE tasks SET state = :dst, updated_at = :now, latest_attempt_no = :attempt_no,
                 pending_reason = NULL, reason_kind = NULL, retry_not_before = NULL
WHERE task_id = :task_id AND state = :expected;

-- name: move_released
-- SUBMITTING -> PENDING_RESOURCES: Ray never accepted the attempt; due again at once.
UPDATE tasks SET state = :dst, updated_at = :now, pending_reason = :reason,
                 reason_kind = :reason_kind, next_run_at = :now
WHERE task_id = :task_id AND state = :expected;

-- name: move_retry
-- Back to PENDING_RESOURCES after a retryable failure: scanned again from :next_run_at,
-- submitted not before :retry_not_before (NULL: as soon as it fits), waiting (for the
-- starvation guard and the wait metrics) since :runnable_since.
UPDATE tasks SET state = :dst, updated_at = :now, pending_reason = :reason,
                 reason_kind = :reason_kind,
                 next_run_at = :next_run_at, runnable_since = :runnable_since,
                 retry_not_before = :retry_not_before,
                 resource_failures = :resource_failures, preemptions = :preemptions
WHERE task_id = :task_id AND state = :expected;

-- name: set_priority
-- A waiting task's priority (guarded like a transition: zero rows, it moved meanwhile).
UPDATE tasks SET priority = :priority, updated_at = :now
WHERE task_id = :task_id AND state = :expected;

-- name: move_ended
-- To a terminal state.
UPDATE tasks SET state = :dst, updated_at = :now, error_summary = :error_summary,
                 pending_reason = NULL, reason_kind = NULL
WHERE task_id = :task_id AND state = :expected;

-- name: move_canceled
-- A runnable task canceled by request.
UPDATE tasks SET state = :dst, updated_at = :now, error_summary = :error_summary,
                 pending_reason = NULL, reason_kind = NULL, cancel_requested_at = :now
WHERE task_id = :task_id AND state = :expected;

-- name: mark_pending
-- Why runnable tasks in state :from_state wait, for a batch of [task_id, reason] pairs (a
-- JSON array): one statement per state, however many reasons. The unary +state keeps
-- SQLite on the task_id index: left to itself it walks the state index, i.e. every
-- runnable row. Only the rows the guard let through come back.
UPDATE tasks SET state = :to_state, pending_reason = w.reason, reason_kind = w.kind,
                 updated_at = :now, next_run_at = coalesce(:next_run_at, tasks.next_run_at)
FROM (SELECT json_extract(value, '$[0]') AS task_id, json_extract(value, '$[1]') AS reason,
             json_extract(value, '$[2]') AS kind
      FROM json_each(:items)) AS w
WHERE tasks.task_id = w.task_id AND +tasks.state = :from_state
RETURNING task_id, pending_reason;

-- name: insert_pending_events
-- The STATE_TRANSITION events of the tasks mark_pending moved ([task_id, reason] pairs).
INSERT INTO events (task_id, ts, event_type, payload_json)
SELECT json_extract(value, '$[0]'), :now, 'STATE_TRANSITION',
       json_object('from', :from_state, 'reason', json_extract(value, '$[1]'),
                   'to', :to_state)
FROM json_each(:moved);

-- attempt updates ----------------------------------------------------------------------------

-- name: attempt_submitted
UPDATE attempts SET submitted_at = :now, ray_status = :ray_status
WHERE task_id = :task_id AND attempt_no = :attempt_no;

-- name: attempt_refused
UPDATE attempts SET failure_kind = :failure_kind, message = :message, end_time = :now
WHERE task_id = :task_id AND attempt_no = :attempt_no;

-- name: attempt_synced
UPDATE attempts SET ray_status = :ray_status, message = :message, start_time = :start_time
WHERE task_id = :task_id AND attempt_no = :attempt_no;

-- name: attempt_ended
UPDATE attempts SET ray_status = :ray_status, failure_kind = :failure_kind,
                    message = :message, start_time = :start_time, end_time = :end_time,
                    exit_code = :exit_code
WHERE task_id = :task_id AND attempt_no = :attempt_no;

-- name: request_stop
-- The first stop sent for an attempt (zero rows: it was sent before).
UPDATE attempts SET stop_requested = 1
WHERE task_id = :task_id AND attempt_no = :attempt_no AND stop_requested = 0;

-- name: request_preemption
-- The attempt is stopped to make room for :preempted_for, a task, or because its node is
-- drained with requeue (the node's mark, service.domain.nodes.drain_mark; zero rows: it
-- is being stopped already).
UPDATE attempts SET preempted_for = :preempted_for
WHERE task_id = :task_id AND attempt_no = :attempt_no AND preempted_for IS NULL
  AND end_time IS NULL;

-- users and tokens ---------------------------------------------------------------------------

-- name: insert_user
INSERT INTO users (name, role, enabled, created_at) VALUES (:name, :role, 1, :now);

-- name: get_user
SELECT name, role, enabled, created_at, disabled_at FROM users WHERE name = :name;

-- name: list_users
SELECT name, role, enabled, created_at, disabled_at FROM users ORDER BY name;

-- name: disabled_users
SELECT name FROM users WHERE enabled = 0;

-- name: set_user_enabled
-- Guarded: only a user in the other state changes (zero rows: it already was).
UPDATE users SET enabled = :enabled,
                 disabled_at = CASE WHEN :enabled THEN NULL ELSE :now END
WHERE name = :name AND enabled != :enabled;

-- name: make_admin
-- The bootstrap admin: an admin, enabled, whatever an earlier row said.
UPDATE users SET role = 'admin', enabled = 1, disabled_at = NULL
WHERE name = :name AND (role != 'admin' OR enabled = 0);

-- name: adopt_ownerless_tasks
-- Tasks created before users existed get an owner (tasks_user_seq finds them).
UPDATE tasks SET user = :user WHERE user IS NULL;

-- name: user_task_counts
-- Tasks of one user in the states given (a JSON array).
SELECT count(*) AS n FROM tasks
WHERE user = :user AND state IN (SELECT value FROM json_each(:states));

-- name: insert_token
INSERT INTO tokens (token_id, user, label, sha256, created_at, expires_at)
VALUES (:token_id, :user, :label, :sha256, :now, :expires_at);

-- name: token_exists
SELECT 1 AS found FROM tokens WHERE token_id = :token_id;

-- name: token_auth
-- What a request's token check needs: the token and its user, by the token's id.
SELECT k.token_id, k.user, k.sha256, k.expires_at, k.revoked_at, k.last_used_at,
       u.role, u.enabled
FROM tokens k JOIN users u ON u.name = k.user
WHERE k.token_id = :token_id;

-- name: get_token
SELECT token_id, user, label, created_at, last_used_at, expires_at, revoked_at
FROM tokens WHERE token_id = :token_id;

-- name: list_tokens
SELECT token_id, user, label, created_at, last_used_at, expires_at, revoked_at
FROM tokens WHERE user = :user
ORDER BY created_at, token_id;

-- name: live_tokens
SELECT count(*) AS n FROM tokens
WHERE user = :user AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > :now);

-- name: revoke_token
UPDATE tokens SET revoked_at = :now
WHERE token_id = :token_id AND user = :user AND revoked_at IS NULL;

-- name: touch_token
UPDATE tokens SET last_used_at = :now
WHERE token_id = :token_id AND (last_used_at IS NULL OR last_used_at < :now);

-- accounting ---------------------------------------------------------------------------------

-- name: usage_spans
-- Attempts that held their gang at some time in [:from, :to): started before :to, and
-- ended after :from (a range of attempts_end_time) or still on the cluster (no end yet,
-- task active: an attempt without an end whose task moved on is not counted as running).
-- :user NULL: every user.
SELECT a.task_id, a.attempt_no, t.user, t.nnodes * t.n_gpus_per_node AS gpus,
       a.start_time, a.end_time, a.ray_status, a.failure_kind
FROM attempts a INDEXED BY attempts_end_time
JOIN tasks t ON t.task_id = a.task_id
WHERE a.end_time > :from AND a.start_time < :to
  AND (:user IS NULL OR t.user = :user)
UNION ALL
SELECT a.task_id, a.attempt_no, t.user, t.nnodes * t.n_gpus_per_node AS gpus,
       a.start_time, a.end_time, a.ray_status, a.failure_kind
FROM attempts a INDEXED BY attempts_end_time
JOIN tasks t ON t.task_id = a.task_id
WHERE a.end_time IS NULL AND a.start_time < :to
  AND t.state IN ('SUBMITTING', 'SUBMITTED', 'RUNNING')
  AND (:user IS NULL OR t.user = :user);

-- name: add_gpu_seconds
-- An attempt of :task_id ended: its gang's GPUs x (end - start) go to the owner's total
-- (nothing for an attempt that never started, or a task without an owner).
INSERT INTO user_gpu_seconds (user, gpu_seconds)
SELECT t.user, max(0.0, :end_time - :start_time) * t.nnodes * t.n_gpus_per_node
FROM tasks t
WHERE t.task_id = :task_id AND t.user IS NOT NULL AND :start_time IS NOT NULL
  AND :end_time IS NOT NULL
ON CONFLICT (user) DO UPDATE SET gpu_seconds = gpu_seconds + excluded.gpu_seconds;

-- name: adopt_gpu_seconds
-- Before ownerless tasks get :user, their ended attempts go to :user's total.
INSERT INTO user_gpu_seconds (user, gpu_seconds)
SELECT :user, coalesce(sum(max(0.0, a.end_time - a.start_time) * t.nnodes
                           * t.n_gpus_per_node), 0.0)
FROM tasks t INDEXED BY tasks_user_seq
JOIN attempts a ON a.task_id = t.task_id
WHERE t.user IS NULL AND a.start_time IS NOT NULL AND a.end_time IS NOT NULL
ON CONFLICT (user) DO UPDATE SET gpu_seconds = gpu_seconds + excluded.gpu_seconds;

-- name: gpu_seconds_by_user
SELECT user, gpu_seconds FROM user_gpu_seconds;

-- web console: sessions ----------------------------------------------------------------------

-- name: insert_session
INSERT INTO ui_sessions (id_sha256, user, token_id, token_fp, csrf, created_at, expires_at)
VALUES (:id_sha256, :user, :token_id, :token_fp, :csrf, :now, :expires_at);

-- name: get_session
SELECT id_sha256, user, token_id, token_fp, csrf, created_at, expires_at
FROM ui_sessions WHERE id_sha256 = :id_sha256;

-- name: delete_session
DELETE FROM ui_sessions WHERE id_sha256 = :id_sha256;

-- name: drop_oldest_sessions
-- Keep :user's :keep newest sessions, drop the others (walks ui_sessions_user).
DELETE FROM ui_sessions WHERE user = :user AND id_sha256 NOT IN (
    SELECT id_sha256 FROM ui_sessions INDEXED BY ui_sessions_user WHERE user = :user
    ORDER BY created_at DESC, id_sha256 LIMIT :keep);

-- name: delete_expired_sessions
DELETE FROM ui_sessions WHERE expires_at <= :now;

-- web console: the queue, one page --------------------------------------------------------

-- name: queue_pending_page
-- Runnable tasks in queue order with their 1-based position in the whole queue, filtered
-- by owner, workload and kind of reason (NULL: any), one page. The console's reads of runnable rows name
-- no index (the planner picks one), so a change of the runnable index cannot break them.
-- Rows are numbered in admission order (priority first, then FIFO); the labels are read
-- for the page's rows only.
SELECT q.*, (SELECT json_extract(l.spec_json, '$.labels') FROM tasks l WHERE l.seq = q.seq
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

-- name: queue_pending_count
SELECT count(*) AS n FROM tasks
WHERE state IN ('QUEUED', 'PENDING_RESOURCES')
  AND (:user IS NULL OR user = :user) AND (:workload IS NULL OR workload = :workload)
  AND (:reason IS NULL OR coalesce(reason_kind, 'new') = :reason);

-- name: pending_groups
-- The runnable tasks by workload, owner and reason, with the oldest's runnable_since:
-- one pass over the waiting tasks for every queue family of /metrics.
SELECT workload, user, coalesce(reason_kind, 'new') AS reason_kind, count(*) AS n,
       min(runnable_since) AS since
FROM tasks WHERE state IN ('QUEUED', 'PENDING_RESOURCES')
GROUP BY workload, user, coalesce(reason_kind, 'new');

-- name: admitted_since
-- Attempts claimed after :since (up to :until), with how long their task had waited.
SELECT t.workload, t.user, a.created_at - t.runnable_since AS waited_s, a.created_at
FROM attempts a INDEXED BY attempts_created_at
JOIN tasks t ON t.task_id = a.task_id
WHERE a.created_at > :since AND a.created_at <= :until;

-- name: workloads
SELECT DISTINCT workload FROM tasks
WHERE state IN ('QUEUED', 'PENDING_RESOURCES');

-- web console: samples ---------------------------------------------------------------------

-- name: insert_sample
INSERT OR REPLACE INTO samples (ts, pending, running, gpus_used, gpus_total)
VALUES (:ts, :pending, :running, :gpus_used, :gpus_total);

-- name: delete_samples_before
DELETE FROM samples WHERE ts < :before;

-- name: samples_since
SELECT ts, pending, running, gpus_used, gpus_total FROM samples WHERE ts >= :since ORDER BY ts;

-- name: last_sample_ts
SELECT max(ts) AS ts FROM samples;

-- name: active_count
SELECT count(*) AS n FROM tasks INDEXED BY tasks_active
WHERE state IN ('SUBMITTING', 'SUBMITTED', 'RUNNING');

-- name: runnable_count
SELECT count(*) AS n FROM tasks
WHERE state IN ('QUEUED', 'PENDING_RESOURCES');

-- name: task_jobspec
SELECT jobspec_yaml FROM tasks WHERE task_id = :task_id;

-- name: change_seq
-- Grows whenever a task is created or its updated_at moves (the tasks_changed_* triggers):
-- one row read by its key, whatever the size of the tasks table.
SELECT seq FROM task_changes WHERE id = 1;

-- name: user_waiting_count
-- A user's waiting (runnable) tasks, counted in tasks_user_runnable: the cost grows with
-- that user's waiting tasks only, which the quota bounds.
SELECT count(*) AS n FROM tasks INDEXED BY tasks_user_runnable
WHERE user = :user AND state IN ('QUEUED', 'PENDING_RESOURCES');

-- name: user_spec_bytes_since
-- A user's stored JobSpec bytes per hour from :hour on (a day: at most 25 rows).
SELECT hour, bytes FROM user_spec_bytes WHERE user = :user AND hour >= :hour ORDER BY hour;

-- name: add_user_spec_bytes
INSERT INTO user_spec_bytes (user, hour, bytes) VALUES (:user, :hour, :bytes)
ON CONFLICT (user, hour) DO UPDATE SET bytes = bytes + excluded.bytes;

-- name: drop_user_spec_bytes_before
DELETE FROM user_spec_bytes WHERE user = :user AND hour < :hour;

-- name: add_task_usage
-- An attempt of :task_id ended: what it used goes to the task's running totals, and its
-- span widens the task's (read by usage over any window instead of every attempt). An
-- attempt that never started or held its gang no time counts nothing, as usage_spans
-- clipped to any window counts it.
INSERT INTO task_usage (task_id, user, gpu_seconds, failed_gpu_seconds, attempts,
                        first_start, last_end)
SELECT t.task_id, t.user, (:end_time - :start_time) * t.nnodes * t.n_gpus_per_node,
       CASE WHEN :failure_kind IS NOT NULL
            THEN (:end_time - :start_time) * t.nnodes * t.n_gpus_per_node ELSE 0.0 END, 1,
       :start_time, :end_time
FROM tasks t
WHERE t.task_id = :task_id AND :start_time IS NOT NULL AND :end_time > :start_time
ON CONFLICT (task_id) DO UPDATE SET
    gpu_seconds = gpu_seconds + excluded.gpu_seconds,
    failed_gpu_seconds = failed_gpu_seconds + excluded.failed_gpu_seconds,
    attempts = attempts + 1,
    first_start = min(first_start, excluded.first_start),
    last_end = max(last_end, excluded.last_end);

-- name: adopt_task_usage
-- Ownerless tasks get :user: so do their usage totals.
UPDATE task_usage SET user = :user WHERE user IS NULL;

-- fragment: inside_window
-- A task_usage row whose span (every ended attempt that held its gang) lies inside
-- [:from, :to): its running totals are what it used in the window. The one definition
-- that usage_whole_of_user, usage_parts and the top queries count by, so no task is
-- counted both whole and attempt by attempt.
last_end > :from AND first_start >= :from AND last_end <= :to

-- name: usage_owners
-- The owners in task_usage, one index seek each (a skip over task_usage_user), NULL last
-- when ownerless tasks have totals.
WITH RECURSIVE owner (name) AS (
    SELECT min(user) FROM task_usage INDEXED BY task_usage_user
    UNION ALL
    SELECT (SELECT min(user) FROM task_usage INDEXED BY task_usage_user
            WHERE user > owner.name)
    FROM owner WHERE owner.name IS NOT NULL
)
SELECT name AS user FROM owner WHERE name IS NOT NULL
UNION ALL
SELECT NULL WHERE EXISTS (SELECT 1 FROM task_usage INDEXED BY task_usage_user
                          WHERE user IS NULL);

-- name: usage_whole_of_user
-- :user's tasks whose ended attempts all lie inside [:from, :to) (their span does): their
-- running totals summed. One range of task_usage_user: the tasks that ended in the window.
SELECT coalesce(sum(gpu_seconds), 0.0) AS gpu_seconds,
       coalesce(sum(failed_gpu_seconds), 0.0) AS failed_gpu_seconds, count(*) AS tasks,
       coalesce(sum(attempts), 0) AS attempts
FROM task_usage INDEXED BY task_usage_user
WHERE user IS :user AND {inside_window};

-- name: usage_longest_span
-- The longest span of any task's ended attempts (task_usage_length: one seek); 0 if none.
SELECT coalesce(max(last_end - first_start), 0.0) AS longest FROM task_usage;

-- name: usage_edges_of_user
-- :user's tasks whose span crosses :from (ending inside the window) or :to; a span is at
-- most :longest long, so each edge reads the tasks that ended within :longest after it.
SELECT task_id FROM task_usage INDEXED BY task_usage_user
WHERE user IS :user AND last_end > :from AND last_end <= min(:to, :from + :longest)
  AND first_start < :from
UNION ALL
SELECT task_id FROM task_usage INDEXED BY task_usage_user
WHERE user IS :user AND last_end > :to AND last_end <= :to + :longest AND first_start < :to;

-- name: usage_parts
-- What usage_whole_of_user does not sum, per task: the ended attempts of the tasks in
-- :edges (a JSON array) and the attempts on the cluster now (no end, task active; of
-- :user's tasks only when not NULL), each clipped to [:from, :to) the way
-- service.policy.usage.clip does, a running one counted up to :now. whole_gpu_seconds:
-- what the task's ended attempts used when usage_whole_of_user summed them (NULL: it did
-- not), so a task is counted once.
SELECT task_id, user, sum(secs) AS gpu_seconds,
       sum(CASE WHEN failure_kind IS NOT NULL THEN secs ELSE 0.0 END) AS failed_gpu_seconds,
       count(*) AS attempts, sum(end_time IS NULL) AS running_attempts,
       max(whole) AS whole_gpu_seconds
FROM (
    SELECT task_id, user, failure_kind, end_time, whole, gpus * (hi - lo) AS secs FROM (
        SELECT task_id, user, gpus, failure_kind, end_time, whole,
               max(start_time, :from) AS lo,
               max(min(coalesce(end_time, :now), :to), max(start_time, :from)) AS hi
        FROM (
            SELECT a.task_id, t.user, t.nnodes * t.n_gpus_per_node AS gpus, a.failure_kind,
                   a.start_time, a.end_time, NULL AS whole
            FROM attempts a
            JOIN tasks t ON t.task_id = a.task_id
            WHERE a.task_id IN (SELECT value FROM json_each(:edges))
              AND a.end_time > :from AND a.start_time < :to
            UNION ALL
            SELECT a.task_id, t.user, t.nnodes * t.n_gpus_per_node AS gpus, a.failure_kind,
                   a.start_time, a.end_time,
                   (SELECT gpu_seconds FROM task_usage
                    WHERE task_id = a.task_id AND {inside_window}) AS whole
            FROM attempts a INDEXED BY attempts_end_time
            JOIN tasks t ON t.task_id = a.task_id
            WHERE a.end_time IS NULL AND a.start_time < :to
              AND t.state IN ('SUBMITTING', 'SUBMITTED', 'RUNNING')
              AND (:user IS NULL OR t.user = :user)
        )
    ) WHERE hi > lo
)
GROUP BY task_id;

-- name: usage_top_whole_first
-- The :limit tasks whose ended attempts, all inside [:from, :to), used the most (ties by
-- id), looked for among the :probe tasks that used the most over all history
-- (task_usage_all_top, no sort): for a window that holds most tasks, a few entries.
-- Fewer than :limit found: usage_top_whole_range answers.
SELECT task_id, gpu_seconds FROM (
    SELECT task_id, gpu_seconds, first_start, last_end
    FROM task_usage INDEXED BY task_usage_all_top
    ORDER BY gpu_seconds DESC, task_id LIMIT :probe)
WHERE {inside_window}
ORDER BY gpu_seconds DESC, task_id LIMIT :limit;

-- name: usage_top_whole_first_of_user
-- usage_top_whole_first among :user's tasks (task_usage_top).
SELECT task_id, gpu_seconds FROM (
    SELECT task_id, gpu_seconds, first_start, last_end
    FROM task_usage INDEXED BY task_usage_top
    WHERE user IS :user
    ORDER BY gpu_seconds DESC, task_id LIMIT :probe)
WHERE {inside_window}
ORDER BY gpu_seconds DESC, task_id LIMIT :limit;

-- name: usage_top_whole_range
-- The same tasks as usage_top_whole_first, from every task that ended in the window (a
-- range of task_usage_span), sorted.
SELECT task_id, gpu_seconds FROM task_usage INDEXED BY task_usage_span
WHERE {inside_window}
ORDER BY gpu_seconds DESC, task_id LIMIT :limit;

-- name: usage_top_whole_range_of_user
-- usage_top_whole_range of :user's tasks (a range of task_usage_user), sorted.
SELECT task_id, gpu_seconds FROM task_usage INDEXED BY task_usage_user
WHERE user IS :user AND {inside_window}
ORDER BY gpu_seconds DESC, task_id LIMIT :limit;

-- name: usage_spans_of_tasks
-- usage_spans of the tasks in :task_ids (a JSON array) only.
SELECT a.task_id, a.attempt_no, t.user, t.nnodes * t.n_gpus_per_node AS gpus,
       a.start_time, a.end_time, a.ray_status, a.failure_kind
FROM attempts a
JOIN tasks t ON t.task_id = a.task_id
WHERE a.task_id IN (SELECT value FROM json_each(:task_ids)) AND a.start_time < :to
  AND (a.end_time > :from
       OR (a.end_time IS NULL AND t.state IN ('SUBMITTING', 'SUBMITTED', 'RUNNING')));

-- name: recent_runs
-- The runs that ended on their own (SUCCEEDED) or at their time limit among the :scan
-- attempts that ended last (attempts_end_time, newest first): how long each took against
-- its limit, for the expected starts (service.runtimes).
SELECT t.user, t.nnodes, t.n_gpus_per_node, a.end_time - a.start_time AS runtime_s,
       t.max_runtime_s
FROM (SELECT task_id, start_time, end_time, ray_status, failure_kind
      FROM attempts INDEXED BY attempts_end_time
      WHERE end_time IS NOT NULL ORDER BY end_time DESC LIMIT :scan) a
JOIN tasks t ON t.task_id = a.task_id
WHERE a.start_time IS NOT NULL AND t.max_runtime_s IS NOT NULL
  AND (a.ray_status = 'SUCCEEDED' OR a.failure_kind = 'TIME_LIMIT');

-- name: recent_finished
-- The ids of the newest :limit finished tasks (of :user when not NULL), each state read
-- newest first through tasks_state_seq: a long runnable queue is never walked. The rows
-- themselves are read with get_task (whatever columns a task has).
SELECT f.task_id FROM (
    SELECT * FROM (SELECT t.seq, t.task_id FROM tasks t INDEXED BY tasks_state_seq
                   WHERE t.state = 'SUCCEEDED' AND (:user IS NULL OR t.user = :user)
                   ORDER BY t.seq DESC LIMIT :limit)
    UNION ALL
    SELECT * FROM (SELECT t.seq, t.task_id FROM tasks t INDEXED BY tasks_state_seq
                   WHERE t.state = 'FAILED' AND (:user IS NULL OR t.user = :user)
                   ORDER BY t.seq DESC LIMIT :limit)
    UNION ALL
    SELECT * FROM (SELECT t.seq, t.task_id FROM tasks t INDEXED BY tasks_state_seq
                   WHERE t.state = 'CANCELED' AND (:user IS NULL OR t.user = :user)
                   ORDER BY t.seq DESC LIMIT :limit)
) f
ORDER BY f.seq DESC LIMIT :limit;

-- progress and training curves (migration 0007) -----------------------------------------

-- name: follow_state
-- Where the follower left an attempt (NULL progress columns: never followed), and the
-- JobSpec's total_training_steps (the run's length until the log says it).
SELECT json_extract(t.spec_json, '$.total_training_steps') AS jobspec_total,
       p.log_offset, p.step, p.total_steps, p.resumed_from, p.first_step, p.first_at,
       p.last_at
FROM tasks t
LEFT JOIN attempt_progress p ON p.task_id = t.task_id AND p.attempt_no = :attempt_no
WHERE t.task_id = :task_id;

-- name: follow_points
SELECT s.key, s.stride, s.seen, m.step
FROM metric_series s
LEFT JOIN metric_points m ON m.series_id = s.series_id
WHERE s.task_id = :task_id AND s.attempt_no = :attempt_no
ORDER BY s.key, m.step;

-- name: insert_progress
INSERT OR IGNORE INTO attempt_progress (task_id, attempt_no, log_offset, updated_at)
VALUES (:task_id, :attempt_no, 0, :now);

-- name: update_progress
-- Guarded by the offset the follower read from: zero rows = another writer moved it.
UPDATE attempt_progress
SET log_offset = :log_offset, step = :step, total_steps = :total_steps,
    resumed_from = :resumed_from, first_step = :first_step, first_at = :first_at,
    last_at = :last_at, rate = :rate, eta_at = :eta_at, updated_at = :now
WHERE task_id = :task_id AND attempt_no = :attempt_no AND log_offset = :expected_offset;

-- name: upsert_series
INSERT INTO metric_series (task_id, attempt_no, key, stride, seen)
VALUES (:task_id, :attempt_no, :key, :stride, :seen)
ON CONFLICT (task_id, attempt_no, key) DO UPDATE SET stride = excluded.stride,
                                                     seen = excluded.seen
RETURNING series_id;

-- name: put_point
-- A validation line repeats its step: the later value of a key wins.
INSERT OR REPLACE INTO metric_points (series_id, step, value)
VALUES (:series_id, :step, :value);

-- name: delete_point
DELETE FROM metric_points WHERE series_id = :series_id AND step = :step;

-- name: task_progress
-- The progress of a task's latest attempt (no row: never followed).
SELECT t.task_id, t.state, json_extract(t.spec_json, '$.total_training_steps') AS jobspec_total,
       p.attempt_no, p.step, p.total_steps, p.resumed_from, p.first_step, p.first_at,
       p.last_at, p.rate, p.eta_at, p.updated_at
FROM tasks t
JOIN attempt_progress p ON p.task_id = t.task_id AND p.attempt_no = t.latest_attempt_no
WHERE t.task_id = :task_id;

-- name: active_progress
SELECT t.task_id, t.state, json_extract(t.spec_json, '$.total_training_steps') AS jobspec_total,
       p.attempt_no, p.step, p.total_steps, p.resumed_from, p.first_step, p.first_at,
       p.last_at, p.rate, p.eta_at, p.updated_at
FROM tasks t INDEXED BY tasks_active
JOIN attempt_progress p ON p.task_id = t.task_id AND p.attempt_no = t.latest_attempt_no
WHERE t.state IN ('SUBMITTING', 'SUBMITTED', 'RUNNING');

-- name: metric_keys
SELECT DISTINCT key FROM metric_series WHERE task_id = :task_id ORDER BY key;

-- name: metric_points
-- :keys is a JSON array of metric names.
SELECT s.attempt_no, s.key, m.step, m.value
FROM metric_series s
JOIN metric_points m ON m.series_id = s.series_id
WHERE s.task_id = :task_id AND s.key IN (SELECT value FROM json_each(:keys))
ORDER BY s.attempt_no, s.key, m.step;

-- ==== webhooks (service/store_webhooks.py) ====================================================

-- name: webhook_insert
INSERT INTO webhooks (hook_id, owner, url, events, format, secret, created_at)
VALUES (:hook_id, :owner, :url, :events, :format, :secret, :now);

-- name: webhook_count_owner
SELECT count(*) AS n FROM webhooks WHERE owner = :owner;

-- name: webhook_get
SELECT hook_id, owner, url, events, format, secret, created_at FROM webhooks
WHERE hook_id = :hook_id;

-- name: webhook_list
SELECT hook_id, owner, url, events, format, secret, created_at FROM webhooks
WHERE :owner IS NULL OR owner = :owner
ORDER BY created_at, hook_id;

-- name: webhook_delete
DELETE FROM webhooks WHERE hook_id = :hook_id;

-- What a task event's webhook data names (the task's owner, workload and summary).
-- name: webhook_task_facts
SELECT user, workload, state, error_summary, latest_attempt_no FROM tasks
WHERE task_id = :task_id;

-- The outbox: one delivery per hook of the owner that subscribed to the event type (an
-- indexed lookup of the owner's few hooks), in the transaction of the event itself.
-- name: webhook_enqueue
INSERT INTO webhook_deliveries (hook_id, event_id, event_type, event_ts, data_json, next_at)
SELECT h.hook_id, :event_id, :event_type, :now, :data_json, :now
FROM webhooks AS h INDEXED BY webhooks_owner
WHERE h.owner = :owner
  AND EXISTS (SELECT 1 FROM json_each(h.events) WHERE json_each.value = :event_type);

-- A node event: the hooks of enabled admins that follow its type (cluster-wide events are
-- for admins only).
-- name: webhook_enqueue_admins
INSERT INTO webhook_deliveries (hook_id, event_id, event_type, event_ts, data_json, next_at)
SELECT h.hook_id, :event_id, :event_type, :now, :data_json, :now
FROM users AS u JOIN webhooks AS h INDEXED BY webhooks_owner ON h.owner = u.name
WHERE u.role = 'admin' AND u.enabled = 1
  AND EXISTS (SELECT 1 FROM json_each(h.events) WHERE json_each.value = :event_type);

-- name: webhook_next_due
SELECT min(next_at) AS next_at FROM webhook_deliveries INDEXED BY webhook_deliveries_due
WHERE state = 'PENDING';

-- Claim the due deliveries nobody holds, oldest due first: a lease, and the try counted.
-- name: webhook_claim
UPDATE webhook_deliveries SET lease_until = :lease_until, attempts = attempts + 1,
    last_attempt_at = :now
WHERE delivery_id IN (
    SELECT delivery_id FROM webhook_deliveries INDEXED BY webhook_deliveries_due
    WHERE state = 'PENDING' AND next_at <= :now
      AND (lease_until IS NULL OR lease_until <= :now)
    ORDER BY next_at LIMIT :limit)
RETURNING delivery_id, hook_id, event_id, event_type, event_ts, data_json, attempts;

-- A restart: every lease was held by a process that is gone (one service per database).
-- name: webhook_release_leases
UPDATE webhook_deliveries SET lease_until = NULL
WHERE state = 'PENDING' AND lease_until IS NOT NULL;

-- The outcome of one try, guarded by the try it belongs to (a stale worker changes nothing).
-- name: webhook_record
UPDATE webhook_deliveries SET state = :state, next_at = :next_at, lease_until = NULL,
    last_status = :status, last_error = :error, ended_at = :ended_at
WHERE delivery_id = :delivery_id AND state = 'PENDING' AND attempts = :attempts;

-- name: webhook_insert_try
INSERT INTO webhook_tries (delivery_id, attempt, at, status, error)
VALUES (:delivery_id, :attempts, :at, :status, :error);

-- The tries of the deliveries named (a JSON array of ids), oldest first.
-- name: webhook_tries_of
SELECT delivery_id, attempt, at, status, error FROM webhook_tries
WHERE delivery_id IN (SELECT value FROM json_each(:ids))
ORDER BY delivery_id, attempt;

-- name: webhook_deliveries_of_hook
SELECT delivery_id, hook_id, event_id, event_type, event_ts, state, attempts, next_at,
       last_attempt_at, last_status, last_error, ended_at
FROM webhook_deliveries INDEXED BY webhook_deliveries_hook
WHERE hook_id = :hook_id
ORDER BY delivery_id DESC LIMIT :limit;

-- name: webhook_prune_ended
DELETE FROM webhook_deliveries WHERE delivery_id IN (
    SELECT delivery_id FROM webhook_deliveries INDEXED BY webhook_deliveries_ended
    WHERE ended_at IS NOT NULL AND ended_at < :before LIMIT :limit);

-- dependencies and pipelines (migration 0012) -----------------------------------------------
-- BLOCKED tasks are read through tasks_blocked (its term repeated word for word), so a tick
-- costs what the blocked tasks cost, never a scan of tasks.

-- name: dep_parent
-- A named parent: its owner, state and depth (0: it depends on nothing).
SELECT t.task_id, t.user, t.state,
       coalesce((SELECT max(d.depth) FROM task_deps d WHERE d.task_id = t.task_id), 0) AS depth
FROM tasks t WHERE t.task_id = :task_id;

-- name: insert_dep
INSERT INTO task_deps (task_id, parent_id, condition, depth)
VALUES (:task_id, :parent_id, :condition, :depth);

-- name: woken_deps
-- The BLOCKED tasks named in dep_wakeups (a parent of theirs ended, or they are new), each
-- with every dependency and the parent's state now, in FIFO order; a pipeline stage's
-- template (its output references unresolved) comes along. :upto: the last wakeup read.
SELECT t.task_id, t.user,
       coalesce(json_extract(t.spec_json, '$.on_unsatisfiable'), 'cancel') AS on_unsatisfiable,
       d.parent_id, d.condition, p.state AS parent_state,
       s.pipeline_id, s.stage, s.template_json
FROM tasks t
JOIN task_deps d ON d.task_id = t.task_id
JOIN tasks p ON p.task_id = d.parent_id
LEFT JOIN pipeline_stages s ON s.task_id = t.task_id
WHERE t.task_id IN (SELECT task_id FROM dep_wakeups WHERE id <= :upto)
  AND t.state = 'BLOCKED'
ORDER BY t.seq;

-- name: last_wakeup
SELECT max(id) AS upto FROM dep_wakeups;

-- name: delete_wakeups
DELETE FROM dep_wakeups WHERE id <= :upto;

-- name: insert_wakeup
INSERT INTO dep_wakeups (task_id) VALUES (:task_id);

-- name: blocked_count
SELECT count(*) AS n FROM tasks INDEXED BY tasks_blocked WHERE state = 'BLOCKED';

-- name: blocked_page
-- One page of the BLOCKED tasks (the console's "waiting on other tasks", the queue's
-- blocked), oldest first; :user's only when not NULL.
SELECT {task_columns}
FROM tasks t INDEXED BY tasks_blocked
{latest_attempt}
WHERE t.state = 'BLOCKED' AND (:user IS NULL OR t.user = :user)
ORDER BY t.seq LIMIT :limit;

-- name: deps_of_task
-- A task's dependencies with each parent's state now (the API's "after" and wait reason).
SELECT d.parent_id, d.condition, p.state AS parent_state
FROM task_deps d JOIN tasks p ON p.task_id = d.parent_id
WHERE d.task_id = :task_id
ORDER BY p.seq;

-- name: deps_of_tasks
-- The dependencies of the tasks in :ids (a JSON array), for a page of tasks at once.
SELECT d.task_id, d.parent_id, d.condition, p.state AS parent_state
FROM task_deps d JOIN tasks p ON p.task_id = d.parent_id
WHERE d.task_id IN (SELECT value FROM json_each(:ids));

-- name: move_unblocked
-- BLOCKED -> QUEUED: its dependencies hold. It joins the queue now (FIFO among tasks
-- unblocked since; its seq keeps its place among equal priorities), with its references
-- resolved (:spec_json; NULL: unchanged).
UPDATE tasks SET state = :dst, updated_at = :now, next_run_at = :now, runnable_since = :now,
                 pending_reason = NULL, reason_kind = NULL,
                 spec_json = coalesce(:spec_json, spec_json)
WHERE task_id = :task_id AND state = :expected;

-- name: insert_pipeline
INSERT INTO pipelines (pipeline_id, name, user, state, document, created_at, updated_at)
VALUES (:pipeline_id, :name, :user, 'RUNNING', :document, :now, :now);

-- name: insert_stage
INSERT INTO pipeline_stages (pipeline_id, stage, task_id, position, template_json)
VALUES (:pipeline_id, :stage, :task_id, :position, :template_json);

-- name: pipeline_exists
SELECT 1 AS found FROM pipelines WHERE pipeline_id = :pipeline_id;

-- fragment: pipeline_columns
-- A pipeline row's columns as reads show them (pipelines p): a RUNNING pipeline none of whose
-- stages has started (each stage's task still BLOCKED, QUEUED or PENDING_RESOURCES:
-- service.domain.states.WAITING) shows WAITING. Only reads say WAITING: the stored state
-- stays RUNNING until the pipeline ends.
p.pipeline_id, p.name, p.user,
CASE WHEN p.state = 'RUNNING' AND NOT EXISTS (
         SELECT 1 FROM pipeline_stages s JOIN tasks t ON t.task_id = s.task_id
         WHERE s.pipeline_id = p.pipeline_id
           AND t.state NOT IN ('BLOCKED', 'QUEUED', 'PENDING_RESOURCES'))
     THEN 'WAITING' ELSE p.state END AS state,
p.created_at, p.updated_at, p.ended_at, p.cancel_requested_at

-- name: get_pipeline
-- A pipeline as it is shown (pipeline_columns: a RUNNING one none of whose stages has started
-- shows WAITING).
SELECT {pipeline_columns}
FROM pipelines p WHERE p.pipeline_id = :pipeline_id;

-- name: list_pipelines
-- Newest first, at most :limit (all users); the state as get_pipeline shows it.
SELECT {pipeline_columns}
FROM pipelines p INDEXED BY pipelines_created
ORDER BY p.created_at DESC LIMIT :limit;

-- name: list_pipelines_of_user
SELECT {pipeline_columns}
FROM pipelines p INDEXED BY pipelines_user_created
WHERE p.user = :user
ORDER BY p.created_at DESC LIMIT :limit;

-- name: pipeline_stages
-- A pipeline's stages in document order with their tasks' states and dependencies.
SELECT s.stage, s.task_id, s.position, s.skipped, t.state, t.error_summary, t.pending_reason, t.reason_kind,
       t.latest_attempt_no
FROM pipeline_stages s JOIN tasks t ON t.task_id = s.task_id
WHERE s.pipeline_id = :pipeline_id
ORDER BY s.position;

-- name: pipeline_edges
-- Every dependency between two stages of a pipeline (by stage name).
SELECT c.stage AS child, p.stage AS parent, d.condition
FROM pipeline_stages c
JOIN task_deps d ON d.task_id = c.task_id
JOIN pipeline_stages p ON p.task_id = d.parent_id
WHERE c.pipeline_id = :pipeline_id
ORDER BY c.position, p.position;

-- name: task_on_unsatisfiable
SELECT coalesce(json_extract(spec_json, '$.on_unsatisfiable'), 'cancel') AS on_unsatisfiable
FROM tasks WHERE task_id = :task_id;

-- name: stage_of_task
SELECT s.pipeline_id, s.stage FROM pipeline_stages s WHERE s.task_id = :task_id;

-- name: running_pipeline_stages
-- The stages of every RUNNING pipeline (the tick derives their states).
SELECT p.pipeline_id, p.cancel_requested_at, s.task_id, s.position, s.skipped, t.state
FROM pipelines p INDEXED BY pipelines_running
JOIN pipeline_stages s ON s.pipeline_id = p.pipeline_id
JOIN tasks t ON t.task_id = s.task_id
WHERE p.state = 'RUNNING';

-- name: mark_stage_skipped
UPDATE pipeline_stages SET skipped = 1 WHERE task_id = :task_id;

-- name: end_pipeline
-- RUNNING -> a final state (guarded: zero rows, it ended meanwhile).
UPDATE pipelines SET state = :state, updated_at = :now, ended_at = :now
WHERE pipeline_id = :pipeline_id AND state = 'RUNNING';

-- name: flag_pipeline_cancel
UPDATE pipelines SET cancel_requested_at = :now, updated_at = :now
WHERE pipeline_id = :pipeline_id AND state = 'RUNNING' AND cancel_requested_at IS NULL;

-- nodes: cordon, drain, resume (service/store/nodes.py) -----------------------------------

-- name: node_states
SELECT name, state, source, by_user, at, reason, requeue FROM node_states ORDER BY name;

-- name: node_state
SELECT name, state, source, by_user, at, reason, requeue FROM node_states WHERE name = :name;

-- name: node_state_insert
-- Guarded: a node already out of admission keeps its row (rowcount 0: the caller says so).
INSERT INTO node_states (name, state, source, by_user, at, reason, requeue)
VALUES (:name, :state, :source, :by_user, :at, :reason, :requeue)
ON CONFLICT (name) DO NOTHING;

-- name: node_state_drain
-- A cordoned node drained, or a drain turned into one that re-queues (the guard: it is
-- cordoned now, or drained without requeue and :requeue is 1).
UPDATE node_states SET state = 'drained', source = :source, by_user = :by_user, at = :at,
       reason = :reason, requeue = :requeue
WHERE name = :name AND (state = 'cordoned' OR (state = 'drained' AND requeue = 0 AND :requeue = 1));

-- name: node_state_take_over
-- A quarantine takes over the health check's cordon (the guard: the source read).
UPDATE node_states SET source = :source, by_user = :by_user, at = :at, reason = :reason
WHERE name = :name AND source = :from_source;

-- name: node_state_delete
-- Resume, guarded by the source the caller read (a health resume never lifts an
-- operator's cordon; :source NULL: any).
DELETE FROM node_states WHERE name = :name AND (:source IS NULL OR source = :source);

-- name: node_event_insert
INSERT INTO node_events (name, ts, kind, source, by_user, reason)
VALUES (:name, :ts, :kind, :source, :by_user, :reason);

-- name: node_events_of
SELECT name, ts, kind, source, by_user, reason FROM node_events WHERE name = :name
ORDER BY ts, id;

-- The newest :limit events of a node, newest first.
-- name: node_events_latest
SELECT id, name, ts, kind, source, by_user, reason FROM node_events INDEXED BY node_events_name
WHERE name = :name ORDER BY ts DESC, id DESC LIMIT :limit;

-- Node events after id :after by kind and source, and the last id of each group (/metrics
-- adds them to its running counts: a scrape reads only the rows written since the last).
-- name: node_event_counts
SELECT kind, source, count(*) AS n, max(id) AS last FROM node_events
WHERE id > :after GROUP BY kind, source;

-- name: lease_get
SELECT name, holder, host, pid, address, epoch, acquired_at, renewed_at, expires_at
FROM service_lease WHERE name = :name;

-- name: lease_fence
-- Inside a singleton's write: is the leader's term still the writer's? (its holder, epoch)
SELECT holder, epoch FROM service_lease WHERE name = 'leader';

-- name: lease_insert
-- The first take of a lease: nobody ever held it (rowcount 0: someone took it first).
INSERT INTO service_lease (name, holder, host, pid, address, epoch, acquired_at,
                           renewed_at, expires_at)
VALUES (:name, :holder, :host, :pid, :address, 1, :now, :now, :expires_at)
ON CONFLICT (name) DO NOTHING;

-- name: lease_take
-- A take from the holder the caller read, guarded by its epoch (a renewal or another
-- take in between moves nothing).
UPDATE service_lease SET holder = :holder, host = :host, pid = :pid, address = :address,
       epoch = epoch + 1, acquired_at = :now, renewed_at = :now, expires_at = :expires_at
WHERE name = :name AND epoch = :seen_epoch AND holder = :seen_holder;

-- name: lease_renew
-- Guarded by holder and epoch: a deposed holder renews nothing.
UPDATE service_lease SET renewed_at = :now, expires_at = :expires_at
WHERE name = :name AND holder = :holder AND epoch = :epoch;

-- name: lease_release
-- A clean stop: the lease expires now, so the next instance takes it at once.
UPDATE service_lease SET expires_at = :now, renewed_at = :now
WHERE name = :name AND holder = :holder AND epoch = :epoch;

-- name: leader_view_put
-- The leader's view after a tick (service.engine.shared_view): only the lease's holder
-- writes it (its writes are fenced), so the row is simply replaced.
INSERT INTO leader_view (name, holder, epoch, at, view_json)
VALUES (:name, :holder, :epoch, :at, :view_json)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, epoch = excluded.epoch,
       at = excluded.at, view_json = excluded.view_json;

-- name: leader_view_since
-- The view when a newer one than :at was published (no row: nothing new).
SELECT holder, epoch, at, view_json FROM leader_view WHERE name = :name AND at > :at;

-- name: node_evidence_add
-- The quarantine's evidence against one node (service.engine.quarantine); an attempt's
-- once per node.
INSERT INTO node_evidence (node, task_id, attempt_no, at, line)
VALUES (:node, :task_id, :attempt_no, :at, :line)
ON CONFLICT (node, task_id, attempt_no) DO NOTHING;

-- name: node_evidence_drop_before
DELETE FROM node_evidence WHERE at < :since;

-- name: node_evidence_since
-- The evidence of the window, oldest first (the memory's order).
SELECT node, task_id, attempt_no, at, line FROM node_evidence WHERE at >= :since
ORDER BY at, node, task_id, attempt_no;

-- name: attempt_node_insert
-- Where an attempt ran, first seen: an existing row is kept as it is (never rewritten),
-- and a row is written only for an attempt that exists (rowcount 0 otherwise).
INSERT INTO attempt_nodes (task_id, attempt_no, name, role, gpus, seen_at)
SELECT :task_id, :attempt_no, :name, :role, :gpus, :seen_at
WHERE EXISTS (SELECT 1 FROM attempts WHERE task_id = :task_id AND attempt_no = :attempt_no)
ON CONFLICT (task_id, attempt_no, name, role) DO NOTHING;

-- name: attempt_nodes_of_task
-- In the primary key's order (service.store.placement orders each attempt's nodes).
SELECT attempt_no, name, role, gpus, seen_at FROM attempt_nodes WHERE task_id = :task_id;

-- name: attempt_nodes_of_attempt
SELECT attempt_no, name, role, gpus, seen_at FROM attempt_nodes
WHERE task_id = :task_id AND attempt_no = :attempt_no;
