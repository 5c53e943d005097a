"""The console's pages: sign-in, queue, task, cluster, charts; cancel and priority.

Each page is a Jinja2 template rendered with autoescape on, so whatever a user typed (a
JobSpec, an override, a path, a reason that quotes them) reaches the browser as text.
Pages are served to a signed-in session only (``sessions``); a visit without one is
redirected to the sign-in page. Every response forbids caching and framing and carries a
Content-Security-Policy that allows the console's own script and style only (no inline
script runs, whatever a page contains).

``?fragment=1`` renders a page's live part only: the console's script fetches it when
the live stream (``live``) says something changed, and swaps it in place. Rows are in
queue order (by submission) on the server, so they never jump around while updating.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import jinja2
from aiohttp import web

from service.api.auth import AuthFailure
from service.api.deps import AppDeps, deps_of
from service.api.handlers import _attempt_log, _on_cluster, _tail
from service.api.params import parse_uint
from service.api.pipelines import blocked_tasks, task_dependencies
from service.cluster import ClusterError
from service.config import SchedulerSettings
from service.failure_guard import FailureGuard
from service.observed import reason_class, total_of
from service.offload import PARTY
from service.priorities import MAX_PRIORITY, MIN_PRIORITY, allowance_problem, range_problem
from service.ray_address import parse_record, read_file
from service.rows import CancelKind, TaskRow
from service.states import RUNNABLE, TERMINAL, TaskState
from service.store import StaleState, TaskNotFound
from service.timefmt import duration, iso
from service.ui import charts, progress_view
from service.ui.changes import ChangeFeed
from service.ui.progress_text import progress_summary
from service.ui.sessions import (
    Signed,
    clear_cookie,
    csrf_ok,
    current,
    set_cookie,
    sign_in,
)
from service.ui.slots import StreamSlots
from service.users import ME, Principal, name_problem, parse_token_id, presentable

log = logging.getLogger(__name__)

UI = "/ui"
PAGE_SIZE = 50
RECENT = 20
BLOCKED_SHOWN = 50  # tasks waiting on other tasks, oldest first
LOG_LINES = 200
FORM_MAX_BYTES = 8192
CHART_WINDOW_S = 24 * 3600.0
USAGE_WINDOW_S = 7 * 24 * 3600.0
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
SIGNIN_LOG_S = 60.0  # failed sign-ins are logged in aggregate, at most this often

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
        loader=jinja2.PackageLoader("service.ui", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
        lstrip_blocks=True)
    env.filters["duration"] = duration
    env.filters["iso"] = lambda ts: iso(ts) or ""
    env.filters["reason_class"] = reason_class
    env.filters["progress_text"] = progress_summary
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


def _safe_next(raw: str | None) -> str:
    """Where to go after signing in: a console path only (no other site, no ``//``)."""
    if (raw and raw.startswith(UI + "/") and not raw.startswith("//") and "\\" not in raw
            and raw.isprintable() and len(raw) <= 2000):
        return raw
    return UI + "/queue"


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


# -- sign-in ---------------------------------------------------------------------------------


async def root(request: web.Request) -> web.StreamResponse:
    raise web.HTTPSeeOther(UI + "/queue", headers=HEADERS)


async def signin_form(request: web.Request) -> web.Response:
    return render(request, "signin.html", next=_safe_next(request.query.get("next")),
                  error=None)


async def signin(request: web.Request) -> web.StreamResponse:
    if _cross_site(request):
        return _refused(request)
    form = await _form(request)
    token = form.get("token", "").strip()
    target = _safe_next(form.get("next"))
    guard = request.app[GUARD]
    # who is guessing: the client's address, and the account the token names (its public
    # id; the environment's token, or anything else, is one account)
    keys = (f"address:{request.remote}", f"account:{parse_token_id(token) or 'other'}")
    wait = guard.wait_s(*keys)
    if wait > 0:
        retry = max(1, math.ceil(wait))
        response = render(request, "signin.html", status=429, next=target, error=(
            f"Too many failed sign-ins from this address or for this token; try again in "
            f"{retry} s."))
        response.headers["Retry-After"] = str(retry)
        return response
    error = "Enter an API token."
    if token:
        if not presentable(token):
            error = "That is not a valid token."
        else:
            try:
                raw, _ = await sign_in(request, token, request.app[BOOTSTRAP_FP])
            except AuthFailure as exc:
                error = f"Sign-in refused: {exc.message}."
            else:
                guard.succeeded(*keys)
                response = web.HTTPSeeOther(target, headers=HEADERS)
                set_cookie(request, response, raw)
                raise response
        guard.failed(*keys)
        if failures := guard.report(SIGNIN_LOG_S):
            log.warning("%d failed console sign-in(s) since the last report", failures)
    return render(request, "signin.html", status=401, next=target, error=error)


@signed_in
async def signout(request: web.Request) -> web.StreamResponse:
    signed = request[SIGNED]
    form = await _form(request)
    if _cross_site(request) or not csrf_ok(signed, form.get("csrf")):
        return _refused(request)
    await deps_of(request).store.delete_session(signed.id_sha256)
    response = web.HTTPSeeOther(UI + "/signin", headers=HEADERS)
    clear_cookie(response)
    raise response


# -- queue -----------------------------------------------------------------------------------


def _held(deps: AppDeps) -> dict[str, float]:
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
    store = deps.store
    counts = await store.counts_by_state()
    pending, pending_total = [], 0
    if state in ("", "pending"):
        pending, pending_total = await store.queue_page(
            user=user or None, workload=workload or None, offset=(page - 1) * PAGE_SIZE,
            limit=PAGE_SIZE)
    blocked: list[tuple[TaskRow, str]] = []
    if state in ("", "pending"):
        blocked = [(t, why) for t, why in await store.read(
            lambda s: blocked_tasks(s, BLOCKED_SHOWN, user or None))
            if not workload or t.workload == workload]
    running: list[TaskRow] = []
    if state in ("", "running"):
        running = [t for t in await store.active_tasks()
                   if (not user or t.user == user) and (not workload or t.workload == workload)]
    recent: list[TaskRow] = []
    if state in ("", "finished"):
        recent = [t for t in await store.recent_finished(RECENT * 5 if workload else RECENT,
                                                         user or None)
                  if not workload or t.workload == workload][:RECENT]
    filters = {"state": state, "user": raw_user if user else "", "workload": workload}

    def link(**changes: str | int) -> str:
        merged = {**filters, **changes}
        return UI + "/queue?" + urlencode({k: v for k, v in merged.items() if v})

    pages = max(1, -(-pending_total // PAGE_SIZE))
    progress = await progress_view.running_progress(store, deps.clock()) if running else {}
    return render(
        request, "_queue.html" if q.get("fragment") else "queue.html", nav="queue",
        counts=counts, states=[s.value for s in TaskState], pending=pending,
        pending_total=pending_total, blocked=blocked, running=running, recent=recent,
        held=_held(deps), estimate=deps.metrics.observed.estimated_start,
        progress=progress,
        filters=filters, workloads=await store.pending_workloads(), page=page, pages=pages,
        link=link)


# -- task ------------------------------------------------------------------------------------


@signed_in
async def task_page(request: web.Request) -> web.Response:
    deps = deps_of(request)
    task_id = request.match_info["task_id"]
    task = await deps.store.get_task(task_id)
    if task is None:
        return _not_found(request, f"There is no task {task_id}.")
    who = request[SIGNED].principal
    may_act = who.may_act_on(task.user)  # the curves come from the logs: theirs too
    attempts, events, progress = await asyncio.gather(
        deps.store.list_attempts(task_id), deps.store.events(task_id),
        progress_view.task_progress(deps.store, task_id, deps.clock()))
    # the JobSpec as written (comments, overrides, maybe a secret) is its owner's, as
    # its logs are; anyone else sees the task's shape (workload, gang, priority, limits)
    spec = await deps.store.task_jobspec(task_id) if may_act else None
    curves = await progress_view.task_curves(deps.store, task_id, request.query.getall(
        "keys", [])[:progress_view.MAX_PAGE_CURVES]) if may_act else None
    links = await task_dependencies(deps, task)
    return render(
        request, "_task.html" if request.query.get("fragment") else "task.html",
        nav="queue", task=task, attempts=attempts, events=events, jobspec=spec or "",
        may_act=may_act, terminal=task.state in TERMINAL,
        waiting=task.state in RUNNABLE, held=_held(deps), progress=progress, curves=curves,
        estimate=deps.metrics.observed.estimated_start,
        links=links)


@signed_in
async def task_log(request: web.Request) -> web.Response:
    """The latest attempt's log tail, as plain text: live from Ray while it runs, the
    archive once it ended (the API's own rule). Owner or admin only."""
    deps = deps_of(request)
    task_id = request.match_info["task_id"]
    task = await deps.store.get_task(task_id)
    headers = {**HEADERS, "Content-Type": "text/plain; charset=utf-8"}
    if task is None:
        return web.Response(status=404, text="no such task", headers=headers)
    if not request[SIGNED].principal.may_act_on(task.user):
        return web.Response(status=403, text=f"only {task.user} or an admin reads these logs",
                            headers=headers)
    attempt = await deps.store.get_attempt(task_id, None)
    if attempt is None:
        return web.Response(text="(no attempt yet)", headers=headers)
    text = await _attempt_log(deps, attempt, task.user)
    body = "(no log yet)" if not text else _ANSI.sub("", _tail(text, LOG_LINES))
    return web.Response(text=body, headers=headers)


@signed_in
async def cancel_confirm(request: web.Request) -> web.Response:
    deps = deps_of(request)
    task_id = request.match_info["task_id"]
    task = await deps.store.get_task(task_id)
    if task is None:
        return _not_found(request, f"There is no task {task_id}.")
    return render(request, "cancel.html", nav="queue", task=task,
                  may_act=request[SIGNED].principal.may_act_on(task.user),
                  terminal=task.state in TERMINAL)


async def _owned_task_form(request: web.Request, action: str
                           ) -> tuple[web.StreamResponse | None, dict[str, str], TaskRow | None]:
    """A task form's POST: the origin and form-token checks, the task, and whether the
    caller may ``action`` it. ``(refusal, form, task)``: a refusal page, or None and the
    form and the task."""
    signed = request[SIGNED]
    task_id = request.match_info["task_id"]
    form = await _form(request)
    if _cross_site(request) or not csrf_ok(signed, form.get("csrf")):
        return _refused(request), form, None
    task = await deps_of(request).store.get_task(task_id)
    if task is None:
        return _not_found(request, f"There is no task {task_id}."), form, None
    if not signed.principal.may_act_on(task.user):
        return render(request, "error.html", status=403, title="Refused", message=(
            f"Only its owner ({task.user}) or an admin may {action} {task_id}.")), form, None
    return None, form, task


@signed_in
async def cancel(request: web.Request) -> web.StreamResponse:
    deps = deps_of(request)
    signed = request[SIGNED]
    task_id = request.match_info["task_id"]
    refusal, _, _ = await _owned_task_form(request, "cancel")
    if refusal is not None:
        return refusal
    outcome = await deps.store.cancel(task_id, deps.clock(), signed.principal.name)
    if outcome.kind is CancelKind.STOPPING and outcome.ray_submission_id:
        try:  # best effort, as the API does: the scheduler stops it anyway
            await _on_cluster(deps, deps.cluster.stop, outcome.ray_submission_id)
        except ClusterError as exc:
            log.warning("stop %s: %s (the scheduler will retry)", outcome.ray_submission_id,
                        exc)
    deps.waker.wake()
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


def _form_priority(raw: str, who: Principal, sched: SchedulerSettings, current: int
                  ) -> tuple[int | None, int, str | None]:
    """The priority a form asks for: (value, status, problem); the API's rules."""
    text = raw.strip()
    value = int(text) if _PRIORITY.fullmatch(text) else None
    problem = range_problem(value)
    if value is None or problem:
        return None, 400, f"The priority {problem}."
    problem = allowance_problem(value, is_admin=who.is_admin,
                                max_user_priority=sched.max_user_priority, current=current)
    return (None, 403, f"Refused: {problem}.") if problem else (value, 200, None)


@signed_in
async def priority_form(request: web.Request) -> web.Response:
    task_id = request.match_info["task_id"]
    task = await deps_of(request).store.get_task(task_id)
    if task is None:
        return _not_found(request, f"There is no task {task_id}.")
    return _priority_page(request, task)


@signed_in
async def set_priority(request: web.Request) -> web.StreamResponse:
    """The priority form's answer: the API's checks (owner or admin, the caller's
    allowance, a waiting task), then back to the task page."""
    deps = deps_of(request)
    task_id = request.match_info["task_id"]
    refusal, form, task = await _owned_task_form(request, "change the priority of")
    if refusal is not None or task is None:
        return refusal or _not_found(request, f"There is no task {task_id}.")
    who = request[SIGNED].principal
    priority, status, problem = _form_priority(form.get("priority", ""), who,
                                              deps.settings.scheduler, task.priority)
    if priority is None:
        return _priority_page(request, task, status=status, error=problem)
    try:
        await deps.store.set_priority(task_id, priority, deps.clock(), who.name)
    except TaskNotFound:
        return _not_found(request, f"There is no task {task_id}.")
    except StaleState:
        task = await deps.store.get_task(task_id) or task
        return _priority_page(request, task, status=409)  # the page says it no longer waits
    deps.waker.wake()
    raise web.HTTPSeeOther(f"{UI}/tasks/{task_id}", headers=HEADERS)


# -- cluster ---------------------------------------------------------------------------------


def _head(path: str, now: float) -> dict[str, Any]:
    """head.json as the service reads it: generation, age, or why it cannot be read."""
    try:
        text, mtime = read_file(path)
        record = parse_record(text)
    except (OSError, ValueError) as exc:
        return {"path": path, "error": str(exc)}
    return {"path": path, "error": None, "generation": record.generation, "seq": record.seq,
            "head_ip": record.head_ip, "age_s": now - record.written_at,
            "ttl_s": record.ttl_s, "stale": now - record.written_at > record.ttl_s,
            "mtime": mtime}


@signed_in
async def cluster_page(request: web.Request) -> web.Response:
    deps = deps_of(request)
    now = deps.clock()
    seen = deps.metrics.observed.last
    nodes = []
    if seen is not None and seen.snapshot is not None:
        for n in seen.snapshot.nodes:
            nodes.append({
                "id": n.node_id, "ip": n.node_ip,
                "gpus_free": n.get("GPU"), "gpus_total": total_of(n, "GPU"),
                "cpus_free": n.get("CPU"), "cpus_total": total_of(n, "CPU")})
    head = None
    if deps.settings.head_json:
        head = await deps.work.run(_head, deps.settings.head_json, now)
    active = await deps.store.active_tasks()
    return render(
        request, "_cluster.html" if request.query.get("fragment") else "cluster.html",
        nav="cluster", seen=seen, nodes=nodes, head=head, active=active, held=_held(deps),
        ray_address=deps.settings.ray_address)


# -- charts ----------------------------------------------------------------------------------


@signed_in
async def charts_page(request: web.Request) -> web.Response:
    deps = deps_of(request)
    now = deps.clock()
    start = now - CHART_WINDOW_S
    samples = await deps.store.samples_since(start)
    used = await deps.store.gpu_seconds_in_window(now - USAGE_WINDOW_S, now, now)
    util = [(s.ts, None if not s.gpus_total else 100.0 * (s.gpus_used or 0) / s.gpus_total)
            for s in samples]
    bars = sorted(((user or "(no owner)", seconds / 3600) for user, seconds in used.items()),
                  key=lambda b: -b[1])
    return render(
        request, "charts.html", nav="charts", samples=len(samples),
        queue_chart=charts.line_chart([(s.ts, s.pending) for s in samples], start=start,
                                      end=now, title="Pending tasks, last 24 h"),
        running_chart=charts.line_chart([(s.ts, s.running) for s in samples], start=start,
                                        end=now, title="Running tasks, last 24 h"),
        gpu_chart=charts.line_chart(util, start=start, end=now, unit="%", y_max=100.0,
                                    title="GPUs allocated, % of all, last 24 h"),
        usage_chart=charts.bar_chart(bars, unit=" h", title="GPU-hours per user, last 7 days"))

