"""The docs tier's quick start and its tally.

``scripts/quickstart.sh`` brings up a local Argus on real Ray (its own state dir and port,
so it never meets another run) and ``scripts/quickstart.sh down`` stops it at the end,
always. The pages' blocks run in a scratch checkout beside it: a folder holding a link to
every top-level entry of the repository but ``.git`` and ``.argus``, so the docs' relative
paths (``.venv/bin/argus``, ``scripts/...``, ``examples/...``) are the repository's, what
a block writes (``my-first.yaml``, ``dist/``) stays in the scratch folder, and the quick
start's state dir is the scratch checkout's ``.argus/quickstart``, the path the docs name.
A fresh virtualenv comes first on ``PATH``: it is the reader's own Python, where
``pip install`` puts the client package (docs/client.md), never the repository's ``.venv``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support import docblocks
from support.docblocks import Block, Ran

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scripts" / "quickstart.sh"
UP_TIMEOUT_S = 480
DOWN_TIMEOUT_S = 180
SESSION_TIMEOUT_S = 480


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class QuickStart:
    """A running quick start and the scratch checkout the pages' blocks run in."""

    base: Path
    port: int
    up_output: str = ""

    @property
    def work(self) -> Path:
        return self.base / "checkout"

    @property
    def state(self) -> Path:
        return self.work / ".argus" / "quickstart"

    @property
    def venv(self) -> Path:
        return self.base / "venv"

    def script_env(self) -> dict[str, str]:
        """What ``scripts/quickstart.sh`` up and down run with: no ARGUS_* of the caller."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("ARGUS_")}
        env.update(ARGUS_QUICKSTART_DIR=str(self.state), ARGUS_API_PORT=str(self.port))
        return env

    def session_env(self) -> dict[str, str]:
        """A reader's shell once the quick start is up: its ARGUS_URL and the admin's
        token exported as it prints them, ``argus`` on PATH (their virtualenv, then the
        checkout's ``.venv/bin``)."""
        env = self.script_env()
        env.pop("VIRTUAL_ENV", None)
        env.update(
            PATH=os.pathsep.join([str(self.venv / "bin"), str(self.work / ".venv" / "bin"),
                                  env.get("PATH", os.defpath)]),
            ARGUS_URL=f"http://127.0.0.1:{self.port}",
            ARGUS_API_TOKEN=(self.state / "api-token").read_text().strip(),
        )
        return env

    def run(self, blocks: list[Block], name: str) -> tuple[list[Ran], str, int | None]:
        """One page's runnable blocks in one bash session: what each did, the whole
        output, and the session's exit status (None: killed at the deadline)."""
        nonce = f"@@docs-{secrets.token_hex(4)}"
        script = self.base / f"{name.replace('/', '_')}.sh"
        script.write_text(docblocks.session_script(blocks, nonce, self.port))
        proc = subprocess.Popen(["bash", str(script)], cwd=self.work, env=self.session_env(),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=SESSION_TIMEOUT_S)
            rc: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            rc = None
        return docblocks.split_session(out, nonce, len(blocks)), out, rc


def _scratch_checkout(work: Path) -> None:
    work.mkdir(parents=True)
    for entry in ROOT.iterdir():
        if entry.name not in (".git", ".argus"):
            (work / entry.name).symlink_to(entry)


@pytest.fixture(scope="module")
def quickstart() -> Iterator[QuickStart]:
    """Module scope: the cluster is gone before the next tier's tests start."""
    qs = QuickStart(Path(tempfile.mkdtemp(prefix="ardocs-")), free_port())
    try:
        _scratch_checkout(qs.work)
        subprocess.run([sys.executable, "-m", "venv", str(qs.venv)], check=True,
                       stdout=subprocess.DEVNULL, timeout=120)
        up = subprocess.run([str(QUICKSTART)], cwd=ROOT, env=qs.script_env(),
                            capture_output=True, text=True, timeout=UP_TIMEOUT_S)
        qs.up_output = up.stdout + up.stderr
        assert up.returncode == 0, qs.up_output[-6000:]
        yield qs
    finally:
        down = subprocess.run([str(QUICKSTART), "down"], cwd=ROOT, env=qs.script_env(),
                              capture_output=True, text=True, timeout=DOWN_TIMEOUT_S)
        shutil.rmtree(qs.base, ignore_errors=True)
    assert down.returncode == 0, down.stdout + down.stderr


@dataclass
class Tally:
    """Every page's blocks as the tier saw them, for the summary."""

    skipped: list[Block] = field(default_factory=list)
    passed: list[tuple[Block, float]] = field(default_factory=list)
    failing: list[tuple[str, str]] = field(default_factory=list)  # (where, why)
    runnable: int = 0
    pages: int = 0


TALLY = pytest.StashKey[Tally]()


@pytest.fixture(scope="session")
def tally(request: pytest.FixtureRequest) -> Tally:
    return request.config.stash.setdefault(TALLY, Tally())


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    seen = config.stash.get(TALLY, None)
    if seen is None or not seen.pages:
        return
    write = terminalreporter.write_line
    terminalreporter.section("docs tier")
    write(f"{seen.pages} pages: {seen.runnable} runnable blocks, {len(seen.skipped)} skipped "
          f"with a reason, {len(seen.failing)} failing")
    for block in seen.skipped:
        write(f"  skipped  {block.where}: {block.skip}")
    for block, seconds in seen.passed:
        write(f"  ran      {block.where}: {seconds:.1f} s")
    for where, why in seen.failing:
        write(f"  FAILING  {where}: {why}")
