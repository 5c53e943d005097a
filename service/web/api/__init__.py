"""The task service's HTTP layer; ``service.web.app`` assembles it into the application.

``deps`` (what the handlers are given) · ``middlewares`` (bearer auth, JSON errors,
request metrics) · ``handlers`` (one coroutine per route) · ``views`` (the JSON shape of
store rows, list cursors) · ``waker`` (requests waking the scheduler loop).
"""
