"""The task service as a program of the head's supervisord (raypool/apiservice.py): one
variable turns it on, the token never reaches Ray's environment, the program becomes the
service from the mounted repository."""

from __future__ import annotations

import configparser
import os
import shlex
import stat

import pytest

from raypool import apiservice, supervisor
from raypool.config import SettingsError, load_node_settings

TOKEN = "a t0ken, with \"quotes\" and %(percent)s"


def settings(tmp_path, role: str = "head", **extra: str):
    return load_node_settings({
        "ARGUS_ROLE": role, "ARGUS_NODE_IP": "10.0.0.3", "ARGUS_NODE_NAME": "n1",
        "ARGUS_SHARED_ROOT": str(tmp_path / "shared"), "ARGUS_RUN_DIR": str(tmp_path / "run"),
        **extra,
    })


def programs(conf_text: str) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser()
    parser.read_string(conf_text)
    return parser


def test_off_unless_the_head_is_given_a_config(tmp_path):
    conf = programs(supervisor.render(settings(tmp_path)))
    assert "program:argus_api" not in conf.sections()


def test_the_head_runs_the_service_when_given_a_config(tmp_path):
    s = settings(tmp_path, ARGUS_API_CONFIG="configs/dev.yaml", ARGUS_API_TOKEN=TOKEN)
    conf = programs(supervisor.render(s, python="/usr/bin/python3"))
    section = conf["program:argus_api"]
    assert shlex.split(section["command"]) == ["/usr/bin/python3", "-m", "raypool.cli",
                                               "api-service"]
    assert section["autostart"] == section["autorestart"] == "true"
    assert section["stopasgroup"] == section["killasgroup"] == "true"
    assert int(section["startretries"]) >= 3 and int(section["startsecs"]) >= 1
    assert section["stdout_logfile"] == os.path.join(s.node_log_dir, "argus-api.log")
    assert "environment" not in section, "the token is in no config"
    assert TOKEN not in supervisor.render(s)
    assert apiservice.config_path(s) == "/workspace/argus/configs/dev.yaml"


@pytest.mark.parametrize(("environ", "problem"), [
    ({}, "token in ARGUS_API_TOKEN"),
    ({"ARGUS_API_TOKEN": "  "}, "token in ARGUS_API_TOKEN"),
    ({"ARGUS_API_TOKEN_ENV": "MY_TOKEN", "ARGUS_API_TOKEN": "x"}, "token in MY_TOKEN"),
])
def test_the_node_refuses_to_start_the_service_without_its_token(tmp_path, environ, problem):
    """Checked by `argus-node run` only: the programs read the settings after the token
    left the environment (a check there would stop every program of the head)."""
    env = {"ARGUS_API_CONFIG": "configs/dev.yaml", **environ}
    s = settings(tmp_path, **env)
    assert problem in (apiservice.token_problem(s, env) or "")
    assert apiservice.token_problem(settings(tmp_path), {}) is None, "off: nothing needed"


def test_the_programs_read_their_settings_without_the_token(tmp_path):
    s = settings(tmp_path, ARGUS_API_CONFIG="configs/dev.yaml")
    assert s.api_config == "configs/dev.yaml"


@pytest.mark.parametrize(("extra", "problem"), [
    ({"ARGUS_API_TOKEN_ENV": "NOT A NAME"}, "an environment variable name"),
    ({"ARGUS_API_REPO": "relative/repo"}, "ARGUS_API_REPO='relative/repo'"),
])
def test_bad_settings_are_refused_with_the_variable_named(tmp_path, extra, problem):
    with pytest.raises(SettingsError) as err:
        settings(tmp_path, **extra)
    assert problem in str(err.value)


def test_a_worker_never_runs_the_service(tmp_path):
    with pytest.raises(SettingsError) as err:
        settings(tmp_path, role="worker", ARGUS_API_CONFIG="c.yaml",
                 ARGUS_HEAD_IP_FILE=str(tmp_path / "head.json"))
    assert "ARGUS_API_CONFIG='c.yaml': expected unset on a worker" in str(err.value)


def test_the_token_moves_from_the_environment_into_a_private_file(tmp_path):
    s = settings(tmp_path, ARGUS_API_CONFIG="/etc/argus.yaml", ARGUS_API_TOKEN=TOKEN,
                 ARGUS_API_REPO=str(tmp_path / "repo"))
    environ = {"ARGUS_API_TOKEN": TOKEN, "PATH": "/bin", "PYTHONPATH": "/opt/argus"}
    apiservice.keep_token(s, environ)
    assert "ARGUS_API_TOKEN" not in environ, "supervisord, Ray and the watchdogs never hold it"
    mode = stat.S_IMODE(os.stat(apiservice.token_path(s)).st_mode)
    assert mode == 0o600
    env = apiservice.service_env(s, environ)
    assert env["ARGUS_API_TOKEN"] == TOKEN
    assert env["PYTHONPATH"] == f"{tmp_path / 'repo'}{os.pathsep}/opt/argus"
    assert apiservice.service_argv(s, "/usr/bin/python3") == [
        "/usr/bin/python3", "-m", "service.main", "--config", "/etc/argus.yaml"]


