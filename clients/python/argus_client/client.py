"""``ArgusClient``: the SDK of the ``/api/v2`` API.

    from argus_client import ArgusClient
    client = ArgusClient()                        # $ARGUS_URL, $ARGUS_API_TOKEN
    task = client.wait(client.submit("job.yaml").task_id, on_update=print)
"""

from __future__ import annotations

import functools
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from argus_client.env import DEFAULT_URL, TOKEN_ENV, URL_ENV
from argus_client.errors import ArgusError, Conflict, NoLogYet, NotFound, UsageError
from argus_client.models import (
    Attempt,
    CancelResult,
    DeletedWebhook,
    Deliveries,
    Event,
    LogChunk,
    Me,
    Metrics,
    NewToken,
    NewWebhook,
    NodeChanged,
    NodeEventList,
    NodeList,
    Pipeline,
    PipelineList,
    PipelineSubmitted,
    Queue,
    RevokedToken,
    Submitted,
    Task,
    TaskPage,
    TokenList,
    Usage,
    User,
    UserStatus,
    WebhookList,
)
from argus_client.retry import OnRetry, retrying, submit_transient
from argus_client.transport import Opener, Transport

API = "/api/v2"
YAML = "application/yaml"
JSON = "application/json"
LOG_ATTEMPT_HEADER = "X-Argus-Attempt"
LOG_END_HEADER = "X-Argus-Log-End"
KEY_HEADER = "Idempotency-Key"
SUBMIT_ATTEMPTS = 8  # tries of one submit, in all (1 + 7 retries: 0.5, 1, 2, 4, 8, 8, 8 s)
SUBMIT_PATIENCE_S = 120.0  # and no retry begins later than this after the first try
JobSpecInput = Mapping[str, Any] | str | bytes | os.PathLike[str]


class WaitTimeout(ArgusError):
    """``wait`` or ``wait_pipeline`` reached its deadline; ``task`` is the last ``Task``
    (or ``Pipeline``) seen."""

    def __init__(self, task: Task | Pipeline, timeout_s: float) -> None:
        name = task.pipeline_id if isinstance(task, Pipeline) else task.task_id
        super().__init__(f"{name} still {task.state} after {timeout_s:g}s")
        self.task = task
        self.timeout_s = timeout_s


def _task_path(task_id: str, suffix: str = "") -> str:
    return f"{API}/tasks/{task_id}{suffix}"


def _user_path(name: str | None, suffix: str = "") -> str:
    return f"{API}/users/{name or 'me'}{suffix}"


def jobspec_body(spec: JobSpecInput) -> tuple[bytes, str]:
    """The body and content type of a submit: a mapping goes as JSON; a path (a ``Path``,
    or a one-line string without ``": "``) as the file's bytes, JSON for ``*.json``, else
    YAML; any other string (a YAML document) or bytes as YAML text."""
    if isinstance(spec, Mapping):
        return json.dumps(dict(spec)).encode(), JSON
    if isinstance(spec, bytes):
        return spec, YAML
    if isinstance(spec, str) and ("\n" in spec or ": " in spec or spec.lstrip()[:1] == "{"):
        return spec.encode(), YAML
    path = Path(spec)
    try:
        data = path.read_bytes()
    except OSError as exc:  # nothing is sent: the caller's own input (UsageError)
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    return data, JSON if path.suffix.lower() == ".json" else YAML


