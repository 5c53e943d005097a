"""The build backend of argus-client (PEP 517, with PEP 660 editable installs), in the
standard library only: ``pip install ./clients/python`` needs no package index (no
setuptools to fetch), and a wheel can be built where nothing can be downloaded.

    python3 clients/python/_build/backend.py dist/       # -> dist/argus_client-<v>-py3-none-any.whl
    python3 -m pip install --no-index dist/argus_client-*.whl

What goes in the wheel: every file of ``argus_client/`` (no ``__pycache__``), and the
``.dist-info`` written from ``pyproject.toml``'s ``[project]`` table (name, version,
description, readme, requires-python, dependencies, scripts). Archives are reproducible:
fixed timestamps and modes, files in sorted order.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import re
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]  # clients/python
PACKAGE = "argus_client"
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry holds
WHEEL = "Wheel-Version: 1.0\nGenerator: argus-client _build/backend.py\n" \
        "Root-Is-Purelib: true\nTag: py3-none-any\n"


def _project() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _stem(project: dict[str, Any]) -> str:
    """``argus_client-0.1.0``: the name as wheel and sdist file names spell it."""
    return f"{re.sub(r'[-_.]+', '_', project['name']).lower()}-{project['version']}"


def metadata(project: dict[str, Any]) -> str:
    """The core metadata (``METADATA``, an sdist's ``PKG-INFO``)."""
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}",
             f"Version: {project['version']}", f"Summary: {project.get('description', '')}"]
    if "requires-python" in project:
        lines.append(f"Requires-Python: {project['requires-python']}")
    lines += [f"Requires-Dist: {dep}" for dep in project.get("dependencies", [])]
    readme = project.get("readme")
    if not readme:
        return "\n".join(lines) + "\n"
    lines.append("Description-Content-Type: text/markdown")
    return "\n".join(lines) + "\n\n" + (ROOT / readme).read_text(encoding="utf-8")


def _package_files() -> list[Path]:
    return sorted(p for p in (ROOT / PACKAGE).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _write_wheel(directory: str, files: Iterable[tuple[str, bytes]]) -> str:
    """A wheel of ``files`` (archive name, bytes) and the project's ``.dist-info``."""
    project = _project()
    stem = _stem(project)
    info = f"{stem}.dist-info"
    scripts = project.get("scripts", {})
    entries = [*files,
               (f"{info}/METADATA", metadata(project).encode()),
               (f"{info}/WHEEL", WHEEL.encode()),
               (f"{info}/entry_points.txt", ("[console_scripts]\n" + "".join(
                   f"{name} = {target}\n" for name, target in scripts.items())).encode())]
    entries.append((f"{info}/RECORD", "".join(
        _record_line(name, data) + "\n" for name, data in entries).encode()
        + f"{info}/RECORD,,\n".encode()))
    filename = f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(Path(directory) / filename, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in entries:
            member = zipfile.ZipInfo(name, ZIP_EPOCH)
            member.external_attr = 0o644 << 16
            member.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(member, data)
    return filename


def _sources() -> Iterator[tuple[str, bytes]]:
    for path in _package_files():
        yield path.relative_to(ROOT).as_posix(), path.read_bytes()


# -- the PEP 517 / PEP 660 hooks ---------------------------------------------------------------


def get_requires_for_build_wheel(config_settings: Any = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: Any = None) -> list[str]:
    return []


def get_requires_for_build_editable(config_settings: Any = None) -> list[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Any = None,
                metadata_directory: str | None = None) -> str:
    return _write_wheel(wheel_directory, _sources())


def build_editable(wheel_directory: str, config_settings: Any = None,
                   metadata_directory: str | None = None) -> str:
    """A wheel whose ``.pth`` puts this checkout's ``clients/python`` on ``sys.path``."""
    return _write_wheel(wheel_directory, [(f"_{PACKAGE}_editable.pth", f"{ROOT}\n".encode())])


def build_sdist(sdist_directory: str, config_settings: Any = None) -> str:
    project = _project()
    stem = _stem(project)
    files = ["pyproject.toml", "_build/backend.py", *([project["readme"]]
                                                     if project.get("readme") else [])]
    members = [(name, (ROOT / name).read_bytes()) for name in files]
    members += list(_sources()) + [("PKG-INFO", metadata(project).encode())]
    filename = f"{stem}.tar.gz"
    with gzip.GzipFile(Path(sdist_directory) / filename, "wb", mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in sorted(members):
            member = tarfile.TarInfo(f"{stem}/{name}")
            member.size, member.mode, member.mtime = len(data), 0o644, 0
            tar.addfile(member, io.BytesIO(data))
    return filename


if __name__ == "__main__":  # python3 clients/python/_build/backend.py [OUT_DIR]
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "dist")
    out.mkdir(parents=True, exist_ok=True)
    print(out / build_wheel(str(out)))
