"""``argus-node``: run a node under supervisord, inspect it, and the supervisord programs.

    argus-node run                      validate ARGUS_*, render, exec supervisord -n
    argus-node status [--json]          role, Ray state, head.json freshness, programs
    argus-node backdate-record SECONDS  age head.json (fault injection: stale record)
    argus-node wipe-gcs-store --yes     remove the head's GCS store: the next head is a new
                                        cluster (refused while a head holds the store)
    argus-node health [--json]          run this node's health checks once and print them
                                        (exit 1 when unhealthy; nothing is published)
    argus-node head-watchdog | head-publisher | worker-watchdog | node-health | fatal-listener
    argus-node api-service              the task service (ARGUS_API_CONFIG set: the head, or
                                        the role api, which runs nothing else)
    argus-node local up|down|status|pids|exec|move-head   local multi-node launcher
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import xmlrpc.client
from typing import Any

from raypool import apiservice, discovery, supervisor
from raypool.config import NodeSettings, SettingsError, load_node_settings
from raypool.headrecord import HeadRecord, judge
from raypool.health import HealthError, gcs_alive, is_registered, list_nodes
from raypool.procs import NODE_TAG_ENV


def _settings() -> NodeSettings:
    try:
        return load_node_settings()
    except SettingsError as exc:
        print(f"argus-node: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def supervisord_executable() -> str:
    sibling = os.path.join(os.path.dirname(sys.executable), "supervisord")
    return sibling if os.access(sibling, os.X_OK) else (shutil.which("supervisord")
                                                        or "supervisord")


def cmd_run(_args: argparse.Namespace) -> int:
    settings = _settings()
    problem = apiservice.token_problem(settings, os.environ)
    if problem:
        print(f"argus-node: invalid node settings:\n  {problem}", file=sys.stderr)
        return 2
    conf = supervisor.write_config(settings)
    if settings.api_config:  # the token leaves the environment Ray and the rest inherit
        apiservice.keep_token(settings, os.environ)
    else:
        os.environ.pop(settings.api_token_env, None)
    apiservice.keep_store_secrets(settings, os.environ)
    os.environ[NODE_TAG_ENV] = settings.node_tag
    exe = supervisord_executable()
    print(f"argus-node: {settings.role} {settings.node_name} ip={settings.node_ip} "
          f"config={conf}", flush=True)
    os.execv(exe, [exe, "-n", "-c", conf])
    return 1  # unreachable: execv replaces this process or raises


def supervisor_rpc(settings: NodeSettings) -> Any:
    from supervisor.xmlrpc import SupervisorTransport

    transport = SupervisorTransport(None, None, f"unix://{supervisor.socket_path(settings)}")
    return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport)


def node_status(settings: NodeSettings) -> dict[str, Any]:
    """Everything ``status`` shows, as JSON-safe data; ``ok`` says whether all is well."""
    out: dict[str, Any] = {"role": settings.role, "node": settings.node_name,
                           "node_ip": settings.node_ip, "head_file": settings.head_ip_file}
    try:
        infos = supervisor_rpc(settings).supervisor.getAllProcessInfo()
        out["programs"] = {i["name"]: i["statename"] for i in infos}
    except (OSError, xmlrpc.client.Error) as exc:
        out["programs"] = {}
        out["supervisord_error"] = str(exc)
    result = discovery.read_record(settings.head_ip_file, settings.cluster_name)
    record = result.record
    fresh = False
    if record is not None:
        verdict, _ = judge(record, result.mtime, time.time(), time.monotonic(), None)
        fresh = verdict.fresh
        out["head_record"] = {"fresh": fresh, "reason": verdict.reason,
                              "gcs_address": record.gcs_address,
                              "job_server_url": record.job_server_url,
                              "generation": record.generation, "seq": record.seq}
    else:
        out["head_record"] = {"fresh": False, "reason": result.reason}
    if settings.role == "api":
        out["ray"] = "not run (api)"  # the service reaches the head through head.json
    elif settings.role == "head":
        address = f"{settings.node_ip}:{settings.ray_port}"
        out["ray"] = "healthy" if gcs_alive(address) else "down"
    elif record is None:
        out["ray"] = "unknown (no head record)"
    else:
        try:
            nodes = list_nodes(record.gcs_address)
            joined = is_registered(nodes, settings.node_ip, settings.node_manager_port)
            out["ray"] = "joined" if joined else "not joined"
        except HealthError as exc:
            out["ray"] = f"head unreachable: {exc}"
    # the task service stopped on purpose (scripts/21_stop_api.sh) leaves the node healthy
    running = all(state == "RUNNING" or (name, state) == (supervisor.API_PROGRAM, "STOPPED")
                  for name, state in out["programs"].items())
    if settings.role == "api":  # its health is the service's: the head's is the head's
        out["ok"] = bool(out["programs"]) and running
    else:
        out["ok"] = (bool(out["programs"]) and running and fresh
                     and out["ray"] in ("healthy", "joined"))
    return out


def cmd_status(args: argparse.Namespace) -> int:
    status = node_status(_settings())
    if args.json:
        print(json.dumps(status, indent=1, sort_keys=True))
    else:
        print(f"{status['role']} {status['node']} ip={status['node_ip']} ray={status['ray']}")
        head = status["head_record"]
        where = (f"head {head['gcs_address']} generation {head['generation']} seq {head['seq']}; "
                 if "gcs_address" in head else "")
        print(f"head.json: {where}{head['reason']}")
        for name, state in sorted(status["programs"].items()):
            print(f"  {name:28} {state}")
        if "supervisord_error" in status:
            print(f"  supervisord: {status['supervisord_error']}")
    return 0 if status["ok"] else 1


def cmd_backdate(args: argparse.Namespace) -> int:
    if args.file:
        path = args.file
        try:
            with open(path) as f:
                cluster = json.load(f).get("cluster_name", "")
        except (OSError, ValueError, AttributeError) as exc:
            print(f"argus-node: cannot read {path}: {exc}", file=sys.stderr)
            return 1
    else:
        settings = _settings()
        path, cluster = settings.head_ip_file, settings.cluster_name
    result = discovery.read_record(path, cluster)
    if result.record is None:
        print(f"argus-node: {result.reason}", file=sys.stderr)
        return 1
    old = time.time() - args.seconds
    data = json.loads(result.record.to_json())
    data["written_at"] = old
    discovery.write_record(path, HeadRecord(**data))
    os.utime(path, (old, old))
    print(f"head.json written_at and mtime set {args.seconds:g}s in the past")
    return 0


def cmd_wipe(args: argparse.Namespace) -> int:
    from raypool.gcsstore import StoreLocked, wipe

    settings = _settings()
    if not args.yes:
        print(f"argus-node: this removes {settings.gcs_store_dir}: every job, actor and node "
              "the cluster knows is forgotten; run again with --yes", file=sys.stderr)
        return 2
    try:
        print(wipe(settings))
    except (StoreLocked, OSError) as exc:
        print(f"argus-node: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_health(args: argparse.Namespace) -> int:
    from raypool.nodehealth import collect, default_probes

    settings = _settings()
    report = collect(settings, default_probes())
    if args.json:
        print(report.to_json(), end="")
    else:
        print(f"{settings.node_name}: {'healthy' if report.healthy else 'UNHEALTHY'}: "
              f"{report.reason} (file {settings.health_file})")
        for check in report.checks:
            print(f"  {'ok  ' if check.ok else 'FAIL'} {check.name:16} {check.detail}")
    return 0 if report.healthy else 1


def _program(name: str) -> int:
    from raypool.logsetup import setup_logging

    settings = _settings()
    logger = setup_logging(settings, name)
    if name == "head-watchdog":
        from raypool.head import run_head_watchdog
        return run_head_watchdog(settings, logger)
    if name == "head-publisher":
        from raypool.head import HeadPublisher
        return HeadPublisher(settings, logger).run()
    if name == "node-health":
        from raypool.nodehealth import run_node_health
        return run_node_health(settings, logger)
    from raypool.worker import run_worker_watchdog
    return run_worker_watchdog(settings, logger)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="argus-node", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="render the supervisord config and exec supervisord -n")
    status = sub.add_parser("status", help="show this node's state (exit 1 unless healthy)")
    status.add_argument("--json", action="store_true")
    backdate = sub.add_parser("backdate-record", help="age head.json by SECONDS")
    backdate.add_argument("seconds", type=float)
    backdate.add_argument("--file", help="head.json path (default: from ARGUS_* settings)")
    wipe = sub.add_parser("wipe-gcs-store",
                          help="remove the head's GCS store (stop the head first)")
    wipe.add_argument("--yes", action="store_true", help="really remove it")
    health = sub.add_parser("health", help="run this node's health checks once and print them")
    health.add_argument("--json", action="store_true")
    for name in ("head-watchdog", "head-publisher", "worker-watchdog", "node-health",
                 "fatal-listener", "api-service"):
        sub.add_parser(name, help=f"supervisord program: {name}")
    from raypool.local.cli import add_local_parser
    add_local_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "run":
        return cmd_run(args)
    if args.command == "status":
        return cmd_status(args)
    if args.command == "backdate-record":
        return cmd_backdate(args)
    if args.command == "wipe-gcs-store":
        return cmd_wipe(args)
    if args.command == "health":
        return cmd_health(args)
    if args.command == "fatal-listener":
        from raypool.fatal_listener import main as listener_main
        return listener_main()
    if args.command == "local":
        return args.func(args)
    if args.command == "api-service":
        return apiservice.exec_service(_settings())
    return _program(args.command)


if __name__ == "__main__":
    sys.exit(main())
