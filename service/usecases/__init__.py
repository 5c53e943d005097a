"""The task rules the API and the console share: submit, cancel, set a priority, cancel a
pipeline. Each use case holds the whole rule in one place (defaults, who may ask for what,
ownership, quotas, the store's write, the best-effort stop on Ray, the scheduler's wake)
and returns a value or raises a ``UseCaseError``; each front end maps those to its own
answer (a JSON status, an HTML page). Nothing here knows HTTP or HTML."""
