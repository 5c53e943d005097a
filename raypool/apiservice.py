"""The task service as a program of the head's supervisord (``ARGUS_API_CONFIG`` set on the
head): a ``docker restart`` of the head, a crash or a ``kill -9`` of the service, and the
service is started again by the node's PID 1, with the rest of the node. The role ``api``
runs this program alone: a second service instance in a container of its own, on the same
PostgreSQL store (docs/operations.md, "Running Argus highly available").

The node runtime imports nothing of the service: the program is a command line, run from
the repository the head mounts (``ARGUS_API_REPO``, default ``/workspace/argus``) on the
node's Python, which has Ray. Its bearer token comes in the head's environment (the
variable ``ARGUS_API_TOKEN_ENV`` names, default ``ARGUS_API_TOKEN``); ``argus-node run``
takes it out of the environment before supervisord starts (so neither Ray nor the
watchdogs ever hold it) and keeps it in a 0600 file of the node's run dir, which this
program reads when it starts the service. The store's URL and ``PGPASSWORD`` (which carry
the database's password) move the same way, into a 0600 JSON file beside it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import MutableMapping

from raypool.atomicfile import write_atomic
from raypool.config import NodeSettings

PROGRAM = "argus_api"
TOKEN_FILE = "argus-api.token"
# The store's URL carries its password (postgresql://user:pw@host/db), libpq's PGPASSWORD is
# one: kept out of Ray's environment like the token, in a 0600 file the program reads.
STORE_SECRETS = ("ARGUS_STORE_URL", "PGPASSWORD")
SECRETS_FILE = "argus-api.secrets.json"


def token_path(settings: NodeSettings) -> str:
    return os.path.join(settings.run_dir, TOKEN_FILE)


def config_path(settings: NodeSettings) -> str:
    """``ARGUS_API_CONFIG``, a path relative to the repository unless absolute."""
    return os.path.join(settings.api_repo, settings.api_config)


def token_problem(settings: NodeSettings, environ: MutableMapping[str, str]) -> str | None:
    """What is wrong with the token ``argus-node run`` is given (None: nothing)."""
    if settings.api_config and not environ.get(settings.api_token_env, "").strip():
        return (f"ARGUS_API_CONFIG={settings.api_config!r}: the task service needs its token "
                f"in {settings.api_token_env} as well (it never runs without one)")
    return None


def keep_token(settings: NodeSettings, environ: MutableMapping[str, str]) -> None:
    """Move the service's token from ``environ`` into its file (0600, the run dir)."""
    token = environ.pop(settings.api_token_env, "").strip()
    os.makedirs(settings.run_dir, exist_ok=True)
    write_atomic(token_path(settings), token, mode=0o600)


def secrets_path(settings: NodeSettings) -> str:
    return os.path.join(settings.run_dir, SECRETS_FILE)


def keep_store_secrets(settings: NodeSettings, environ: MutableMapping[str, str]) -> None:
    """Move the store's secrets (``STORE_SECRETS``) out of ``environ``: into their file
    (0600, the run dir) when the node runs the service, else nowhere."""
    kept = {name: environ.pop(name) for name in STORE_SECRETS if name in environ}
    kept = {name: value for name, value in kept.items() if value.strip()}
    if settings.api_config:
        os.makedirs(settings.run_dir, exist_ok=True)
        write_atomic(secrets_path(settings), json.dumps(kept), mode=0o600)


def service_argv(settings: NodeSettings, python: str = sys.executable) -> list[str]:
    return [python, "-m", "service.main", "--config", config_path(settings)]


def service_env(settings: NodeSettings, environ: MutableMapping[str, str]) -> dict[str, str]:
    """The service's environment: this one, the token, the repository on the path."""
    with open(token_path(settings)) as f:
        token = f.read().strip()
    env = dict(environ)
    env[settings.api_token_env] = token
    try:
        with open(secrets_path(settings)) as f:
            env.update(json.load(f))
    except FileNotFoundError:  # a node started before the file existed: no store secrets
        pass
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = settings.api_repo + (os.pathsep + path if path else "")
    return env


def exec_service(settings: NodeSettings) -> int:
    """The program: become the service (supervisord then watches the service itself)."""
    try:
        env = service_env(settings, os.environ)
    except OSError as exc:
        print(f"argus-node api-service: no token file ({exc}); restart the node with "
              f"{settings.api_token_env} set", file=sys.stderr)
        return 2
    os.chdir(settings.api_repo)
    argv = service_argv(settings)
    os.execve(argv[0], argv, env)
    return 1  # unreachable: execve replaces this process or raises
