"""The web console, served by argus-api itself under ``/ui/``.

Pages (``pages``) rendered from Jinja2 templates shipped in the package, a live stream
(``live``: server-sent events), a stylesheet and a small script (``static/``), charts as
inline SVG (``charts``), sign-in sessions (``sessions``). ``setup`` adds the routes to an
API application; they are public at the bearer-token layer and check the session cookie
themselves.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from importlib.resources import files

from aiohttp import web

from service.policy.failure_guard import FailureGuard
from service.usecases import reads
from service.web.api.deps import DEPS
from service.web.ui import (
    cluster_view,
    live,
    nodes_view,
    pages,
    pipeline_view,
    signin,
    webhooks_view,
)
from service.web.ui.changes import ChangeFeed
from service.web.ui.sessions import fingerprint
from service.web.ui.slots import StreamSlots

TASK = "{task_id:[^/:]+}"
NODE = "{node:[^/:]+}"
NODE_ACTION = "{action:cordon|drain|resume}"
POLL_S = 1.0  # how often the process reads the tasks' change sequence

STATIC_TYPES = {"console.css": "text/css", "console.js": "text/javascript"}


def _static() -> dict[str, bytes]:
    folder = files("service.web.ui") / "static"
    return {name: (folder / name).read_bytes() for name in STATIC_TYPES}


def static_handler(assets: dict[str, bytes]) -> pages.PageHandler:
    async def static(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        body = assets.get(name)
        if body is None:
            return web.Response(status=404, text="not found", headers=pages.HEADERS)
        return web.Response(body=body, headers={
            "Content-Type": f"{STATIC_TYPES[name]}; charset=utf-8",
            "Cache-Control": "max-age=300", "X-Content-Type-Options": "nosniff"})
    return static


# (method, path, handler): every console route. The API's route table and OpenAPI
# document leave them out; the auth middleware lets them through (public), and each
# page checks the session itself.
ROUTES: tuple[tuple[str, str, pages.PageHandler], ...] = (
    ("GET", "/ui", signin.root),
    ("GET", "/ui/", signin.root),
    ("GET", "/ui/signin", signin.signin_form),
    ("POST", "/ui/signin", signin.signin),
    ("POST", "/ui/signout", signin.signout),
    ("GET", "/ui/queue", pages.queue_page),
    ("GET", f"/ui/tasks/{TASK}", pages.task_page),
    ("GET", f"/ui/tasks/{TASK}/log", pages.task_log),
    ("GET", f"/ui/tasks/{TASK}/cancel", pages.cancel_confirm),
    ("POST", f"/ui/tasks/{TASK}/cancel", pages.cancel),
    ("GET", f"/ui/tasks/{TASK}/priority", pages.priority_form),
    ("POST", f"/ui/tasks/{TASK}/priority", pages.set_priority),
    ("GET", "/ui/pipelines/{pipeline_id:[^/:]+}", pipeline_view.pipeline_page),
    ("GET", "/ui/cluster", cluster_view.cluster_page),
    ("GET", f"/ui/nodes/{NODE}/{NODE_ACTION}", nodes_view.action_form),
    ("POST", f"/ui/nodes/{NODE}/{NODE_ACTION}", nodes_view.act),
    ("GET", "/ui/charts", cluster_view.charts_page),
    ("GET", "/ui/webhooks", webhooks_view.webhooks_page),
    ("POST", "/ui/webhooks", webhooks_view.create),
    ("POST", "/ui/webhooks/{hook_id:[^/:]+}/delete", webhooks_view.delete),
    ("GET", "/ui/live", live.live),
    ("GET", "/ui/static/{name}", None),  # filled in by setup (the assets, read once)
)


def setup(app: web.Application, bootstrap_token: str) -> list[tuple[str, str]]:
    """Add the console to ``app``; returns the (method, route template) pairs added, for
    the auth middleware's table (all public)."""
    app[pages.ENV] = pages.make_env()
    app[pages.BOOTSTRAP_FP] = fingerprint(bootstrap_token)
    app[pages.CLOSING] = closing = asyncio.Event()
    settings = app[DEPS].settings
    app[pages.SLOTS] = StreamSlots(settings.ui_max_streams_per_session,
                                   settings.ui_max_streams_per_user)
    app[pages.GUARD] = FailureGuard(app[DEPS].clock)
    deps = app[DEPS]
    app[pages.FEED] = feed = ChangeFeed(lambda: reads.change_seq(deps), poll_s=POLL_S)

    async def _watch(_: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(feed.run(closing), name="argus-ui-change-feed")
        yield
        closing.set()
        await task

    async def _closing(_: web.Application) -> None:
        closing.set()

    app.cleanup_ctx.append(_watch)
    app.on_shutdown.append(_closing)
    static = static_handler(_static())
    added = []
    for method, path, handler in ROUTES:
        route = app.router.add_route(method, path, handler or static)
        canonical = route.resource.canonical if route.resource is not None else path
        added.append((method, canonical))
        if method == "GET":
            app.router.add_route("HEAD", path, handler or static)
            added.append(("HEAD", canonical))
    return added
