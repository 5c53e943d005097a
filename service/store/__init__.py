"""SQLite: every write (one writer, guarded compare-and-set), every read, the lanes that run
them.

``writer.Store`` is a small container around one transaction core: ``core.WriteCore``
(the writer lock, ``BEGIN IMMEDIATE`` transactions, events with their webhook outbox rows,
the guarded compare-and-set ``transition``) and ``reads.Readers`` (per-thread reading
connections), handed explicitly to one store per aggregate: ``tasks``, ``attempts``,
``users`` (with tokens and console sessions), ``pipelines``, ``webhooks``, ``progress``,
``console`` and ``usage``. ``inserts`` holds the one task insert (a
``service.domain.newtask.NewTask``) and what creating a task checks; the statements are
``sql/queries.sql``'s named queries. ``aio.AsyncStore`` runs any call on a lane:
``await lanes.read(lambda s: s.tasks.get_task(task_id))`` (``write``, ``heavy``).
"""