def test_without_its_token_file_the_program_says_so(tmp_path, capsys):
    s = settings(tmp_path, ARGUS_API_CONFIG="c.yaml", ARGUS_API_TOKEN="x")
    assert apiservice.exec_service(s) == 2
    assert "no token file" in capsys.readouterr().err


def test_the_api_role_runs_the_service_and_nothing_else(tmp_path):
    """A second service instance (docker-compose.ha.yaml's argus-api-b): no Ray, no
    watchdog, no node-health program publishing a health file the service would count as a
    node; the fatal listener still restarts the service forever."""
    s = settings(tmp_path, role="api", ARGUS_API_CONFIG="configs/dev.yaml")
    assert supervisor.programs(s) == ("argus_api",)
    conf = programs(supervisor.render(s, python="/usr/bin/python3"))
    assert [c for c in conf.sections() if c.startswith("program:")] == ["program:argus_api"]
    assert "eventlistener:argus_fatal_listener" in conf.sections()


def test_the_api_role_needs_the_services_config(tmp_path):
    with pytest.raises(SettingsError) as err:
        settings(tmp_path, role="api")
    assert "ARGUS_API_CONFIG='': expected the service's config with ARGUS_ROLE=api" \
        in str(err.value)


def test_the_store_url_and_pgpassword_leave_the_environment_too(tmp_path):
    """The store's URL carries the database's password: Ray and the watchdogs never hold it;
    the service gets it back from a 0600 file."""
    url = "postgresql://argus:s3cret@postgres:5432/argus"
    s = settings(tmp_path, ARGUS_API_CONFIG="c.yaml", ARGUS_API_TOKEN=TOKEN)
    environ = {"ARGUS_API_TOKEN": TOKEN, "ARGUS_STORE_URL": url, "PGPASSWORD": "pw",
               "PATH": "/bin"}
    apiservice.keep_token(s, environ)
    apiservice.keep_store_secrets(s, environ)
    assert environ == {"PATH": "/bin"}
    assert stat.S_IMODE(os.stat(apiservice.secrets_path(s)).st_mode) == 0o600
    env = apiservice.service_env(s, environ)
    assert env["ARGUS_STORE_URL"] == url and env["PGPASSWORD"] == "pw"


def test_a_node_without_the_service_drops_the_store_secrets(tmp_path):
    s = settings(tmp_path)
    environ = {"ARGUS_STORE_URL": "postgresql://a:b@c/d", "PGPASSWORD": "", "PATH": "/bin"}
    apiservice.keep_store_secrets(s, environ)
    assert environ == {"PATH": "/bin"}
    assert not os.path.exists(apiservice.secrets_path(s)), "nothing kept where nothing runs"


def test_an_empty_store_url_is_not_passed_on(tmp_path):
    """compose's ``${ARGUS_STORE_URL:-}`` is an empty value: the config's store stays."""
    s = settings(tmp_path, ARGUS_API_CONFIG="c.yaml", ARGUS_API_TOKEN=TOKEN)
    environ = {"ARGUS_API_TOKEN": TOKEN, "ARGUS_STORE_URL": " "}
    apiservice.keep_token(s, environ)
    apiservice.keep_store_secrets(s, environ)
    assert "ARGUS_STORE_URL" not in apiservice.service_env(s, environ)


class _Supervisord:
    """The part of supervisord's XML-RPC that ``argus-node status`` asks."""

    def __init__(self, states: dict[str, str]):
        self.supervisor = self
        self._states = states

    def getAllProcessInfo(self) -> list[dict]:  # supervisord's name
        return [{"name": n, "statename": s} for n, s in self._states.items()]


@pytest.mark.parametrize(("state", "ok"), [("RUNNING", True), ("STARTING", False),
                                           ("BACKOFF", False)])
def test_an_api_container_is_healthy_while_its_program_runs(tmp_path, monkeypatch, state, ok):
    """No Ray and no head record to judge there: Docker's probe asks about the service."""
    from raypool import cli

    s = settings(tmp_path, role="api", ARGUS_API_CONFIG="configs/dev.yaml")
    monkeypatch.setattr(cli, "supervisor_rpc", lambda _: _Supervisord({"argus_api": state}))
    status = cli.node_status(s)
    assert status["ok"] is ok, status
    assert status["ray"] == "not run (api)" and not status["head_record"]["fresh"]
