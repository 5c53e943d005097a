"""A task's driver log (``GET /tasks/{id}/logs``): live from Ray while its attempt runs,
the archive once it ended; a follower asks for what was written since its last read."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from service.usecases import reads
from service.web.api.deps import deps_of
from service.web.api.handlers import int_param, own_task
from service.web.api.middlewares import ApiError
from service.web.api.params import SQLITE_MAX_INT

LOG_TAIL_DEFAULT, LOG_TAIL_MAX = 2000, 100_000
LOG_ATTEMPT_HEADER, LOG_END_HEADER = "X-Argus-Attempt", "X-Argus-Log-End"


async def task_logs(request: web.Request) -> web.Response:
    deps = deps_of(request)
    task_id = request.match_info["task_id"]
    errors: list[dict[str, Any]] = []
    attempt_no: int | None = None
    if request.query.get("attempt", "latest") != "latest":
        attempt_no = int_param(request, "attempt", 0, 1, SQLITE_MAX_INT, errors)
        if errors:
            errors[0]["message"] = ("must be 'latest' or an integer between 1 and "
                                    f"{SQLITE_MAX_INT}, got {request.query['attempt'][:40]!r}")
    tail = int_param(request, "tail", LOG_TAIL_DEFAULT, 1, LOG_TAIL_MAX, errors)
    offset = (None if "offset" not in request.query
              else int_param(request, "offset", 0, 0, SQLITE_MAX_INT, errors))
    if errors:
        raise ApiError(400, "invalid query parameters", details=errors)
    task = await own_task(request, task_id, "read the logs of")
    attempt = await reads.attempt(deps, task_id, attempt_no)
    if attempt is None:
        which = "no attempts yet" if attempt_no is None else f"no attempt {attempt_no}"
        raise ApiError(404, f"task {task_id} has {which}")
    text = await reads.attempt_log(deps, attempt, task.user)
    if text is None:
        raise ApiError(404, f"no logs for {attempt.ray_submission_id} (live or archived)")
    data = text.encode("utf-8", "replace")
    # where this answer ends in the log: a follower asks for ?offset=<it> next, and gets
    # only what was written since (a new attempt starts a new log: X-Argus-Attempt)
    headers = {LOG_ATTEMPT_HEADER: str(attempt.attempt_no), LOG_END_HEADER: str(len(data))}
    body = (data[offset:] if offset is not None
            else reads.tail_lines(text, tail).encode("utf-8", "replace"))
    return web.Response(body=body, content_type="text/plain", charset="utf-8",
                        headers=headers)