class ArgusClient:
    """A client of one Argus service. ``url`` and ``token`` default to ``$ARGUS_URL``
    (else http://127.0.0.1:8080) and ``$ARGUS_API_TOKEN``. ``sleep``/``clock`` are what
    ``wait``, ``follow_logs`` and a submit's retries wait with (tests inject their own).
    ``submit_attempts``: the tries of one submit in all (1: never retried)."""

    def __init__(self, url: str | None = None, token: str | None = None, *,
                 timeout: float = 30.0, opener: Opener | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 submit_attempts: int = SUBMIT_ATTEMPTS) -> None:
        url = url or os.environ.get(URL_ENV) or DEFAULT_URL
        token = token if token is not None else os.environ.get(TOKEN_ENV, "").strip()
        if not token:
            raise UsageError(f"no API token: pass token= or set {TOKEN_ENV}")
        self.http = Transport(url, token, timeout=timeout, opener=opener)
        self.sleep = sleep
        self.clock = clock
        if submit_attempts < 1:
            raise UsageError(f"submit_attempts must be at least 1, got {submit_attempts}")
        self.submit_attempts = submit_attempts

    @property
    def url(self) -> str:
        return self.http.url

    def request_json(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                     body: Any = None) -> Any:
        """Any JSON operation of the API (``body``: a JSON value, or None for no body)."""
        data = None if body is None else json.dumps(body).encode()
        return self.http.json(method, path, query=query, body=data,
                              content_type=None if data is None else JSON)

    # -- tasks -----------------------------------------------------------------------------

    def submit(self, spec: JobSpecInput, *, idempotency_key: str | None = None,
               on_retry: OnRetry | None = None) -> Submitted:
        """Submit a JobSpec: a dict (sent as JSON), a YAML string, or a file path.

        Lands exactly once: sent with an ``Idempotency-Key`` (``idempotency_key``, else a
        fresh UUID) and sent again with the same key and body through connection errors,
        503s (at least their ``Retry-After``) and the API's 409 for a first try still in
        progress, up to ``submit_attempts`` tries; the service answers a retry of a
        submit that did land with the task it created."""
        body, content_type = jobspec_body(spec)
        return Submitted.from_json(self._submit(f"{API}/tasks", body, content_type,
                                                idempotency_key, on_retry))

    def _submit(self, path: str, body: bytes, content_type: str, key: str | None,
                on_retry: OnRetry | None) -> Any:
        """POST a submit's ``body`` with its key, retried as ``submit`` says."""
        headers = {KEY_HEADER: key or str(uuid.uuid4())}
        return retrying(
            lambda: self.http.json("POST", path, body=body, content_type=content_type,
                                   headers=headers),
            deadline=self.clock() + SUBMIT_PATIENCE_S, clock=self.clock, sleep=self.sleep,
            on_retry=on_retry, first=0.5, cap=8.0, transient=submit_transient,
            attempts=self.submit_attempts)

    def get(self, task_id: str) -> Task:
        return Task.from_json(self.http.json("GET", _task_path(task_id)))

    def list(self, *, state: str | None = None, user: str | None = None,
             limit: int | None = None, cursor: str | None = None,
             reason: str | None = None, labels: Mapping[str, str] | None = None
             ) -> TaskPage:
        """One page of tasks, newest first (``user``: a name, ``me`` or ``all``;
        ``reason``: only waiting tasks whose reason is of this kind, e.g. ``resources``;
        ``labels``: only tasks with every one of these JobSpec labels)."""
        label = [f"{k}={v}" for k, v in (labels or {}).items()] or None
        return TaskPage.from_json(self.http.json(
            "GET", f"{API}/tasks", query={"state": state, "user": user, "limit": limit,
                                          "cursor": cursor, "reason": reason,
                                          "label": label}))

    def iter_tasks(self, *, state: str | None = None, user: str | None = None
                   ) -> Iterator[Task]:
        """Every task, newest first, a page at a time."""
        cursor = None
        while True:
            page = self.list(state=state, user=user, cursor=cursor)
            yield from page.tasks
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def queue(self, *, user: str | None = None, reason: str | None = None) -> Queue:
        """The waiting tasks in admission order (every page) and the running ones
        (``reason``: only waiting tasks whose reason is of this kind; no blocked ones)."""
        query: dict[str, Any] = {"user": user, "reason": reason}
        data = self.http.json("GET", f"{API}/queue", query=query)
        while data.get("next_cursor"):
            query["cursor"] = data["next_cursor"]
            page = self.http.json("GET", f"{API}/queue", query=query)
            data = {**page, "pending": data["pending"] + page["pending"],
                    "blocked": data.get("blocked", [])}  # the first page's
        return Queue.from_json(data)

    def events(self, task_id: str) -> list[Event]:
        data = self.http.json("GET", _task_path(task_id, "/events"))
        return [Event.from_json(e) for e in data["events"]]

    def attempts(self, task_id: str) -> list[Attempt]:
        data = self.http.json("GET", _task_path(task_id, "/attempts"))
        return [Attempt.from_json(a) for a in data["attempts"]]

    def cancel(self, task_id: str) -> CancelResult:
        """Cancel a task: at once while it waits, else its run is stopped on the cluster
        (``cancel_requested``). Idempotent: a task that had ended comes back as it is,
        with ``already_ended`` (the API's 409 for it is not raised)."""
        try:
            data = self.http.json("POST", _task_path(task_id, ":cancel"))
        except Conflict:
            task = self.get(task_id)
            if not task.is_terminal:
                raise
            data = {"task_id": task.task_id, "state": task.state, "cancel_requested": False,
                    "already_ended": True}
        return CancelResult.from_json(data)

    def set_priority(self, task_id: str, priority: int) -> Task:
        return Task.from_json(self.request_json("PATCH", _task_path(task_id),
                                                body={"priority": priority}))

    # -- logs ------------------------------------------------------------------------------

    def logs(self, task_id: str, *, attempt: int | None = None, tail: int | None = None,
             offset: int | None = None) -> LogChunk:
        """An attempt's driver log (the latest attempt by default): its last ``tail`` lines
        (server default 2000), or with ``offset`` everything after that byte. ``NoLogYet``
        (a ``NotFound``) when the task has not started: no attempt, or no log yet."""
        try:
            return self._logs(task_id, attempt=attempt, tail=tail, offset=offset)
        except NotFound as exc:
            raise self._why_no_log(task_id, attempt, exc) from None

    def _why_no_log(self, task_id: str, attempt: int | None, exc: NotFound) -> NotFound:
        """A 404 of the logs told apart (one more GET): an unknown task (the task's own
        404), one not started yet (``NoLogYet``), else ``exc`` (no such attempt, or an
        ended task whose log is gone)."""
        task = self.get(task_id)  # NotFound: no such task
        if attempt is not None or task.is_terminal:
            return exc
        if task.latest_attempt is None:
            message = f"task {task_id} is {task.state}: it has no attempt yet, so no log"
        else:
            message = (f"task {task_id} is {task.state}: attempt "
                       f"{task.latest_attempt.attempt_no} has written no log yet")
        return NoLogYet(exc.status, "no_log_yet", message, task.state)

    def _logs(self, task_id: str, *, attempt: int | None = None, tail: int | None = None,
              offset: int | None = None) -> LogChunk:
        resp = self.http.request("GET", _task_path(task_id, "/logs"), query={
            "attempt": attempt or "latest", "tail": tail, "offset": offset})
        headers = {k.lower(): v for k, v in resp.headers.items()}
        number = headers.get(LOG_ATTEMPT_HEADER.lower())
        end = headers.get(LOG_END_HEADER.lower())
        return LogChunk(resp.text(), int(number) if number else None,
                        int(end) if end else None)

    def follow_logs(self, task_id: str, *, tail: int = 100, interval: float = 2.0,
                    on_retry: OnRetry | None = None) -> Iterator[LogChunk]:
        """The latest attempt's log as it grows, until the task ends: first its last
        ``tail`` lines, then only what is new (a new attempt starts from its first byte).
        Transient network errors are retried for as long as the log is followed."""
        attempt: int | None = None
        end: int | None = None
        while True:
            state = self._retrying(lambda: self.get(task_id), on_retry).state
            try:
                chunk = self._retrying(functools.partial(
                    self._logs, task_id, tail=tail if end is None else None, offset=end),
                    on_retry)
            except NotFound:  # no attempt or no log yet
                chunk = None
            if chunk is not None:
                if end is not None and (chunk.attempt != attempt or chunk.end is None
                                        or chunk.end < end):
                    # a new attempt (or a log that shrank): from its beginning
                    chunk = self._logs(task_id, offset=0)
                attempt, end = chunk.attempt, chunk.end
                if chunk.text:
                    yield chunk
            if state in ("SUCCEEDED", "FAILED", "CANCELED"):
                return
            self.sleep(interval)

    def _retrying(self, call: Callable[[], Any], on_retry: OnRetry | None,
                  patience_s: float = 300.0) -> Any:
        return retrying(call, deadline=self.clock() + patience_s, clock=self.clock,
                        sleep=self.sleep, on_retry=on_retry)

    # -- waiting ---------------------------------------------------------------------------

    def wait(self, task_id: str, *, timeout: float = 3600.0, interval: float = 2.0,
             on_update: Callable[[Task], None] | None = None,
             on_retry: OnRetry | None = None) -> Task:
        """Poll until the task ends and return it; ``on_update(task)`` on the first poll
        and then on a change only (its state, place, reason, progress...; not the ETA
        counting down). Transient errors (nothing answered, 5xx, 429) are retried with
        backoff until the deadline; ``WaitTimeout`` (with the last task seen) when it
        passes first."""
        return self._poll(lambda: self.get(task_id), timeout, interval, on_update, on_retry)

    def _poll(self, read: Callable[[], Any], timeout: float, interval: float,
              on_update: Callable[[Any], None] | None, on_retry: OnRetry | None) -> Any:
        """``read()`` every ``interval`` until what it reads ``is_terminal``."""
        deadline = self.clock() + timeout
        last = None
        while True:
            seen = retrying(read, deadline=deadline, clock=self.clock, sleep=self.sleep,
                            on_retry=on_retry)
            if on_update is not None and seen != last:
                on_update(seen)
            last = seen
            if seen.is_terminal:
                return seen
            left = deadline - self.clock()
            if left <= 0:
                raise WaitTimeout(seen, timeout)
            self.sleep(min(interval, left))

    # -- training curves (docs/progress.md) --------------------------------------------------

    def metrics(self, task_id: str, keys: list[str] | None = None) -> Metrics:
        """A task's training curves over all its attempts: every metric name it logged
        (``keys``), and the points of ``keys`` (at most 16; default: a loss and a
        reward)."""
        query = None if keys is None else {"keys": ",".join(keys)}
        return Metrics.from_json(self.http.json("GET", _task_path(task_id, "/metrics"),
                                                query=query))

    # -- users, tokens, usage --------------------------------------------------------------

    def me(self) -> Me:
        return Me.from_json(self.http.json("GET", f"{API}/me"))

    def users(self) -> list[User]:
        return [User.from_json(u) for u in self.http.json("GET", f"{API}/users")["users"]]

    def user(self, name: str) -> User:
        return User.from_json(self.http.json("GET", _user_path(name)))

    def create_user(self, name: str, *, role: str = "user") -> User:
        return User.from_json(self.request_json("POST", f"{API}/users",
                                                body={"name": name, "role": role}))

    def disable_user(self, name: str) -> UserStatus:
        return UserStatus.from_json(self.http.json("POST", _user_path(name, ":disable")))

    def enable_user(self, name: str) -> UserStatus:
        return UserStatus.from_json(self.http.json("POST", _user_path(name, ":enable")))

    def tokens(self, user: str | None = None) -> TokenList:
        """A user's tokens (default: the caller's), never their secrets."""
        return TokenList.from_json(self.http.json("GET", _user_path(user, "/tokens")))

    def create_token(self, user: str | None = None, *, label: str = "default",
                     expires_in_s: float | None = None) -> NewToken:
        """A new token (for ``user``, default: the caller); its secret is in ``.token``."""
        body: dict[str, Any] = {"label": label}
        if expires_in_s is not None:
            body["expires_in_s"] = expires_in_s
        return NewToken.from_json(self.request_json("POST", _user_path(user, "/tokens"),
                                                    body=body))

    def revoke_token(self, token_id: str, *, user: str | None = None) -> RevokedToken:
        return RevokedToken.from_json(self.http.json(
            "POST", _user_path(user, f"/tokens/{token_id}:revoke")))

    def usage(self, *, from_: str | None = None, to: str | None = None,
              user: str | None = None, tasks: int | None = None) -> Usage:
        """GPU-seconds per user and the biggest tasks in a window (ISO-8601 or epoch)."""
        return Usage.from_json(self.http.json("GET", f"{API}/usage", query={
            "from": from_, "to": to, "user": user, "tasks": tasks}))

    # -- pipelines (docs/pipelines.md) -------------------------------------------------------

    def submit_pipeline(self, document: JobSpecInput, *, idempotency_key: str | None = None,
                        on_retry: OnRetry | None = None) -> PipelineSubmitted:
        """Submit a pipeline document (a dict, a YAML string, a file path or bytes, as
        ``submit`` takes a JobSpec): every stage a task, created at once; exactly once,
        with a key and retries as ``submit``."""
        body, content_type = jobspec_body(document)
        return PipelineSubmitted.from_json(self._submit(
            f"{API}/pipelines", body, content_type, idempotency_key, on_retry))

    def pipeline(self, pipeline_id: str) -> Pipeline:
        """A pipeline with its stages (task ids, states) and edges."""
        return Pipeline.from_json(self.http.json("GET", f"{API}/pipelines/{pipeline_id}"))

    def cancel_pipeline(self, pipeline_id: str) -> Pipeline:
        """Cancel every stage that has not ended (``canceled``: those this call canceled;
        an ended pipeline comes back as it is)."""
        return Pipeline.from_json(self.http.json("POST",
                                                 f"{API}/pipelines/{pipeline_id}/cancel"))

    def pipelines(self, *, user: str | None = None, limit: int | None = None
                  ) -> PipelineList:
        """Pipelines, newest first (``user``: me, all (admins) or a name)."""
        return PipelineList.from_json(self.http.json(
            "GET", f"{API}/pipelines", query={"user": user, "limit": limit}))

    def wait_pipeline(self, pipeline_id: str, *, timeout: float = 3600.0,
                      interval: float = 5.0,
                      on_update: Callable[[Pipeline], None] | None = None,
                      on_retry: OnRetry | None = None) -> Pipeline:
        """Poll until the pipeline ends and return it, as ``wait`` does for a task
        (``on_update`` on the first poll and on a change)."""
        return self._poll(lambda: self.pipeline(pipeline_id), timeout, interval, on_update,
                          on_retry)

    # -- webhooks (docs/webhooks.md) ---------------------------------------------------------

    def create_webhook(self, url: str, events: list[str], format: str = "standard"
                       ) -> NewWebhook:
        """Register a webhook for the caller; ``.secret`` signs its deliveries (shown in
        this answer only)."""
        return NewWebhook.from_json(self.request_json(
            "POST", f"{API}/webhooks", body={"url": url, "events": events, "format": format}))

    def list_webhooks(self, user: str | None = None) -> WebhookList:
        """The caller's webhooks (an admin: everyone's, or ``user``'s), never secrets."""
        return WebhookList.from_json(self.http.json("GET", f"{API}/webhooks",
                                                    query={"user": user}))

    def delete_webhook(self, hook_id: str) -> DeletedWebhook:
        return DeletedWebhook.from_json(self.http.json("DELETE", f"{API}/webhooks/{hook_id}"))

    def webhook_deliveries(self, hook_id: str, limit: int = 50) -> Deliveries:
        """A webhook's recent deliveries, newest first, with their outcome."""
        return Deliveries.from_json(self.http.json(
            "GET", f"{API}/webhooks/{hook_id}/deliveries", query={"limit": limit}))

    # -- nodes (issue 55) ----------------------------------------------------------------
    def list_nodes(self) -> NodeList:
        """The cluster's nodes by name: alive or dead, GPUs, cordon, health."""
        return NodeList.from_json(self.http.json("GET", f"{API}/nodes"))

    def node_events(self, name: str, limit: int = 100) -> NodeEventList:
        """Node ``name``'s events, newest first: cordons, drains, resumes, quarantines
        (who, when, why)."""
        return NodeEventList.from_json(self.http.json(
            "GET", f"{API}/nodes/{quote(name, safe='')}/events", query={"limit": limit}))

    def change_node(self, name: str, action: str, reason: str | None = None, *,
                    requeue: bool = False) -> NodeChanged:
        """``action`` cordon, drain or resume on node ``name`` (admins; a reason is
        required for cordon and drain). ``requeue`` (a drain only): the attempts on the
        node are stopped and re-queued, to resume from their checkpoint elsewhere."""
        if action not in ("cordon", "drain", "resume"):
            raise UsageError(f"unknown node action {action!r}: cordon, drain or resume")
        if requeue and action != "drain":
            raise UsageError("only a drain re-queues the attempts on the node")
        body: dict[str, Any] = {} if reason is None else {"reason": reason}
        if requeue:
            body["requeue"] = True
        return NodeChanged.from_json(self.request_json(
            "POST", f"{API}/nodes/{quote(name, safe='')}:{action}", body=body))
