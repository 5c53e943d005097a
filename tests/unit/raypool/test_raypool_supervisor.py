"""Rendered supervisord config per role, parsed like supervisord parses it."""

from __future__ import annotations

import configparser
import io
import os
import shlex

import pytest

from raypool import supervisor
from raypool.config import load_node_settings
from raypool.fatal_listener import parse_payload, restart_fatal


def settings(role: str, tmp_path, run_dir: str | None = None, **extra: str):
    return load_node_settings({
        "ARGUS_ROLE": role, "ARGUS_NODE_IP": "10.0.0.3", "ARGUS_NODE_NAME": "n1",
        "ARGUS_SHARED_ROOT": str(tmp_path / "shared"),
        "ARGUS_RUN_DIR": run_dir or str(tmp_path / "run"), **extra,
    })


def parse(text: str) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser()
    parser.read_string(text)
    return parser


@pytest.mark.parametrize("role,programs", [
    ("head", {"argus_head_watchdog", "argus_head_publisher", "argus_node_health"}),
    ("worker", {"argus_worker_watchdog", "argus_node_health"}),
])
def test_programs_per_role(tmp_path, role, programs):
    conf = parse(supervisor.render(settings(role, tmp_path), python="/usr/bin/python3"))
    found = {s.split(":", 1)[1] for s in conf.sections() if s.startswith("program:")}
    assert found == programs
    for name in programs:
        section = conf[f"program:{name}"]
        assert section["autorestart"] == "true"
        assert section["stopasgroup"] == "false"
        assert section["killasgroup"] == "true"
        assert int(section["startretries"]) >= 3
        assert int(section["startsecs"]) >= 1
        assert int(section["stopwaitsecs"]) > 10
        assert section["stdout_logfile"] == "/dev/fd/1"
        assert section["stdout_logfile_maxbytes"] == "0"
        argv = shlex.split(section["command"])
        assert argv[:3] == ["/usr/bin/python3", "-m", "raypool.cli"]
        assert argv[3] == supervisor.SUBCOMMANDS[name]


@pytest.mark.parametrize("role", ["head", "worker"])
def test_no_health_program_when_checks_are_off(tmp_path, role):
    conf = parse(supervisor.render(settings(role, tmp_path, ARGUS_HEALTH_INTERVAL_S="0")))
    assert "program:argus_node_health" not in conf.sections()


def test_socket_rpc_and_fatal_listener(tmp_path):
    s = settings("worker", tmp_path)
    conf = parse(supervisor.render(s))
    sock = os.path.join(s.run_dir, "supervisor.sock")
    assert conf["unix_http_server"]["file"] == sock
    assert conf["supervisorctl"]["serverurl"] == f"unix://{sock}"
    assert "rpcinterface:supervisor" in conf.sections()
    assert conf["supervisord"]["nodaemon"] == "true"
    assert conf["supervisord"]["logfile"] == os.path.join(s.node_log_dir, "supervisord.log")
    listener = conf["eventlistener:argus_fatal_listener"]
    assert listener["events"] == "PROCESS_STATE_FATAL"
    assert shlex.split(listener["command"])[-1] == "fatal-listener"


def test_odd_paths_are_quoted_and_percent_escaped(tmp_path):
    odd = str(tmp_path / "run dir 'x' 100%")
    s = settings("head", tmp_path, run_dir=odd)
    python = str(tmp_path / "py env" / "bin" / "python3")
    text = supervisor.render(s, python=python)
    conf = parse(text)
    # supervisord expands %(..)s then shlex-splits command=
    command = conf["program:argus_head_watchdog"]["command"].replace("%%", "%")
    assert shlex.split(command)[0] == python
    assert conf["unix_http_server"]["file"].replace("%%", "%") == os.path.join(
        odd, "supervisor.sock")


def test_resources_json_never_rendered_into_command(tmp_path):
    text = supervisor.render(settings("worker", tmp_path))
    assert "--resources" not in text and "worker_node" not in text


def test_write_config_creates_dirs(tmp_path):
    s = settings("head", tmp_path)
    path = supervisor.write_config(s)
    assert path == os.path.join(s.run_dir, "supervisord.conf")
    assert os.path.isdir(s.node_log_dir)
    with open(path) as f:
        assert "argus_head_publisher" in f.read()


def test_template_is_package_data():
    assert os.path.isfile(supervisor.template_path())
    assert supervisor.template_path().endswith("raypool/templates/supervisord.conf.tmpl")


class FakeRPC:
    def __init__(self, fail: bool = False):
        self.started: list[tuple[str, bool]] = []
        self.fail = fail
        self.supervisor = self

    def startProcess(self, name: str, wait: bool) -> bool:  # supervisor's RPC name
        if self.fail:
            raise OSError("socket gone")
        self.started.append((name, wait))
        return True


def test_fatal_listener_restarts_the_named_program():
    payload = "processname:argus_worker_watchdog groupname:argus_worker_watchdog " \
              "from_state:BACKOFF"
    rpc, slept, log = FakeRPC(), [], io.StringIO()
    assert restart_fatal(payload, rpc, slept.append, log) == "argus_worker_watchdog"
    assert rpc.started == [("argus_worker_watchdog:argus_worker_watchdog", False)]
    assert slept and slept[0] > 0
    assert "restarted" in log.getvalue()


def test_fatal_listener_survives_rpc_errors_and_bad_payloads():
    log = io.StringIO()
    assert restart_fatal("processname:x groupname:x", FakeRPC(fail=True), lambda _: None,
                         log) == "x"
    assert "could not restart" in log.getvalue()
    assert restart_fatal("garbage", FakeRPC(), lambda _: None, log) is None
    assert parse_payload("a:1 b:2\nbody:3") == {"a": "1", "b": "2"}
