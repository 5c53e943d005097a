"""The store's one writer and the base of its aggregates; the store's errors.

``WriteCore``: one writing connection behind one lock, each write a ``BEGIN IMMEDIATE``
transaction (``tx``); a state change is ``states.check_transition`` then a compare-and-set
(``transition``), its event (``event``, with the webhook outbox rows it causes) written in
the same transaction. A write that fails because of the storage raises
``StorageUnavailable`` and is remembered in ``write_fault``.

``Part``: the base of each aggregate store (``tasks``, ``attempts``, ``users``...): it is
given the ``WriteCore`` and the ``Readers`` explicitly and reaches nothing else.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any, TypeVar

from service.domain.lease import Fence
from service.domain.states import TaskState, check_transition
from service.policy.quotas import QuotaRefusal
from service.store.db import DEFAULT_SYNCHRONOUS, StorageUnavailable
from service.store.dialect import Engine, engine_for
from service.store.grouped import GroupSpoiled
from service.store.outbox import enqueue as enqueue_webhooks
from service.store.reads import Readers
from service.store.sql import QUERIES as Q

MESSAGE_HEAD = 1_000
# After a storage fault, every commit for this long is followed by a checkpoint (below)
RECOVERY_WINDOW_S = 60.0
MESSAGE_TAIL = 3_000

_S = TaskState
T = TypeVar("T")

log = logging.getLogger(__name__)


class StoreError(Exception):
    """Base class of the store's own errors."""


class TaskNotFound(StoreError):
    def __init__(self, task_id: str) -> None:
        super().__init__(f"task {task_id} not found")
        self.task_id = task_id


class TaskExists(StoreError):
    def __init__(self, task_id: str) -> None:
        super().__init__(f"task {task_id} already exists")
        self.task_id = task_id


