"""Render the supervisord config for one node into its run dir.

Each program is one ``argus-node`` subcommand; settings reach it through the environment
supervisord inherits from ``argus-node run``, so nothing but quoted paths is rendered into
``command=``. (Ray's ``--resources`` JSON never passes through supervisord's shlex; the
worker watchdog hands it to ``ray start`` as one argv element.)

Stop semantics: ``stopasgroup=false`` so only the watchdog gets SIGTERM and stops Ray in
order (a TERM to the whole group reaches the GCS before the drain and makes the head take
30+ s to stop); ``killasgroup=true`` so a watchdog that overruns ``stopwaitsecs`` is
SIGKILLed with everything under it.

The head also runs the task service when ``ARGUS_API_CONFIG`` is set, and the role ``api``
runs it alone (``raypool/apiservice.py``): the program ``argus_api``, stopped and killed as
a group, its log in ``<node log dir>/argus-api.log`` (``supervisorctl tail argus_api``),
restarted like every program (at once after a crash; a failing start after 1, 2, 3 ... s,
and after FATAL by the fatal listener).
"""

from __future__ import annotations

import os
import shlex
import sys
from importlib import resources
from string import Template

from raypool.atomicfile import write_atomic
from raypool.config import SOCKET_NAME, NodeSettings

PROGRAMS = {
    "head": ("argus_head_watchdog", "argus_head_publisher"),
    "worker": ("argus_worker_watchdog",),
    "api": (),  # the task service alone (API_PROGRAM): no Ray, no node health to publish
}
# Both roles, unless ARGUS_HEALTH_INTERVAL_S=0 (raypool/nodehealth.py).
HEALTH_PROGRAM = "argus_node_health"
API_PROGRAM = "argus_api"  # the head, with ARGUS_API_CONFIG (raypool/apiservice.py)
SUBCOMMANDS = {
    "argus_head_watchdog": "head-watchdog",
    "argus_head_publisher": "head-publisher",
    "argus_worker_watchdog": "worker-watchdog",
    "argus_fatal_listener": "fatal-listener",
    HEALTH_PROGRAM: "node-health",
    API_PROGRAM: "api-service",
}
PROGRAM_BLOCK = Template("""
[program:${name}]
command=${command}
autostart=true
autorestart=true
startsecs=${startsecs}
startretries=5
stopsignal=TERM
stopwaitsecs=${stopwaitsecs}
stopasgroup=false
killasgroup=true
redirect_stderr=true
stdout_logfile=/dev/fd/1
stdout_logfile_maxbytes=0
""")
API_BLOCK = Template("""
[program:${name}]
command=${command}
autostart=true
autorestart=true
startsecs=3
startretries=5
stopsignal=TERM
stopwaitsecs=15
stopasgroup=true
killasgroup=true
redirect_stderr=true
stdout_logfile=${logfile}
stdout_logfile_maxbytes=50MB
stdout_logfile_backups=3
""")


def template_path() -> str:
    return str(resources.files("raypool") / "templates" / "supervisord.conf.tmpl")


def config_path(settings: NodeSettings) -> str:
    return os.path.join(settings.run_dir, "supervisord.conf")


def socket_path(settings: NodeSettings) -> str:
    return os.path.join(settings.run_dir, SOCKET_NAME)


def _ini(value: str) -> str:
    """Escape for supervisord's ini values, which expand ``%(name)s``."""
    return value.replace("%", "%%")


def program_command(program: str, python: str = sys.executable) -> str:
    return _ini(shlex.join([python, "-m", "raypool.cli", SUBCOMMANDS[program]]))


def programs(settings: NodeSettings) -> tuple[str, ...]:
    # an api container is no node: it publishes no health file the service would take for one
    node = settings.role in ("head", "worker")
    health = (HEALTH_PROGRAM,) if node and settings.health_interval_s > 0 else ()
    api = (API_PROGRAM,) if settings.role != "worker" and settings.api_config else ()
    return PROGRAMS[settings.role] + health + api


def _block(name: str, settings: NodeSettings, python: str) -> str:
    if name == API_PROGRAM:
        return API_BLOCK.substitute(
            name=name, command=program_command(name, python),
            logfile=_ini(os.path.join(settings.node_log_dir, "argus-api.log")))
    return PROGRAM_BLOCK.substitute(
        name=name, command=program_command(name, python), startsecs=3,
        stopwaitsecs=int(settings.stop_timeout_s) + 15)


def render(settings: NodeSettings, python: str = sys.executable) -> str:
    blocks = "".join(_block(name, settings, python) for name in programs(settings))
    with open(template_path()) as f:
        template = Template(f.read())
    return template.substitute(
        role=settings.role, node_name=settings.node_name,
        node_log_dir=_ini(settings.node_log_dir), run_dir=_ini(settings.run_dir),
        socket=_ini(socket_path(settings)),
        listener_command=program_command("argus_fatal_listener", python), programs=blocks)


def write_config(settings: NodeSettings) -> str:
    """Render into ``<run dir>/supervisord.conf`` (dirs created); returns the path."""
    os.makedirs(settings.run_dir, exist_ok=True)
    os.makedirs(settings.node_log_dir, exist_ok=True)
    path = config_path(settings)
    write_atomic(path, render(settings))
    return path
