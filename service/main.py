"""``argus-api``: the task service process (HTTP API + scheduler loop + SQLite).

    argus-api --config FILE [--host H] [--port P] [--db PATH]
              [--ray-address URL] [--shared-root DIR]
    argus-api db backup --to PATH [--config FILE] [--db PATH]
    argus-api db copy --from URL --to URL

Precedence: defaults < config file < ``ARGUS_*`` environment < flags. The service refuses
to start (exit 2) without an API token in the environment variable named by
``v2.auth.token_env`` (it signs in as the bootstrap admin, ``v2.users.bootstrap_admin``),
and on any configuration error. SIGTERM/SIGINT stop it cleanly: the scheduler loop
finishes its tick, then the database is closed. The HTTP server runs under
``service.web.http_server``'s limits (header and body timeouts, a connection cap).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import logging
import os
import signal
import sqlite3
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from time import monotonic
from typing import ClassVar

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from service.cluster.boundary import Cluster
from service.config import ConfigError, Settings
from service.config_load import load_settings
from service.domain.lease import fence_of
from service.domain.users import MAX_TOKEN_LEN, presentable
from service.engine import webhook_delivery
from service.engine.artifacts import Artifacts
from service.engine.lease_keeper import LeaseHeld, LeaseKeeper, this_instance
from service.engine.progress_follower import FollowerLoop, LogFollower
from service.engine.scheduler import Scheduler, SchedulerLoop
from service.engine.shared_view import ViewFollower, ViewPublisher
from service.store.backup import BackupError, backup
from service.store.checkpointer import Checkpointer
from service.store.copy import CopyError, copy_store
from service.store.db import SchemaError
from service.store.dialect import StoreOpenError, StoreUrlError, redacted
from service.store.writer import Store
from service.web.app import create_app
from service.web.http_server import ServerLimits, run
from service.web.metrics import MeteredScheduler, ServiceMetrics

log = logging.getLogger("argus.api")

EXIT_GRACE_S = 2.0
LOOPS_STOP_S = 6.0  # the loops' share of a stop (supervisors wait 10 s, then KILL)
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="argus-api", description=__doc__.split("\n\n")[0],
                                epilog="argus-api db backup --to PATH: a consistent copy "
                                       "of the live database; argus-api db copy --from URL "
                                       "--to URL: the installation moved to another store "
                                       "(argus-api db --help)")
    p.add_argument("--config", required=True, metavar="FILE", help="service YAML config")
    p.add_argument("--host", help="listen address (v2.api.host)")
    p.add_argument("--port", type=int, help="listen port (v2.api.port)")
    p.add_argument("--db", metavar="PATH", help="SQLite file (v2.sqlite.db_path)")
    p.add_argument("--ray-address", metavar="URL", help="Ray job server URL (ray.address)")
    p.add_argument("--shared-root", metavar="DIR",
                   help="shared storage root (ray.shared_root); also moves the database and "
                        "allowed roots when they were left at their defaults")
    return p.parse_args(argv)


def rebase_shared_root(settings: Settings, root: str) -> Settings:
    """Move ``shared_root``; a db path or allowed roots that were the old root's defaults
    follow it, explicitly different ones stay."""
    if not os.path.isabs(root):
        raise ConfigError(f"--shared-root: must be an absolute path, got {root!r}")
    old_default_db = replace(settings, db_path=None).resolved_db_path
    db_path = None if settings.db_path in (None, old_default_db) else settings.db_path
    roots = () if settings.allowed_roots in ((), (settings.shared_root,)) else (
        settings.allowed_roots)
    return replace(settings, shared_root=root, db_path=db_path, allowed_roots=roots)


def settings_from_args(args: argparse.Namespace,
                       environ: Mapping[str, str] | None = None) -> Settings:
    settings = load_settings(args.config, environ)
    if args.shared_root:
        settings = rebase_shared_root(settings, args.shared_root)
    if args.port is not None and not 0 <= args.port <= 65535:
        raise ConfigError(f"--port: must be 0..65535, got {args.port}")
    return settings.with_overrides(
        api_host=args.host, api_port=args.port, db_path=args.db, ray_address=args.ray_address
    )


def read_token(settings: Settings, environ: Mapping[str, str]) -> str:
    token = environ.get(settings.token_env, "").strip()
    if not token:
        raise ConfigError(
            f"no API token: set the environment variable {settings.token_env} "
            "(named by v2.auth.token_env); the service does not run without one"
        )
    if not presentable(token):
        raise ConfigError(
            f"the API token in {settings.token_env} must be printable text of at most "
            f"{MAX_TOKEN_LEN} characters (a client could never send it otherwise)"
        )
    return token


def scrub_secret(name: str) -> bool:
    """Take the environment variable ``name`` out of this process's reach by path: out of
    ``os.environ`` (and libc's ``environ``: children never get it), and its bytes zeroed
    in the initial environment block that ``/proc/<pid>/environ`` shows, so a file read
    that ends up there (a job's symlink, were one ever followed) finds no secret. Linux
    only; False when that block could not be cleared (the caller logs it).

    The block is this process's own memory (``env_start``..``env_end`` in
    ``/proc/self/stat``); after ``unsetenv`` nothing points into the variable's entry."""
    if os.environ.pop(name, None) is None:
        return True
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        env_start, env_end = int(fields[47]), int(fields[48])  # stat fields 50 and 51
        with open("/proc/self/environ", "rb") as f:
            block = f.read()
    except (OSError, ValueError, IndexError):
        return False
    prefix, offset, found = f"{name}=".encode(), 0, False
    for entry in block.split(b"\0"):
        if entry.startswith(prefix) and env_start + offset + len(entry) <= env_end:
            ctypes.memset(env_start + offset, 0, len(entry))
            found = True
        offset += len(entry) + 1
    with open("/proc/self/environ", "rb") as f:
        return found and prefix not in f.read()


def _share_view(store: Store, lease: LeaseKeeper, metrics: ServiceMetrics
                ) -> Callable[[float], None] | None:
    """Several instances (PostgreSQL): the leader's view of the cluster shared through the
    database (``engine.shared_view``): what to call after the leader's ticks to publish
    it; a standby reads it at each poll of the lease. None on SQLite (one instance)."""
    if not lease.standby:
        return None
    lease.standing_by = ViewFollower(store.lease, metrics.observed).follow
    return ViewPublisher(store.lease, metrics.observed,
                         lambda: lease.lease if lease.leading else None).after_tick


def build_service(settings: Settings, token: str, cluster: Cluster) -> web.Application:
    """Store + artifacts + scheduler loop + API (+ the webhook delivery worker) on
    ``cluster``; the loops start with the app (on PostgreSQL: once this instance leads)
    and stop (then the store closes) on shutdown."""
    store = Store(settings.resolved_store, synchronous=settings.sqlite_synchronous)
    standby = store.engine_name == "postgresql"  # SQLite: one instance, refused otherwise
    lease = LeaseKeeper(store.lease, this_instance(settings.api_port),
                        settings.resolved_lease_ttl_s, standby=standby, on_lost=_stop_process)
    try:
        lease.acquire()  # before any loop: one instance per SQLite file, one leader
    except BaseException:
        store.close()
        raise

    def fence_thread() -> None:  # the first call in each singleton's thread
        assert lease.lease is not None
        store.core.fence_thread(fence_of(lease.lease), lease.lose)

    # SQLite: no commit pays for copying the WAL (PostgreSQL checkpoints by itself)
    checkpointer = None if standby else Checkpointer(store)
    artifacts = Artifacts(settings.shared_root)
    scheduler = Scheduler(store, cluster, settings, artifacts)
    metrics = ServiceMetrics(store.tasks.counts_by_state, users=store, queue=store.console,
                             nodes=store.nodes)
    loop = SchedulerLoop(MeteredScheduler(scheduler, metrics,
                                          after_tick=_share_view(store, lease, metrics)),
                         settings.scheduler.tick_s, storage=store, thread_init=fence_thread)
    metrics.watch_loop(loop)
    metrics.watch_lease(lease)
    app = create_app(settings, store, cluster, artifacts, token=token,
                     scheduler_loop=loop, metrics=metrics, lease=lease)
    follower = FollowerLoop(LogFollower(
        store, cluster, artifacts, max_points=settings.progress.max_points,
        max_read_chars=settings.progress.max_read_chars), settings.progress.poll_s,
        thread_init=fence_thread)
    delivery = (webhook_delivery.attach(app, store, settings.webhooks, thread_init=fence_thread)
                if settings.webhooks.enabled else None)  # stops before stop_loop closes the store

    def lead() -> None:
        """The leader's singletons: at start, or when a standby is elected."""
        if checkpointer is not None:
            checkpointer.start()
        loop.start()
        if settings.progress.enabled:
            follower.start()
        if delivery is not None:
            delivery.begin()

    async def start_loop(_: web.Application) -> None:
        if lease.lease is not None:
            lead()
        else:
            events = asyncio.get_running_loop()
            lease.on_elected = lambda _row: events.call_soon_threadsafe(lead)
        lease.start()

    async def stop_loop(_: web.Application) -> None:
        # Within a supervisor's stop grace: a tick blocked in a Ray call is not waited for
        # past LOOPS_STOP_S (the store stays open for it; the exit does not wait either).
        deadline = time.monotonic() + LOOPS_STOP_S
        loop.stop(LOOPS_STOP_S)
        follower.stop(max(0.0, deadline - time.monotonic()))
        if checkpointer is not None:
            checkpointer.stop()
        lease.stop()
        if loop.alive or follower.alive:
            log.warning("stopping with a loop still in a call (scheduler alive: %s, log "
                        "follower alive: %s); its writes are each one transaction",
                        loop.alive, follower.alive)
            return
        store.close()

    app.on_startup.append(start_loop)
    app.on_cleanup.append(stop_loop)
    return app


class ErrorAccessLogger(AbstractAccessLogger):
    """Access log of the requests worth reading: errors (status >= 400) and slow ones.

    Successful requests are counted by route and status in ``/metrics`` instead; a line
    per poll of ``argus wait`` or a dashboard would drown the log (and cost ~10% of the
    API's CPU under load).

    Refusals a client can make by the thousand (401: a wrong token, 429: a limit) are
    counted and logged as one summary line per ``SUMMARY_S`` per logger, not one line
    each: a guessing or flooding client must not fill the disk with the log.
    """

    SLOW_S = 1.0
    QUIET = frozenset({401, 429})
    SUMMARY_S = 10.0
    # shared by the per-connection instances aiohttp makes (the event loop's thread only)
    _quiet: ClassVar[Counter[int]] = Counter()
    _summary_at: ClassVar[float] = float("-inf")

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        if response.status in self.QUIET and time < self.SLOW_S:
            cls = type(self)
            cls._quiet[response.status] += 1
            now = monotonic()
            if now - cls._summary_at >= self.SUMMARY_S:
                counts = ", ".join(f"{n} x {status}" for status, n in sorted(cls._quiet.items()))
                self.logger.info("refused requests since the last summary: %s (the last "
                                 'from %s: "%s %s")', counts, request.remote, request.method,
                                 request.path)
                cls._quiet.clear()
                cls._summary_at = now
            return
        if response.status >= 400 or time >= self.SLOW_S:
            self.logger.info('%s "%s %s" %d %.1fms', request.remote, request.method,
                             request.path_qs, response.status, time * 1000)


# The event loop shares the GIL with the store's, the work lane's and the scheduler's
# threads. A thread that wants the GIL waits up to the switch interval (CPython: 5 ms)
# before the holder is asked to let go, and a request takes the GIL on the loop several
# times (accept, read, hand-off, answer): behind a few busy threads (one user's heavy
# reads) that is tens of milliseconds per request for everyone. A shorter interval
# costs the busy threads a few more switches.
GIL_SWITCH_S = 0.001


async def _freeze_startup_objects(_: web.Application) -> None:
    """What startup made (modules, config, the app) lives as long as the process: moved
    out of the collector's reach, a full collection (paid by whichever thread allocates
    at that moment: a tick, a request) walks only what came after. In the tick benches a
    full collection was an 8-15 ms pause in one tick."""
    gc.freeze()


def serve(app: web.Application, host: str, port: int,
          limits: ServerLimits | None = None) -> None:
    """Run until SIGTERM/SIGINT, then shut down gracefully (cleanup hooks run)."""
    sys.setswitchinterval(GIL_SWITCH_S)
    app.on_startup.append(_freeze_startup_objects)  # last: after the loops started
    run(app, host, port, limits or ServerLimits(), access_log_class=ErrorAccessLogger,
        access_log=logging.getLogger("argus.access"))


def _stop_process(why: str) -> None:
    """The lease was taken over: stop as on SIGTERM (the supervisor restarts the service,
    which then waits for the lease like any second instance)."""
    os.kill(os.getpid(), signal.SIGTERM)


def _fail(message: str) -> None:
    print(f"argus-api: {message}", file=sys.stderr)
    raise SystemExit(2)


def _db_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="argus-api db", description="the service's database")
    sub = p.add_subparsers(dest="action", required=True)
    b = sub.add_parser("backup", help="a consistent copy of the live SQLite database "
                                      "(SQLite's online backup; the service may keep running)")
    b.add_argument("--to", required=True, metavar="PATH",
                   help="the backup file to write; it must not exist")
    b.add_argument("--config", metavar="FILE", help="service YAML config (where the database is)")
    b.add_argument("--db", metavar="PATH",
                   help="the database (v2.sqlite.db_path); default: the config's")
    c = sub.add_parser(
        "copy", help="move a whole installation to another store (SQLite -> PostgreSQL or "
                     "back), in one transaction, checked table by table",
        description="Copy every table of the store at --from into the empty store at --to "
                    "in one transaction, then compare each table's row count and checksum "
                    "on both sides (a difference rolls the copy back). The source is read "
                    "in one snapshot and never written; its schema must be this code's "
                    "version. The target must hold no rows. Exit 1 when nothing was copied.")
    c.add_argument("--from", dest="source", required=True, metavar="URL",
                   help="the installation: sqlite:///abs/path.sqlite3, a file path, or "
                        "postgresql://user[:password]@host[:port]/db")
    c.add_argument("--to", dest="target", required=True, metavar="URL",
                   help="an empty store (created if it is a new SQLite file): a URL or a path "
                        "as --from")
    return p