class QuotaExceeded(StoreError):
    """A submission the owner's storage quota refuses (nothing was written)."""

    def __init__(self, refusal: QuotaRefusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


class StaleState(StoreError):
    """A guarded write found the task in another state than expected (a lost race)."""

    def __init__(self, task_id: str, expected: TaskState, actual: str | None) -> None:
        super().__init__(f"task {task_id}: expected state {expected}, found {actual}")
        self.task_id = task_id
        self.expected = expected
        self.actual = actual


class StaleProgress(StoreError):
    """A progress write found another log offset than the one its reader started from."""

    def __init__(self, task_id: str, attempt_no: int, expected_offset: int) -> None:
        super().__init__(f"task {task_id} attempt {attempt_no}: progress moved past offset "
                         f"{expected_offset} meanwhile")
        self.task_id = task_id
        self.attempt_no = attempt_no


class UserNotFound(StoreError):
    def __init__(self, name: str) -> None:
        super().__init__(f"user {name} not found")
        self.name = name


class UserExists(StoreError):
    def __init__(self, name: str) -> None:
        super().__init__(f"user {name} already exists")
        self.name = name


class UserDisabled(StoreError):
    def __init__(self, name: str) -> None:
        super().__init__(f"user {name} is disabled")
        self.name = name


class TokenNotFound(StoreError):
    def __init__(self, user: str, token_id: str) -> None:
        super().__init__(f"user {user} has no token {token_id}")
        self.user = user
        self.token_id = token_id


class TooManyTokens(StoreError):
    def __init__(self, user: str, limit: int) -> None:
        super().__init__(f"user {user} already has {limit} live tokens (the limit); "
                         "revoke one first")
        self.user = user
        self.limit = limit


def by_field(user: str | None) -> dict[str, str]:
    """Who did it, for an event's payload (nothing when unknown)."""
    return {} if user is None else {"by": user}


def truncate_message(text: str | None) -> str | None:
    """Keep the head and the tail of a long message (the error is usually at the end)."""
    if text is None or len(text) <= MESSAGE_HEAD + MESSAGE_TAIL:
        return text
    cut = len(text) - MESSAGE_HEAD - MESSAGE_TAIL
    return f"{text[:MESSAGE_HEAD]}\n...[{cut} characters truncated]...\n{text[-MESSAGE_TAIL:]}"


class Deposed(StoreError):
    """A singleton's write refused: the leader's lease is no longer the writer's term
    (another instance took it over). The write was rolled back."""


class WriteCore:
    """The writing connection and the helpers every write uses.

    A thread that runs one of the leader's singletons (the scheduler, the log follower,
    the webhook delivery) is fenced (``fence_thread``): each of its transactions first
    reads the lease row and commits only while it still names the fence's holder and
    epoch, so a deposed leader's late write is refused (``Deposed``), never applied.
    """

    def __init__(self, db_path: str | Engine, *,
                 synchronous: str = DEFAULT_SYNCHRONOUS) -> None:
        self.engine = (engine_for(db_path, synchronous=synchronous)
                       if isinstance(db_path, str) else db_path)
        self.db_path = self.engine.target
        self._lock = threading.RLock()
        self._conn = self.engine.connect()
        self._write_fault: str | None = None
        self._fences = threading.local()
        self._fault_at = float("-inf")  # monotonic time of the last storage fault
        # this process's commits so far: a tick's cached reads are current while it stays
        # (Readers.version)
        self.commits = 0
        self._grouping: int | None = None  # the thread whose group's transaction is open
        try:
            self.engine.initialize(self._conn)
        except BaseException:
            self._conn.close()
            raise

    @property
    def write_fault(self) -> str | None:
        """Why the last write failed when the storage was to blame (``"disk full"``...);
        None once a write commits again."""
        return self._write_fault

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def fence_thread(self, fence: Fence | None,
                     on_deposed: Callable[[str], None] | None = None) -> None:
        """Fence every later write of the calling thread by ``fence`` (None: unfenced);
        ``on_deposed(why)`` is called once, on the first refused write."""
        self._fences.fence = fence
        self._fences.on_deposed = on_deposed

    def _check_fence(self, conn: sqlite3.Connection) -> None:
        fence: Fence | None = getattr(self._fences, "fence", None)
        if fence is None:
            return
        row = conn.execute(Q["lease_fence"]).fetchone()
        if row is not None and (row["holder"], row["epoch"]) == (fence.holder, fence.epoch):
            return
        why = (f"the leader's lease moved on (epoch {fence.epoch} of {fence.holder} is over"
               + ("" if row is None else f"; {row['holder']} holds epoch {row['epoch']}")
               + "): a deposed leader's write was refused")
        on_deposed = self._fences.on_deposed
        self._fences.on_deposed = None
        if on_deposed is not None:
            on_deposed(why)
        raise Deposed(why)

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """A write transaction on the one writing connection (``Engine.begin``).

        Whatever fails (the body, or the COMMIT itself) leaves no transaction open: a
        connection left inside a failed transaction would refuse every later write, long
        after the disk has room again. A storage fault becomes ``StorageUnavailable``.

        Inside ``together()`` on the same thread it joins that transaction instead, and
        an error in it is raised as ``grouped.GroupSpoiled`` (the group rolls back).
        """
        if self._grouping == threading.get_ident():
            try:
                yield self._conn
            except BaseException as exc:
                raise GroupSpoiled(str(exc)) from exc
            return
        with self._transaction():
            yield self._conn

    @contextmanager
    def together(self) -> Iterator[None]:
        """One transaction that every ``tx`` of this thread joins until it ends: a group
        of writes committed at once (``service.store.grouped``)."""
        with self._transaction():
            self._grouping = threading.get_ident()
            try:
                yield
            finally:
                self._grouping = None

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self.engine.begin(self._conn)
                try:
                    self._check_fence(self._conn)
                    yield self._conn
                    self._conn.execute("COMMIT")
                    self.commits += 1
                except BaseException:
                    self._rollback()
                    raise
            except self.engine.errors as exc:
                fault = self.engine.storage_fault(exc)
                if fault is None:
                    raise
                self._fault(fault, exc)
                raise StorageUnavailable(fault, str(exc)) from exc
            if self._write_fault is not None:
                log.warning("database writes work again (they failed: %s)", self._write_fault)
                self._write_fault = None
            if time.monotonic() - self._fault_at < RECOVERY_WINDOW_S:
                self.checkpoint()

    def _fault(self, fault: str, exc: Exception) -> None:
        """Record a storage fault (logged once until writes work again) and checkpoint.

        Why checkpoint: a WAL that has not reached its checkpoint size must grow to take
        the next commit, and on a nearly full disk it eats whatever space comes back,
        frame by frame, until the disk is full again (the service would fail again a few
        writes after space returned). A checkpoint copies the WAL's pages into the
        database, mostly over pages that are there already, after which the next commit
        starts the WAL again from its beginning, inside the space the file already has.
        A passive checkpoint never waits; when it cannot finish now, the next one goes on.
        """
        if self._write_fault != fault:
            log.warning("database writes fail: %s (%s); answering 503 until they work", fault,
                        exc)
        self._write_fault = fault
        self._fault_at = time.monotonic()
        self.checkpoint()

    def automatic_checkpoints(self, on: bool) -> None:
        """Whether a commit that takes the WAL past ``AUTOCHECKPOINT_PAGES`` checkpoints it
        (off while ``checkpointer.Checkpointer`` does it on its own thread)."""
        with self._lock:
            self.engine.automatic_checkpoints(self._conn, on)

    def checkpoint(self) -> None:
        with suppress(*self.engine.errors):
            self.engine.checkpoint(self._conn)

    def _rollback(self) -> None:
        """Roll back if a transaction is still open (SQLite ends some failed ones itself);
        a rollback that fails too leaves the connection as SQLite left it."""
        if self._conn.in_transaction:
            with suppress(*self.engine.errors):
                self._conn.execute("ROLLBACK")

    def probe_write(self) -> None:
        """Commit a write that changes nothing (the schema version, rewritten as it is):
        it needs what any write needs (the lock, room in the WAL), so it tells whether
        writes work again. Raises ``StorageUnavailable`` while they do not."""
        with self.tx() as conn:
            self.engine.probe(conn)

    # -- write helpers (inside a transaction) ------------------------------------------
    @staticmethod
    def event(conn: sqlite3.Connection, task_id: str, now: float, kind: str,
              payload: Mapping[str, Any]) -> None:
        cur = conn.execute(Q["insert_event"], {
            "task_id": task_id, "ts": now, "event_type": kind,
            "payload_json": json.dumps(payload, sort_keys=True, default=str),
        })
        # the webhook outbox, in this same transaction (never lost, never early)
        enqueue_webhooks(conn, cur, task_id, now, kind, payload)

    def transition(self, conn: sqlite3.Connection, task_id: str, src: TaskState,
                   dst: TaskState, now: float, payload: Mapping[str, Any] | None = None,
                   *, query: str = "move", **params: Any) -> None:
        """Guarded ``src -> dst`` by the named ``move*`` query (``params``: its other
        values), plus the transition's event."""
        check_transition(src, dst)
        cur = conn.execute(Q[query], {
            **params, "task_id": task_id, "expected": src.value, "dst": dst.value, "now": now,
        })
        if cur.rowcount != 1:
            row = conn.execute(Q["task_state"], {"task_id": task_id}).fetchone()
            if row is None:
                raise TaskNotFound(task_id)
            raise StaleState(task_id, src, row["state"])
        self.event(conn, task_id, now, "STATE_TRANSITION",
                   {"from": src.value, "to": dst.value, **(payload or {})})

    @staticmethod
    def update_attempt(conn: sqlite3.Connection, query: str, task_id: str, attempt_no: int,
                       **params: Any) -> None:
        cur = conn.execute(Q[query], {**params, "task_id": task_id, "attempt_no": attempt_no})
        if cur.rowcount != 1:
            raise StoreError(f"task {task_id} has no attempt {attempt_no}")


class Part:
    """The base of an aggregate store: the writer and the readers it was given, and the
    short names its methods use for them."""

    def __init__(self, core: WriteCore, reads: Readers) -> None:
        self._core = core
        self._reads = reads

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._core.tx()

    def _reader(self) -> sqlite3.Connection:
        return self._reads.reader()

    def _snapshot(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._reads.snapshot()

    def _reread_on_change(self, key: str, read: Callable[[sqlite3.Connection], list[T]]
                          ) -> list[T]:
        """``read(conn)``'s rows, read again only when a commit may have come since this
        thread's last read of ``key`` (``Readers.version``); the rows are frozen, so
        sharing them is safe (the list is the caller's own copy)."""
        conn = self._reader()
        version = self._reads.version(conn, self._core.commits)
        seen = getattr(self._reads.local, key, None)
        if seen is None or seen[0] != version:
            seen = (version, read(conn))
            setattr(self._reads.local, key, seen)
        return list(seen[1])

    def _event(self, conn: sqlite3.Connection, task_id: str, now: float, kind: str,
               payload: Mapping[str, Any]) -> None:
        self._core.event(conn, task_id, now, kind, payload)

    def _transition(self, conn: sqlite3.Connection, task_id: str, src: TaskState,
                    dst: TaskState, now: float, payload: Mapping[str, Any] | None = None,
                    *, query: str = "move", **params: Any) -> None:
        self._core.transition(conn, task_id, src, dst, now, payload, query=query, **params)

    def _update_attempt(self, conn: sqlite3.Connection, query: str, task_id: str,
                        attempt_no: int, **params: Any) -> None:
        self._core.update_attempt(conn, query, task_id, attempt_no, **params)
