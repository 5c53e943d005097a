"""The client package installs alone: a wheel of ``clients/python`` goes into a fresh
virtual environment with no package index (so it needs nothing else), importing it pulls
in no server code, Ray, aiohttp or YAML, and the ``argus`` it installs starts."""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLIENT = REPO / "clients" / "python"
UV = REPO / ".tools" / "bin" / "uv"
SERVER_SIDE = ("ray", "aiohttp", "yaml", "service", "raypool", "pydantic", "requests")
PROBE = f"""
import sys
import argus_client
import argus_client.cli.main
loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({SERVER_SIDE!r}))
assert not loaded, loaded
print(argus_client.ArgusClient.__module__)
"""


def _run(*argv: str | Path, cwd: Path, home: Path | None = None) -> str:
    """``argv`` with a bare environment (nothing of the dev venv leaks in)."""
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd,
                          timeout=300, env={"PATH": "/usr/bin:/bin", "HOME": str(home or cwd)})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with only the client's wheel installed (built by the project's uv
    from its cache, installed by the venv's own pip with no index)."""
    assert UV.exists(), "no .tools/bin/uv: run scripts/bootstrap.sh"
    root = tmp_path_factory.mktemp("client")
    dist = root / "dist"
    _run(UV, "build", "--wheel", "--offline", "--quiet", "--out-dir", dist, CLIENT, cwd=REPO,
         home=Path.home())
    wheels = list(dist.glob("argus_client-*.whl"))
    assert len(wheels) == 1, wheels
    env = root / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env)
    _run(env / "bin" / "python", "-m", "pip", "install", "--no-index", "--quiet",
         "--disable-pip-version-check", wheels[0], cwd=root)
    return env


def test_importing_the_client_loads_no_server_code(fresh: Path) -> None:
    assert _run(fresh / "bin" / "python", "-c", PROBE, cwd=fresh).strip() == \
        "argus_client.client"
    installed = _run(fresh / "bin" / "python", "-m", "pip", "list", "--format=freeze",
                     "--disable-pip-version-check", cwd=fresh)
    names = {line.split("==")[0].lower() for line in installed.split()}
    assert names - {"pip", "setuptools"} == {"argus-client"}


def test_the_installed_argus_starts(fresh: Path) -> None:
    text = _run(fresh / "bin" / "argus", "--help", cwd=fresh)
    assert "exit codes:" in text and "completion" in text
    assert "complete -o default -F _argus argus" in _run(
        fresh / "bin" / "argus", "completion", "bash", cwd=fresh)
