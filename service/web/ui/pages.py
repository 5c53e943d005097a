"""The console's pages: sign-in, queue, task, cluster, charts; cancel and priority.

Each page is a Jinja2 template rendered with autoescape on, so whatever a user typed (a
JobSpec, an override, a path, a reason that quotes them) reaches the browser as text.
Pages are served to a signed-in session only (``sessions``); a visit without one is
redirected to the sign-in page. Every response forbids caching and framing and carries a
Content-Security-Policy that allows the console's own script and style only (no inline
script runs, whatever a page contains). What a job wrote (a summary's quoted line, an
attempt's message, an event's quoting fields) is its owner's and the admins' as its log
is: the pages give anyone else the rows as the API's views do (``views.shown_*``).

``?fragment=1`` renders a page's live part only: the console's script fetches it when
the live stream (``live``) says something changed, and swaps it in place. Rows are in
queue order (by submission) on the server, so they never jump around while updating.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import jinja2
from aiohttp import web

from service.config import SchedulerSettings
from service.domain.reasons import WaitKind
from service.domain.rows import TaskRow
from service.domain.states import RUNNABLE, TERMINAL, TaskState
from service.domain.timefmt import duration, iso
from service.domain.users import ME, Principal, name_problem
from service.jobspec.shown import SHOWN
from service.policy.failure_guard import FailureGuard
from service.policy.priorities import MAX_PRIORITY, MIN_PRIORITY
from service.store.offload import PARTY
from service.usecases import queue, reads, tasks
from service.usecases.ports import Invalid, NotAllowed, NotFound, NotOwner, UseCaseError, WrongState
from service.web.api.deps import AppDeps, deps_of
from service.web.api.params import parse_uint
from service.web.api.views import shown_rows, shown_task, task_dependencies_json
from service.web.ui import progress_view
from service.web.ui.changes import ChangeFeed
from service.web.ui.event_text import payload_fields
from service.web.ui.progress_text import progress_summary
from service.web.ui.sessions import (
    Signed,
    clear_cookie,
    csrf_ok,
    current,
)
from service.web.ui.slots import StreamSlots

log = logging.getLogger(__name__)

UI = "/ui"
PAGE_SIZE = 50
RECENT = 20
BLOCKED_SHOWN = 50  # tasks waiting on other tasks, oldest first
LOG_LINES = 200
FORM_MAX_BYTES = 8192
STATE_FILTERS = ("", "pending", "running", "finished")
_WORKLOAD = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # terminal colours in Ray's driver logs
_PRIORITY = re.compile(r"[+-]?[0-9]{1,9}")  # a form's number, before its range is checked

ENV = web.AppKey("argus_ui_env", jinja2.Environment)
BOOTSTRAP_FP = web.AppKey("argus_ui_bootstrap_fp", str)
SIGNED = web.RequestKey("argus_ui_signed", Signed)
# the tasks' change sequence taken before a page's data: the page's live stream starts
# from it, so a change between the render and the stream's start is not lost
SINCE = web.RequestKey("argus_ui_since", str)
CLOSING = web.AppKey("argus_ui_closing", asyncio.Event)  # set when the service shuts down
FEED = web.AppKey("argus_ui_feed", ChangeFeed)  # the process's one change watcher
SLOTS = web.AppKey("argus_ui_slots", StreamSlots)  # live streams open per session/user
GUARD = web.AppKey("argus_ui_signin_guard", FailureGuard)  # failed sign-ins, backoff

HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # no-referrer would make POSTs send "Origin: null"
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
}

PageHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# -- formatting (template filters) -----------------------------------------------------------


def make_env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("service.web.ui", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
        lstrip_blocks=True)
    env.filters["duration"] = duration
    env.filters["iso"] = lambda ts: iso(ts) or ""
    env.filters["progress_text"] = progress_summary
    env.filters["payload_fields"] = payload_fields
    env.globals["shown_fields"] = SHOWN  # the JobSpec's shown fields (_task.html)
    return env


# -- plumbing ---------------------------------------------------------------------------------


def render(request: web.Request, name: str, status: int = 200, **ctx: Any) -> web.Response:
    deps = deps_of(request)
    signed = request.get(SIGNED)
    ctx.setdefault("me", None if signed is None else signed.principal)
    ctx.setdefault("csrf", None if signed is None else signed.csrf)
    ctx.setdefault("now", deps.clock())
    ctx.setdefault("nav", "")
    ctx.setdefault("since", request.get(SINCE, ""))
    text = request.app[ENV].get_template(name).render(**ctx)
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8",
                        headers=HEADERS)


def parse_marker(text: str | None) -> int | None:
    """The change sequence a page carries (``data-since``); None for anything else."""
    text = (text or "").strip()
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        return None
    return int(text)


def signed_in(handler: PageHandler) -> PageHandler:
    """Serve ``handler`` to a valid session; redirect anyone else to the sign-in page
    (a fragment or the live stream answers 401: the script then reloads)."""

    async def wrapper(request: web.Request) -> web.StreamResponse:
        signed = await current(request, request.app[BOOTSTRAP_FP])
        whole_page = not (request.query.get("fragment")
                          or request.path.endswith(("/live", "/log")))
        if signed is None:
            if not whole_page:  # the script's fetches: it reloads on a 401
                return web.Response(status=401, text="signed out", headers=HEADERS)
            target = UI + "/signin?" + urlencode({"next": request.path_qs})
            response = web.HTTPSeeOther(target, headers=HEADERS)
            clear_cookie(response)
            raise response
        request[SIGNED] = signed
        PARTY.set(signed.principal.name)  # the lanes' fair share, as for the API
        if request.method == "GET" and whole_page:  # not the log tail polled every 3 s
            request[SINCE] = str(await request.app[FEED].refresh())  # as of now: exact
        return await handler(request)

    wrapper.__name__ = handler.__name__
    wrapper.__doc__ = handler.__doc__
    return wrapper


def _cross_site(request: web.Request) -> bool:
    """A POST whose ``Origin`` names another site (browsers send it on every POST): refused
    before anything is read, sign-in included (no signing a victim into one's account)."""
    origin = request.headers.get("Origin")
    return origin is not None and urlsplit(origin).netloc != request.host


def _refused(request: web.Request) -> web.Response:
    return render(request, "error.html", status=403, title="Refused",
                  message="The form was stale or forged; reload the page and try again.")


async def _form(request: web.Request) -> dict[str, str]:
    """A small urlencoded form; anything else (too big, undecodable) is an empty one."""
    if request.content_length is not None and request.content_length > FORM_MAX_BYTES:
        return {}
    try:
        body = await request.content.read(FORM_MAX_BYTES + 1)
        if len(body) > FORM_MAX_BYTES:
            return {}
        return dict(parse_qsl(body.decode("utf-8"), max_num_fields=20))
    except (UnicodeDecodeError, ValueError):
        return {}


def _not_found(request: web.Request, what: str) -> web.Response:
    return render(request, "error.html", status=404, title="Not found", message=what)


# -- queue -----------------------------------------------------------------------------------


def held_gpus(deps: AppDeps) -> dict[str, float]:
    seen = deps.metrics.observed.last
    return {} if seen is None or seen.snapshot is None else dict(seen.snapshot.held_gpus)


@signed_in
async def queue_page(request: web.Request) -> web.Response:
    deps = deps_of(request)
    signed = request[SIGNED]
    q = request.query
    state = q.get("state", "")
    state = state if state in STATE_FILTERS else ""
    raw_user = q.get("user", "")
    user = signed.principal.name if raw_user == ME else raw_user
    if user and name_problem(user):
        user = ""
    workload = q.get("workload", "")
    workload = workload if _WORKLOAD.fullmatch(workload) else ""
    page = parse_uint(q.get("page", "1"), 1, 100_000) or 1
    reason = q.get("reason", "")
    reason = reason if reason in {k.value for k in WaitKind} else ""
    if reason:  # a kind of reason: only waiting tasks have one
        state = "pending"
    counts = await queue.counts_by_state(deps)
    pending, pending_total = [], 0
    if state in ("", "pending"):
        pending, pending_total = await queue.pending_page(
            deps, user=user or None, workload=workload or None,
            offset=(page - 1) * PAGE_SIZE, limit=PAGE_SIZE,
            reason=WaitKind(reason) if reason else None)
    blocked: list[tuple[TaskRow, str]] = []
    if state in ("", "pending") and not reason:
        blocked = [(t, why) for t, why in await queue.blocked(deps, BLOCKED_SHOWN, user or None)
                   if not workload or t.workload == workload]
    running: list[TaskRow] = []
    if state in ("", "running"):
        running = [t for t in await queue.active_tasks(deps)
                   if (not user or t.user == user) and (not workload or t.workload == workload)]
    recent: list[TaskRow] = []
    if state in ("", "finished"):
        recent = [t for t in await queue.recent_finished(
                      deps, RECENT * 5 if workload else RECENT, user or None)
                  if not workload or t.workload == workload][:RECENT]
    filters = {"state": state, "user": raw_user if user else "", "workload": workload,
               "reason": reason}

    def link(**changes: str | int) -> str:
        merged = {**filters, **changes}
        return UI + "/queue?" + urlencode({k: v for k, v in merged.items() if v})

    pages = max(1, -(-pending_total // PAGE_SIZE))
    progress = await progress_view.running_progress(deps, deps.clock()) if running else {}
    may = signed.principal.may_act_on  # the summaries: in full to the owner and admins
    running, recent = ([shown_task(t, may(t.user)) for t in rows] for rows in (running, recent))
    blocked = [(shown_task(t, may(t.user)), why) for t, why in blocked]
    return render(
        request, "_queue.html" if q.get("fragment") else "queue.html", nav="queue",
        counts=counts, states=[s.value for s in TaskState], pending=pending,
        pending_total=pending_total, blocked=blocked, running=running, recent=recent,
        held=held_gpus(deps), estimate=deps.metrics.observed.estimate,
        progress=progress,
        filters=filters, page=page, pages=pages,
        workloads=await queue.pending_workloads(deps),
        reason_kinds=[k.value for k in WaitKind],
        link=link)


# -- task ------------------------------------------------------------------------------------


async def _task_of(request: web.Request) -> tuple[AppDeps, str, TaskRow | None]:
    """The page's deps, the task id of its path and that task (None: no such task)."""
    deps = deps_of(request)
    task_id = request.match_info["task_id"]
    return deps, task_id, await reads.task(deps, task_id)


@signed_in
async def task_page(request: web.Request) -> web.Response:
    deps, task_id, task = await _task_of(request)
    if task is None:
        return _not_found(request, f"There is no task {task_id}.")
    who = request[SIGNED].principal
    may_act = who.may_act_on(task.user)  # the curves come from the logs: theirs too
    attempts, events, progress = await asyncio.gather(
        reads.attempts(deps, task_id), reads.events(deps, task_id),
        progress_view.task_progress(deps, task_id, deps.clock()))
    # the JobSpec as written (comments, overrides, maybe a secret) is its owner's, as
    # its logs are; anyone else sees the task's shape (workload, gang, priority, limits)
    spec = await reads.jobspec(deps, task_id) if may_act else None
    curves = await progress_view.task_curves(deps, task_id, request.query.getall(
        "keys", [])[:progress_view.MAX_PAGE_CURVES]) if may_act else None
    found = await reads.dependencies(deps, task_id)
    links = task_dependencies_json(found.after, found.on_unsatisfiable, found.stage,
                                   task.state)
    task, attempts, events = shown_rows(task, attempts, events, may_act)  # the job's words
    return render(
        request, "_task.html" if request.query.get("fragment") else "task.html",
        nav="queue", task=task, attempts=attempts, events=events, jobspec=spec or "",
        may_act=may_act, terminal=task.state in TERMINAL,
        waiting=task.state in RUNNABLE, held=held_gpus(deps), progress=progress, curves=curves,
        estimate=deps.metrics.observed.estimate,
        links=links)


@signed_in
async def task_log(request: web.Request) -> web.Response:
    """The latest attempt's log tail, as plain text: live from Ray while it runs, the
    archive once it ended (the API's own rule). Owner or admin only."""
    deps = deps_of(request)
    task_id = request.match_info["task_id"]
    headers = {**HEADERS, "Content-Type": "text/plain; charset=utf-8"}
    try:
        task = await tasks.owned_task(deps, request[SIGNED].principal, task_id,
                                      "read the logs of")
    except NotFound:
        return web.Response(status=404, text="no such task", headers=headers)
    except NotOwner as exc:
        return web.Response(status=403, text=f"only {exc.owner} or an admin reads these logs",
                            headers=headers)
    attempt = await reads.attempt(deps, task_id, None)
    if attempt is None:
        return web.Response(text="(no attempt yet)", headers=headers)
    text = await reads.attempt_log(deps, attempt, task.user)
    body = "(no log yet)" if not text else _ANSI.sub("", reads.tail_lines(text, LOG_LINES))
    return web.Response(text=body, headers=headers)


@signed_in
async def cancel_confirm(request: web.Request) -> web.Response:
    _, task_id, task = await _task_of(request)
    if task is None:
        return _not_found(request, f"There is no task {task_id}.")
    return render(request, "cancel.html", nav="queue", task=task,
                  may_act=request[SIGNED].principal.may_act_on(task.user),
                  terminal=task.state in TERMINAL)


async def _checked_form(request: web.Request
                        ) -> tuple[web.StreamResponse | None, dict[str, str]]:
    """A task form's POST: the origin and form-token checks. ``(refusal, form)``: a
    refusal page, or None and the form."""
    form = await _form(request)
    if _cross_site(request) or not csrf_ok(request[SIGNED], form.get("csrf")):
        return _refused(request), form
    return None, form


def _refusal(request: web.Request, exc: UseCaseError) -> web.Response:
    """The page for a use case's refusal that is not about the form's value."""
    if isinstance(exc, NotFound):
        return _not_found(request, f"There is no task {exc.ident}.")
    if isinstance(exc, NotOwner):
        return render(request, "error.html", status=403, title="Refused", message=(
            f"Only its owner ({exc.owner}) or an admin may {exc.action} {exc.ident}."))
    return render(request, "error.html", status=409, title="Refused", message=exc.message)


@signed_in
async def cancel(request: web.Request) -> web.StreamResponse:
    task_id = request.match_info["task_id"]
    refusal, _ = await _checked_form(request)
    if refusal is not None:
        return refusal
    try:
        await tasks.cancel(deps_of(request), request[SIGNED].principal, task_id)
    except WrongState:
        pass  # it ended meanwhile: its page says so
    except UseCaseError as exc:
        return _refusal(request, exc)
    raise web.HTTPSeeOther(f"{UI}/tasks/{task_id}", headers=HEADERS)


def _highest(who: Principal, sched: SchedulerSettings) -> int:
    """The highest priority ``who`` may ask for."""
    return MAX_PRIORITY if who.is_admin else sched.max_user_priority


def _priority_page(request: web.Request, task: TaskRow, *, status: int = 200,
                   error: str | None = None) -> web.Response:
    who = request[SIGNED].principal
    return render(request, "priority.html", status=status, nav="queue", task=task,
                  may_act=who.may_act_on(task.user), waiting=task.state in RUNNABLE,
                  lowest=MIN_PRIORITY, highest=_highest(who, deps_of(request).settings.scheduler),
                  error=error)


@signed_in
async def priority_form(request: web.Request) -> web.Response:
    task_id = request.match_info["task_id"]
    task = await reads.task(deps_of(request), task_id)
    if task is None:
        return _not_found(request, f"There is no task {task_id}.")
    return _priority_page(request, task)


@signed_in
async def set_priority(request: web.Request) -> web.StreamResponse:
    """The priority form's answer: the use case's checks (owner or admin, the range, the
    caller's allowance, a waiting task), then back to the task page."""
    task_id = request.match_info["task_id"]
    refusal, form = await _checked_form(request)
    if refusal is not None:
        return refusal
    text = form.get("priority", "").strip()
    value = int(text) if _PRIORITY.fullmatch(text) else None  # None: not a number
    try:
        await tasks.set_priority(deps_of(request), request[SIGNED].principal, task_id, value)
    except (Invalid, NotAllowed, WrongState) as exc:
        task = exc.task
        if task is None:  # pragma: no cover - the use case names the task it refused
            raise
        if isinstance(exc, WrongState):
            return _priority_page(request, task, status=409)  # it says it no longer waits
        if isinstance(exc, Invalid):
            return _priority_page(request, task, status=400,
                                  error=f"The priority {exc.message}.")
        return _priority_page(request, task, status=403, error=f"Refused: {exc.message}.")
    except UseCaseError as exc:
        return _refusal(request, exc)
    raise web.HTTPSeeOther(f"{UI}/tasks/{task_id}", headers=HEADERS)