def _db_backup(args: argparse.Namespace) -> int:
    try:
        source = load_settings(args.config).with_overrides(db_path=args.db).resolved_db_path
    except ConfigError as exc:
        _fail(str(exc))
    try:
        report = backup(source, args.to)
    except BackupError as exc:
        print(f"argus-api db backup: {exc}", file=sys.stderr)
        return 1
    print("\n".join(report.lines()))
    return 0


def _db_copy(args: argparse.Namespace) -> int:
    try:
        report = copy_store(args.source, args.target)
    except CopyError as exc:
        print(f"argus-api db copy: {exc}", file=sys.stderr)
        return 1
    print("\n".join(report.lines()))
    return 0 if report.ok else 1


def db_main(argv: Sequence[str]) -> int:
    """``argus-api db backup --to PATH [--config FILE] [--db PATH]``: a consistent copy of
    the database (``service.store.backup``), checked, and what it holds printed.
    ``argus-api db copy --from URL --to URL``: the installation moved to another store
    (``service.store.copy``), each table checked. Exit 2 for a configuration or usage
    error, 1 when nothing was written."""
    args = _db_parser().parse_args(argv)
    return _db_backup(args) if args.action == "backup" else _db_copy(args)


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["db"]:
        raise SystemExit(db_main(argv[1:]))
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr)
    try:
        settings = settings_from_args(args)
        token = read_token(settings, os.environ)
    except ConfigError as exc:
        _fail(str(exc))
    if not scrub_secret(settings.token_env):
        log.warning("could not clear %s from this process's initial environment block "
                    "(/proc/<pid>/environ): docs/security.md, the trust boundary",
                    settings.token_env)
    from service.cluster.raycluster import RayCluster  # imported here: unit tests never load ray

    cluster = RayCluster(settings)
    try:
        app = build_service(settings, token, cluster)
    except StoreOpenError as exc:  # already names the server (never its password)
        _fail(str(exc))
    except (OSError, sqlite3.Error, SchemaError, StoreUrlError) as exc:
        _fail(f"cannot open the database {redacted(settings.resolved_store)}: {exc}")
    except LeaseHeld as exc:
        _fail(f"the database {redacted(settings.resolved_store)} is in use by another Argus "
              f"instance: {exc}")
    log.info("listening on %s:%d, db %s, ray %s", settings.api_host, settings.api_port,
             redacted(settings.resolved_store), settings.head_json or settings.ray_address)
    serve(app, settings.api_host, settings.api_port, ServerLimits.from_settings(settings))
    cluster.close()
    _exit_past_stuck_threads(EXIT_GRACE_S)


def _exit_past_stuck_threads(grace_s: float,
                             threads: Sequence[threading.Thread] | None = None) -> None:
    """Exit now if other threads (default: all) are still running after ``grace_s``.

    A Ray call stuck on an unreachable GCS can block for a minute, and the interpreter
    joins thread-pool workers (daemon or not) before exiting. By now the store is closed
    and every accepted task is committed, so nothing is lost by not waiting for them.
    """
    if threads is None:
        threads = [t for t in threading.enumerate() if t is not threading.current_thread()]
    deadline = time.monotonic() + grace_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in threads if t.is_alive()]
    if stuck:
        log.warning("exiting without waiting for blocked threads: %s", ", ".join(stuck))
        logging.shutdown()
        os._exit(0)


if __name__ == "__main__":
    main()
