-- Migration 0013: the kind of a waiting task's reason (service/reasons.py WaitKind), beside
-- its text. Metrics, the reason= filters and the console read the kind, never the text.
-- Rows written before kinds existed are classified once, here, from their text (the rules
-- the metrics used until now); a reason no rule knows is 'other'. NULL: no reason (a task
-- not examined yet reads as 'new').

ALTER TABLE tasks ADD COLUMN reason_kind TEXT;

UPDATE tasks SET reason_kind = CASE
    WHEN pending_reason LIKE 'can never fit this cluster as it is%' THEN 'never_fits'
    WHEN (pending_reason LIKE 'needs %' OR pending_reason LIKE 'no free driver slot%')
         AND pending_reason NOT LIKE '% more than user %' THEN 'resources'
    WHEN pending_reason LIKE 'user % is disabled:%' THEN 'user_disabled'
    WHEN pending_reason LIKE 'user %' OR pending_reason LIKE '% more than user %'
         THEN 'user_limit'
    WHEN pending_reason LIKE 'preempting %'
         OR ((pending_reason LIKE 'waiting behind %' OR pending_reason LIKE 'attempt %')
             AND pending_reason LIKE '% preempt%') THEN 'preemption'
    WHEN pending_reason LIKE 'waiting behind %(backfill off)%' THEN 'backfill_off'
    WHEN pending_reason LIKE 'waiting behind %: nodes % are reserved for it%' THEN 'reserved'
    WHEN pending_reason LIKE 'fits now on nodes %' THEN 'reserved'
    WHEN pending_reason LIKE 'waiting behind %' THEN 'starvation_guard'
    WHEN pending_reason LIKE 'max_running_tasks%' THEN 'max_running'
    WHEN pending_reason LIKE 'retry backoff%'
         OR (pending_reason LIKE 'attempt %' AND pending_reason LIKE '% failed %')
         THEN 'retry_backoff'
    WHEN pending_reason LIKE 'attempt % never reached Ray%' THEN 'resubmit'
    WHEN pending_reason LIKE 'Ray cluster unreachable%' THEN 'cluster_unreachable'
    ELSE 'other'
END
WHERE pending_reason IS NOT NULL;
