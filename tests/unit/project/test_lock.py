"""The lock: installs come from uv.lock alone, and the image's slice of it cannot drift."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


lock_export = _script("lock_export")
lock_drift = _script("lock_drift")

LOCK = """
version = 1
requires-python = ">=3.11"

[[package]]
name = "jinja2"
version = "3.1.6"
dependencies = [{ name = "markupsafe" }]
sdist = { url = "u", hash = "sha256:bbb" }
wheels = [{ url = "w", hash = "sha256:aaa" }]

[[package]]
name = "markupsafe"
version = "3.0.4"
sdist = { url = "u", hash = "sha256:ccc" }

[[package]]
name = "pyyaml"
version = "6.0.4"
"""


def test_export_pins_the_closure_with_every_hash() -> None:
    text = lock_export.export(LOCK, ["Jinja2"])
    assert "jinja2==3.1.6 \\\n    --hash=sha256:aaa \\\n    --hash=sha256:bbb\n" in text
    assert "markupsafe==3.0.4 \\\n    --hash=sha256:ccc\n" in text
    assert "pyyaml" not in text


def test_export_refuses_a_package_the_lock_lacks() -> None:
    with pytest.raises(SystemExit, match="supervisor is not in the lock"):
        lock_export.export(LOCK, ["supervisor"])


def test_the_image_requirements_are_the_locks_export() -> None:
    committed = (REPO / "images/argus-ray-node/requirements.txt").read_text()
    exported = lock_export.export((REPO / "uv.lock").read_text(), ["supervisor", "jinja2"])
    assert committed == exported, "run scripts/lock.sh"
    assert re.search(r"^supervisor==[\d.]+ \\$", committed, re.M)


def test_drift_names_what_moved_and_what_the_lock_lacks() -> None:
    freeze = "Jinja2==3.1.7\nMarkupSafe==3.0.4\nsix==1.17.0\n-e file:///x\n"
    assert lock_drift.drift(LOCK, freeze) == [
        "jinja2: 3.1.6 -> 3.1.7",
        "six: not in the lock -> 1.17.0",
    ]


def test_bootstrap_installs_the_lock_and_nothing_else() -> None:
    bootstrap = (REPO / "scripts/bootstrap.sh").read_text()
    code = "\n".join(line for line in bootstrap.splitlines() if not line.lstrip().startswith("#"))
    assert "uv sync --locked" in code
    assert "lock --check" in code
    installs = re.findall(r"pip install[^\n]*", code)
    assert installs == ["pip install -q --require-hashes --no-deps -r scripts/uv-requirements.txt"]
    pins = (REPO / "scripts/uv-requirements.txt").read_text()
    assert re.search(r"^uv==[\d.]+ \\$", pins, re.M) and "--hash=sha256:" in pins


def test_ci_runs_the_readme_test_command_which_checks_the_lock() -> None:
    assert "exec scripts/test.sh" in (REPO / ".ci/run").read_text()
    test_sh = (REPO / "scripts/test.sh").read_text()
    assert test_sh.index("scripts/lock.sh --check") < test_sh.index(".venv/bin/pytest")
