"""The docs tier's own harness, without a cluster: a page's session carries what a block
exports to the next, stops at the first failing command, and each way a block can fail is
told (a non-zero exit, an API error document, a hint line piped on, output of another
shape). A stand-in ``argus`` first on PATH plays the client."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.docblocks import Block, failure

from .conftest import QuickStart

FAKE_ARGUS = """#!/usr/bin/env bash
case "$1" in
    list) echo "TASK_ID  STATE"; echo "argus: only your tasks shown" ;;
    queue) echo "TASK_ID  STATE" ; echo "argus: only your tasks shown" >&2 ;;
    submit) echo "mvp2-alice-ppo-20261206-071606-a43e" ;;
    wait) echo "mvp2-alice-ppo-20261206-071606-a43e  FAILED" ;;
    error) echo '{"error": {"code": "not_found"}}' ;;
esac
"""


@pytest.fixture
def harness(tmp_path: Path) -> QuickStart:
    qs = QuickStart(tmp_path, 18080)
    qs.work.mkdir()
    qs.state.mkdir(parents=True)
    (qs.state / "api-token").write_text("t0ken\n")
    argus = qs.venv / "bin" / "argus"
    argus.parent.mkdir(parents=True)
    argus.write_text(FAKE_ARGUS)
    argus.chmod(0o755)
    return qs


def blocks(*bodies: str) -> list[Block]:
    return [Block("p.md", 10 * n, "bash", body + "\n") for n, body in enumerate(bodies)]


def test_a_session_carries_state_and_stops_at_the_first_failure(harness: QuickStart) -> None:
    page = blocks("export X=from-one; ID=$(argus submit f.yaml)",
                  'echo "$X $ID $ARGUS_URL $ARGUS_API_TOKEN"; false; echo not-here',
                  "echo never")
    runs, _, rc = harness.run(page, "p.md")
    assert rc == 1 and [(r.began, r.ended) for r in runs] == [(True, True), (True, False),
                                                              (False, False)]
    assert runs[1].output == ("from-one mvp2-alice-ppo-20261206-071606-a43e "
                              "http://127.0.0.1:18080 t0ken")
    assert failure(page[1], runs[1], rc, 1).startswith("exit status 1")
    assert failure(page[2], runs[2], rc, 1) == "not run: an earlier block of the page failed"


@pytest.mark.parametrize(("body", "shown", "says"), [
    ("argus list | awk '{print $1}'", (), "wrote a hint line to stdout: argus: only your"),
    ("argus queue | awk '{print $1}'", (), None),
    ("argus error", (), "the API answered an error"),
    ('argus wait "$(argus submit f.yaml)"', ("mvp2-alice-ppo-20261206-071606-a43e  SUCCEEDED",),
     "final state FAILED, the docs show SUCCEEDED"),
    ("argus queue", ("ID  STATE",), "no header line 'ID  STATE'"),
])
def test_each_way_a_block_fails_is_told(harness: QuickStart, body: str,
                                        shown: tuple[str, ...], says: str | None) -> None:
    block = Block("p.md", 1, "bash", body + "\n", outputs=shown)
    runs, _, rc = harness.run([block], "p.md")
    why = failure(block, runs[0], rc, 1)
    assert (why is None) if says is None else (says in (why or "")), why


def test_the_documented_address_is_the_tiers(harness: QuickStart) -> None:
    runs, _, _ = harness.run(blocks("echo http://127.0.0.1:8080/healthz"), "p.md")
    assert runs[0].output == "http://127.0.0.1:18080/healthz"
