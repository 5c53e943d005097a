"""The ``argus-node local ...`` subcommands: parse, call :mod:`raypool.local.launcher`, print.

A :class:`~raypool.local.state.LocalError` ends a command with its message and exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from raypool.config import DEFAULT_CLUSTER_NAME
from raypool.local.launcher import (
    PROCESS_KINDS,
    down,
    exec_in_node,
    move_head,
    node_pids,
    status,
    up,
    wipe_head_store,
)
from raypool.local.state import LocalCluster, LocalError

Command = Callable[[argparse.Namespace], int]


def add_local_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    local = sub.add_parser("local", help="local multi-node launcher (quick start, tests)")
    lsub = local.add_subparsers(dest="local_command", required=True)
    default_dir = os.environ.get("ARGUS_LOCAL_DIR", "/tmp/argus-local")

    def with_dir(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--state-dir", default=default_dir,
                       help="where state, run dirs, logs and head.json live "
                            "(default $ARGUS_LOCAL_DIR or /tmp/argus-local)")
        return p

    p = with_dir(lsub.add_parser("up", help="start a head and N workers; print the job URL"))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--isolation", choices=("ports", "netns"), default="ports")
    p.add_argument("--gpus", type=int, default=4, help="fake GPUs per worker")
    p.add_argument("--cpus", type=int, default=16, help="CPUs per worker")
    p.add_argument("--ttl", type=float, default=10.0, help="head.json TTL seconds")
    p.add_argument("--cluster-name", default=DEFAULT_CLUSTER_NAME,
                   help=f"ARGUS_CLUSTER_NAME of every node (default {DEFAULT_CLUSTER_NAME})")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds for each step: the head healthy, then each worker joined")
    p.set_defaults(func=_cmd_up)
    with_dir(lsub.add_parser("down", help="stop and remove everything `up` created")
             ).set_defaults(func=_cmd_down)
    p = with_dir(lsub.add_parser("status", help="nodes, addresses, alive workers"))
    p.set_defaults(func=_cmd_status)
    p = with_dir(lsub.add_parser("pids", help="host pids of one node's processes"))
    p.add_argument("node")
    p.add_argument("kind", choices=sorted(PROCESS_KINDS))
    p.set_defaults(func=_cmd_pids)
    p = with_dir(lsub.add_parser("exec", help="run a command inside a node (netns mode)"))
    p.add_argument("node")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    p.set_defaults(func=_cmd_exec)
    p = with_dir(lsub.add_parser("move-head", help="restart the head on a new address"))
    p.set_defaults(func=_cmd_move_head)
    p = with_dir(lsub.add_parser(
        "wipe-gcs-store", help="stop the head, wipe its GCS store, start it: a new cluster"))
    p.add_argument("--yes", action="store_true", help="really wipe it")
    p.set_defaults(func=_cmd_wipe)


def _guard(fn: Command) -> Command:
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except LocalError as exc:
            print(f"argus-node local: {exc}", file=sys.stderr)
            return 2
    return wrapped


@_guard
def _cmd_up(args: argparse.Namespace) -> int:
    if args.workers < 0 or args.gpus < 0 or args.cpus < 1:
        raise LocalError("--workers and --gpus must be >= 0, --cpus >= 1")
    cluster = up(args.state_dir, args.workers, args.isolation, cluster_name=args.cluster_name,
                 ttl_s=args.ttl, gpus=args.gpus, cpus=args.cpus, timeout_s=args.timeout)
    if cluster.isolation == "ports" and not cluster.options.get("pid_ns"):
        print("argus-node local up: no PID namespace per node here (not root, and no "
              "unprivileged user namespaces): a job driver may register with the head's "
              "raylet, and a head fault then kills its run", file=sys.stderr)
    print(cluster.job_server_url)
    return 0


@_guard
def _cmd_down(args: argparse.Namespace) -> int:
    problems = down(args.state_dir)
    for problem in problems:
        print(f"argus-node local down: {problem}", file=sys.stderr)
    return 1 if problems else 0


@_guard
def _cmd_status(args: argparse.Namespace) -> int:
    print(json.dumps(status(args.state_dir), indent=1, sort_keys=True))
    return 0


@_guard
def _cmd_pids(args: argparse.Namespace) -> int:
    pids = node_pids(LocalCluster.load(os.path.abspath(args.state_dir)), args.node, args.kind)
    print("\n".join(map(str, pids)))
    return 0 if pids else 1


@_guard
def _cmd_exec(args: argparse.Namespace) -> int:
    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        raise LocalError("no command given")
    return exec_in_node(LocalCluster.load(os.path.abspath(args.state_dir)), args.node, command)


@_guard
def _cmd_move_head(args: argparse.Namespace) -> int:
    print(move_head(args.state_dir))
    return 0


@_guard
def _cmd_wipe(args: argparse.Namespace) -> int:
    if not args.yes:
        raise LocalError("this forgets every job, actor and node of the cluster (its runs "
                         "end CLUSTER_LOST); run again with --yes")
    print(wipe_head_store(args.state_dir))
    return 0
