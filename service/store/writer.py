"""The service database: ``Store``, one transaction core and small stores by aggregate.

* ``Store`` is a container: ``store.tasks`` (create, priority, cancel, the task reads and
  the scheduler's runnable/active reads), ``store.attempts`` (the scheduler's attempt
  writes, attempt reads), ``store.users`` (users, tokens, console sessions),
  ``store.pipelines`` (dependencies, BLOCKED tasks, pipelines), ``store.webhooks`` (hooks,
  deliveries), ``store.nodes`` (cordons and drains), ``store.lease`` (which
  instance holds the database), ``store.progress`` (training progress and curves),
  ``store.console`` (the console's and the metrics' reads, queue samples) and
  ``store.usage`` (GPU time over a window, the ledger); and the core's own: ``close``,
  ``write_fault``, ``probe_write``, ``automatic_checkpoints``, ``change_seq``.
* Each aggregate (``core.Part``) is given the one ``core.WriteCore`` and the one
  ``reads.Readers`` explicitly, and nothing else. The core: one writing connection behind
  one lock, each write a ``BEGIN IMMEDIATE`` transaction: exactly one writer. Every state
  change is ``states.check_transition`` followed by a compare-and-set (``UPDATE tasks ...
  WHERE task_id = :task_id AND state = :expected``); zero rows raises ``StaleState``. The
  transition's event row is written in the same transaction, and with it the webhook
  deliveries the event causes (the outbox: ``service.store.outbox``).
* Reads go through ``Readers`` (``service.store.reads``): per-thread connections that
  never wait for the writer.
* The statements are the named queries of ``service/store/sql/queries.sql``; the schema
  and the connections' pragmas are ``service.store.db``'s; the rows are
  ``service.domain.rows``' dataclasses; a new task is a ``service.domain.newtask.NewTask``.
* A write that fails because of the storage (disk full, read-only, locked: see
  ``db.storage_fault``) is rolled back and raises ``StorageUnavailable``; ``write_fault``
  says what happened until a write commits again (``probe_write`` tries one that changes
  nothing).
* Coroutines reach it through ``service.store.aio.AsyncStore``'s lanes:
  ``await lanes.read(lambda s: s.tasks.get_task(task_id))``.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager

from service.domain.rows import (
    MAX_SEQ,
    ActiveRow,
    AttemptRow,
    Claim,
    CreatedToken,
    EventRow,
    RunnableRow,
    TaskPageRow,
    TaskRow,
    TokenRow,
    UserRow,
    UserStatusChange,
)
from service.domain.writes import (
    AttemptEnd,
    BulkTask,
    CancelKind,
    CancelOutcome,
    RetryPlan,
)
from service.store.attempts import AttemptStore
from service.store.console import ConsoleReads
from service.store.core import (
    QuotaExceeded,
    StaleProgress,
    StaleState,
    StoreError,
    TaskExists,
    TaskNotFound,
    TokenNotFound,
    TooManyTokens,
    UserDisabled,
    UserExists,
    UserNotFound,
    WriteCore,
    truncate_message,
)
from service.store.db import DEFAULT_SYNCHRONOUS, StorageUnavailable
from service.store.dialect import engine_for
from service.store.lease import LeaseStore
from service.store.nodes import NodeStore
from service.store.pipelines import PipelineStore
from service.store.placement import PlacementStore, nodes_of_json
from service.store.progress import ProgressStore, progress_of_page
from service.store.reads import ACTIVE, Readers, task_row
from service.store.sql import QUERIES as Q
from service.store.tasks import TaskStore
from service.store.usage import UsageReads
from service.store.users import UserStore
from service.store.webhooks import WebhookStore

# The store's API: the class, its errors, and the rows it takes and returns.
__all__ = [
    "ACTIVE", "MAX_SEQ", "ActiveRow", "AttemptEnd", "AttemptRow", "BulkTask", "CancelKind",
    "CancelOutcome", "Claim", "CreatedToken", "EventRow", "QuotaExceeded", "RetryPlan",
    "RunnableRow", "StaleProgress", "StaleState",
    "StorageUnavailable", "Store", "StoreError", "TaskExists", "TaskNotFound", "TaskPageRow",
    "TaskRow",
    "TokenNotFound", "TokenRow", "TooManyTokens", "UserDisabled", "UserExists",
    "UserNotFound", "UserRow", "UserStatusChange", "truncate_message",
]

log = logging.getLogger(__name__)


class Store:
    """Thread-safe access to the service database (see the module docstring)."""

    def __init__(self, db_path: str, *, synchronous: str = DEFAULT_SYNCHRONOUS) -> None:
        """``db_path``: the store's setting, a SQLite file or a store URL
        (``service.store.dialect.engine_for``: ``sqlite:///path``, ``postgresql://...``)."""
        engine = engine_for(db_path, synchronous=synchronous)  # refuses ":memory:" first
        self.reads = Readers(engine)
        self.core = WriteCore(engine)
        parts = (self.core, self.reads)
        self.tasks = TaskStore(*parts)
        self.attempts = AttemptStore(*parts)
        self.users = UserStore(*parts)
        self.pipelines = PipelineStore(*parts)
        self.webhooks = WebhookStore(*parts)
        self.progress = ProgressStore(*parts)
        self.console = ConsoleReads(*parts)
        self.usage = UsageReads(*parts)
        self.nodes = NodeStore(*parts)
        self.lease = LeaseStore(*parts)
        self.placement = PlacementStore(*parts)

    @property
    def db_path(self) -> str:
        return self.reads.db_path

    @property
    def engine_name(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.core.engine.name

    @property
    def write_fault(self) -> str | None:
        """Why the last write failed when the storage was to blame; None once a write
        commits again (``WriteCore.write_fault``)."""
        return self.core.write_fault

    def probe_write(self) -> None:
        """A write that changes nothing: ``StorageUnavailable`` while writes fail."""
        self.core.probe_write()

    def automatic_checkpoints(self, on: bool) -> None:
        """Whether commits checkpoint the WAL themselves (``WriteCore``)."""
        self.core.automatic_checkpoints(on)

    def task_page(self, task_id: str) -> TaskPageRow | None:
        """A task's page in one statement (``task_page``): on PostgreSQL, five statements
        each cost the server and psycopg about as much as the task's row. None for an id
        no task has (one holding NUL included: PostgreSQL's text cannot hold it)."""
        if "\x00" in task_id:
            return None
        row = self.reads.reader().execute(Q["task_page"], {"task_id": task_id}).fetchone()
        if row is None:
            return None
        stage = row["stage_pipeline_id"]
        return TaskPageRow(task=task_row(row, row["queue_position"],
                                         nodes_of_json(row["latest_nodes"])),
                           progress=progress_of_page(row),
                           on_unsatisfiable=row["on_unsatisfiable"],
                           stage=None if stage is None else (stage, row["stage_name"]),
                           has_deps=bool(row["has_deps"]))

    def tick_scope(self) -> AbstractContextManager[None]:
        """Around one scheduler tick: the reads it repeats are asked once while nothing
        changed (``Readers.version``; on PostgreSQL a round trip each saved)."""
        return self.reads.tick_scope()

    def change_seq(self) -> int:
        """A number that grows after any task was created or moved (one row by key)."""
        return int(self.reads.reader().execute(Q["change_seq"]).fetchone()["seq"])

    def close(self) -> None:
        self.reads.close()
        self.core.close()
