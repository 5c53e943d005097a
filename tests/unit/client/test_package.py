"""The client package builds and installs with no package index. Its build backend is
the standard library (``clients/python/_build/backend.py``): the wheel it builds, and the
source directory itself (``pip install --no-index ./clients/python``: no setuptools to
fetch), install into a fresh venv, and the ``argus`` they install starts.

The venv test costs one venv with pip (~4 s on the dev machine) and needs no network:
it stays in the unit tier, under its own timeout. The archive tests are pure and fast."""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.util
import io
import subprocess
import tarfile
import venv
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

CLIENT = Path(__file__).resolve().parents[3] / "clients" / "python"


def backend() -> ModuleType:
    spec = importlib.util.spec_from_file_location("argus_client_build_backend",
                                                  CLIENT / "_build" / "backend.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*argv: str | Path, cwd: Path) -> str:
    """``argv`` with a bare environment (nothing of the dev venv leaks in)."""
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, cwd=cwd,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": str(cwd)})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_wheel_holds_the_package_and_a_valid_record(tmp_path: Path) -> None:
    name = backend().build_wheel(str(tmp_path))
    assert name == "argus_client-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(tmp_path / name) as wheel:
        names = wheel.namelist()
        files = {n: wheel.read(n) for n in names}
    sources = sorted(p.relative_to(CLIENT).as_posix()
                     for p in (CLIENT / "argus_client").rglob("*.py"))
    assert [n for n in names if n.startswith("argus_client/")] == sources
    info = "argus_client-0.1.0.dist-info"
    rows = list(csv.reader(io.StringIO(files[f"{info}/RECORD"].decode())))
    assert sorted(r[0] for r in rows) == sorted(names)
    for path, digest, size in rows:
        if path == f"{info}/RECORD":
            assert (digest, size) == ("", "")
            continue
        data = files[path]
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        assert (digest, int(size)) == (f"sha256={expected.decode()}", len(data)), path
    meta = files[f"{info}/METADATA"].decode()
    assert "Name: argus-client\n" in meta and "Requires-Python: >=3.11\n" in meta
    assert "Requires-Dist" not in meta  # the standard library only
    assert files[f"{info}/entry_points.txt"] == \
        b"[console_scripts]\nargus = argus_client.cli.main:main\n"
    again = tmp_path / "again"
    again.mkdir()
    backend().build_wheel(str(again))
    assert (again / name).read_bytes() == (tmp_path / name).read_bytes()  # reproducible


def test_the_editable_wheel_and_the_sdist(tmp_path: Path) -> None:
    name = backend().build_editable(str(tmp_path))
    with zipfile.ZipFile(tmp_path / name) as wheel:
        assert wheel.read("_argus_client_editable.pth").decode() == f"{CLIENT}\n"
    sdist = backend().build_sdist(str(tmp_path))
    with tarfile.open(tmp_path / sdist) as tar:
        names = tar.getnames()
    assert sdist == "argus_client-0.1.0.tar.gz"
    for member in ("pyproject.toml", "_build/backend.py", "README.md", "PKG-INFO",
                   "argus_client/client.py"):
        assert f"argus_client-0.1.0/{member}" in names


@pytest.mark.timeout(180)
def test_wheel_and_source_install_with_no_index_into_a_fresh_venv(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    wheel = dist / backend().build_wheel(str(dist))
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env)
    pip = (env / "bin" / "python", "-m", "pip", "--disable-pip-version-check")
    _run(*pip, "install", "--no-index", "--quiet", wheel, cwd=tmp_path)
    assert _run(env / "bin" / "argus", "--version", cwd=tmp_path) == "argus 0.1.0\n"
    # the source directory, built by pip through the in-tree backend: nothing to fetch
    _run(*pip, "install", "--no-index", "--quiet", "--force-reinstall", CLIENT, cwd=tmp_path)
    assert "exit codes:" in _run(env / "bin" / "argus", "--help", cwd=tmp_path)
    installed = _run(*pip, "list", "--format=freeze", cwd=tmp_path)
    assert {line.split("==")[0].lower() for line in installed.split()} - {"pip", "setuptools"} \
        == {"argus-client"}
