"""What a user asks for, one home each: the API and the console both call these.

``tasks`` (submit, cancel, set a priority), ``pipelines`` (submit, cancel a pipeline),
``pipeline_submit`` (a pipeline's stages created in one transaction), ``accounts`` (users,
tokens, usage), ``webhooks`` (register, list, delete a hook, its deliveries), ``reads``
(a task's dependencies, the blocked tasks and why, an attempt's log). Each use case holds
the whole rule in one place (defaults, who may ask for what, ownership, quotas, the
store's write, the best-effort stop on Ray, the scheduler's wake) and returns a value or
raises a ``ports.UseCaseError``; each front end maps those to its own answer (a JSON
status, an HTML page). Nothing here knows HTTP or HTML. The store is reached through its
lanes, ``deps.store.read(lambda s: ...)`` and ``deps.store.write(...)``."""
