"""Users, tokens, ``/me`` and GPU accounting: one coroutine per route. Each parses the
request, calls its use case (``service.usecases.accounts``) and renders the answer or the
refusal (``api.outcomes``).

Who may do what (the route table's ``Access`` first, then the use cases):

* an admin creates, lists, disables and enables users; users are never deleted (their
  tasks and their GPU time stay theirs), so ``DELETE`` answers 405 and says so;
* a user reads themself and creates, lists and revokes their own tokens; an admin does
  it for anyone (``/users/me/...`` is the caller);
* the bootstrap admin (the token in the environment) cannot be disabled: whoever holds
  the machine's environment would lock everyone out, and the token is revoked by
  changing the environment variable;
* disabling a user refuses their tokens at once (401, saying the user is disabled);
  their tasks on the cluster run to their end; their queued tasks stay queued and are
  not started while the user is disabled (an admin may cancel them, or enable the user
  again);
* everyone may read the usage of everyone (everyone sees every task anyway).

The secret of a token leaves the service once, in the answer that created it; lists
show its public prefix only. Every write here makes the authenticator forget its cached
tokens, so a revocation or a disable takes effect on the next request.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from service.domain.timefmt import iso, parse_time
from service.domain.users import (
    ME,
    name_problem,
)
from service.policy.usage import report_of
from service.usecases import accounts
from service.usecases.ports import UseCaseError
from service.web.api.body import read_shape
from service.web.api.deps import AppDeps, deps_of, principal_of
from service.web.api.handlers import user_filter
from service.web.api.middlewares import ApiError
from service.web.api.outcomes import api_error, asked
from service.web.api.views import token_json, usage_json, user_json
from service.web.shapes.accounts import NewTokenRequest, NewUser

DEFAULT_LABEL = "default"
USAGE_TASKS_DEFAULT, USAGE_TASKS_MAX = 100, 1000


# -- helpers ------------------------------------------------------------------------------


def _target(request: web.Request) -> str:
    """The user named in the path (``me``: the caller); 400 for a malformed name."""
    raw = request.match_info["name"]
    if raw == ME:
        return principal_of(request).name
    problem = name_problem(raw)
    if problem:
        raise ApiError(400, "invalid user name", details=[{"field": "name",
                                                          "message": problem}])
    return raw


def _user_view(deps: AppDeps, user: Any) -> dict[str, Any]:
    return user_json(user, deps.settings.users.limits_for(user.name))


# -- me -----------------------------------------------------------------------------------


async def me(request: web.Request) -> web.Response:
    deps = deps_of(request)
    who = principal_of(request)
    token_id = who.token_id
    user, token = await accounts.me(deps, who)
    body: dict[str, Any] = (_user_view(deps, user) if user is not None else {
        "name": who.name, "role": who.role.value, "enabled": True,
        "limits": None})
    body["role"] = who.role.value
    if token_id is None:
        body["token"] = {"bootstrap": True, "prefix": None,
                         "label": f"the {deps.settings.token_env} environment variable"}
    else:
        body["token"] = ({"bootstrap": False, **token_json(token, deps.clock())}
                         if token is not None else None)
    return web.json_response(body)


# -- users --------------------------------------------------------------------------------


async def list_users(request: web.Request) -> web.Response:
    deps = deps_of(request)
    users = await accounts.users(deps)
    return web.json_response({"users": [_user_view(deps, u) for u in users]})


async def create_user(request: web.Request) -> web.Response:
    deps = deps_of(request)
    new = await read_shape(request, NewUser, "user")
    user = await asked(accounts.create_user(deps, principal_of(request), new.name, new.role))
    return web.json_response(_user_view(deps, user), status=201)


async def get_user(request: web.Request) -> web.Response:
    deps = deps_of(request)
    name = _target(request)
    user = await asked(accounts.user(deps, principal_of(request), name))
    return web.json_response(_user_view(deps, user))


async def delete_user(request: web.Request) -> web.Response:
    name = _target(request)
    raise ApiError(
        405, f"users are never deleted (their tasks and GPU time stay theirs); disable "
             f"{name} instead: POST /api/v2/users/{name}:disable",
        details=[{"field": "method", "message": "DELETE is not allowed on a user"}])


async def _set_enabled(request: web.Request, enabled: bool) -> web.Response:
    deps = deps_of(request)
    name = _target(request)
    change = await asked(accounts.set_enabled(deps, principal_of(request), name, enabled))
    verb = "enabled" if enabled else "disabled"
    if enabled:
        effect = "the user's tokens work again and queued tasks may start"
    else:
        effect = (f"the user's tokens are refused; {change.active_tasks} task(s) on the "
                  f"cluster run to their end; {change.runnable_tasks} queued task(s) wait "
                  "until the user is enabled again (or an admin cancels them)")
    return web.json_response({
        "user": _user_view(deps, change.user),
        "changed": change.changed,
        "active_tasks": change.active_tasks,
        "queued_tasks": change.runnable_tasks,
        "effect": effect if change.changed else f"already {verb}: nothing changed",
    })


async def disable_user(request: web.Request) -> web.Response:
    return await _set_enabled(request, False)


async def enable_user(request: web.Request) -> web.Response:
    return await _set_enabled(request, True)


# -- tokens -------------------------------------------------------------------------------


async def create_token(request: web.Request) -> web.Response:
    deps = deps_of(request)
    name = _target(request)
    who = principal_of(request)
    try:  # before the body is read: a caller who may not gets a 403 whatever they sent
        accounts.may_manage(who, name, "create tokens for this user")
    except UseCaseError as exc:
        raise api_error(exc) from exc
    now = deps.clock()
    wanted = await read_shape(request, NewTokenRequest, "token request", required=False,
                              context={"now": now})
    label, expires_at = wanted.label, wanted.expiry(now)
    created = await asked(accounts.create_token(deps, who, name, label, expires_at, now))
    body = token_json(created.row, now)
    body["token"] = created.secret
    body["note"] = "the token is shown this once: keep it now"
    return web.json_response(body, status=201)


async def list_tokens(request: web.Request) -> web.Response:
    deps = deps_of(request)
    name = _target(request)
    tokens = await asked(accounts.tokens(deps, principal_of(request), name))
    now = deps.clock()
    return web.json_response({"user": name, "tokens": [token_json(t, now) for t in tokens]})


async def revoke_token(request: web.Request) -> web.Response:
    deps = deps_of(request)
    name = _target(request)
    token_id = request.match_info["token_id"]
    token, changed = await asked(accounts.revoke_token(deps, principal_of(request), name,
                                                       token_id))
    return web.json_response({**token_json(token, deps.clock()), "changed": changed})


# -- accounting ---------------------------------------------------------------------------


def _time_param(request: web.Request, name: str, default: float,
                errors: list[dict[str, Any]]) -> float:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        return parse_time(raw)
    except ValueError as exc:
        errors.append({"field": name, "message": str(exc)})
        return default


def _task_limit(request: web.Request, errors: list[dict[str, Any]]) -> int:
    raw = request.query.get("tasks")
    if raw is None or raw == "":
        return USAGE_TASKS_DEFAULT
    if raw.isascii() and raw.isdigit() and int(raw) <= USAGE_TASKS_MAX:
        return int(raw)
    errors.append({"field": "tasks", "message": f"must be an integer from 0 to "
                                                f"{USAGE_TASKS_MAX}, got {raw[:40]!r}"})
    return USAGE_TASKS_DEFAULT


async def usage(request: web.Request) -> web.Response:
    deps = deps_of(request)
    now = deps.clock()
    errors: list[dict[str, Any]] = []
    window_from = _time_param(request, "from", 0.0, errors)
    window_to = _time_param(request, "to", now, errors)
    user = await user_filter(request, errors)
    limit = _task_limit(request, errors)
    if not errors and not window_from < window_to:
        errors.append({"field": "from", "message": f"must be before to "
                                                   f"({iso(window_from)} >= {iso(window_to)})"})
    if errors:
        raise ApiError(400, "invalid query parameters", details=errors)
    summary = await accounts.usage(deps, window_from, window_to, now, user, limit)
    text = await deps.work.run(  # CPU work, the encoding included: off the event loop
        lambda: json.dumps(usage_json(report_of(summary, window_from, window_to, now), now,
                                      limit)))
    return web.Response(text=text, content_type="application/json")
