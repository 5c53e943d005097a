"""supervisord event listener: a program that went FATAL (start retries exhausted) is
started again through the RPC interface, so no program stays FATAL forever.

Speaks supervisord's listener protocol on stdin/stdout; logs go to stderr.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from supervisor import childutils

RESTART_DELAY_S = 5.0


def parse_payload(payload: str) -> dict[str, str]:
    """``processname:x groupname:x from_state:BACKOFF`` -> dict (first line only)."""
    first = payload.split("\n", 1)[0]
    return dict(token.split(":", 1) for token in first.split() if ":" in token)


def restart_fatal(payload: str, rpc: Any, sleep: Callable[[float], None],
                  log: TextIO) -> str | None:
    """Start the FATAL program named in ``payload``; returns its name (None if unnamed)."""
    fields = parse_payload(payload)
    name = fields.get("processname")
    if not name:
        return None
    group = fields.get("groupname", name)
    sleep(RESTART_DELAY_S)  # a short pause so a crash loop does not spin the CPU
    try:
        rpc.supervisor.startProcess(f"{group}:{name}", False)
        log.write(f"fatal-listener: restarted {group}:{name}\n")
    except Exception as exc:  # the RPC error is logged; the listener must keep listening
        log.write(f"fatal-listener: could not restart {group}:{name}: {exc}\n")
    log.flush()
    return name


def main(stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout) -> int:
    rpc = childutils.getRPCInterface(os.environ)
    while True:
        headers, payload = childutils.listener.wait(stdin, stdout)
        if headers.get("eventname") == "PROCESS_STATE_FATAL":
            restart_fatal(payload, rpc, time.sleep, sys.stderr)
        childutils.listener.ok(stdout)
