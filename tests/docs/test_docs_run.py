"""Docs tier: README.md, then docs/*.md in name order, each page's command blocks run in
order in one bash session on the quick start (``set -eo pipefail``: every command must
exit 0), as docs/development.md's "Docs that run" describes. A block passes when it
exits 0, prints no API error document, pipes no hint line (``argus: ...``) into the next
command, and its output has the shape of any output the page shows for it. The quick start
itself is the README's first block: its output is checked against the README's samples.
The summary at the end counts runnable, skipped (with their reasons) and failing blocks.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support import docblocks
from support.docblocks import Block

from .conftest import SESSION_TIMEOUT_S, QuickStart, Tally

pytestmark = pytest.mark.timeout(900)

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def quickstart_block(blocks: list[Block]) -> Block | None:
    return next((b for b in blocks if b.is_command
                 and b.commands().lstrip().startswith("scripts/quickstart.sh")), None)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_page_runs_as_documented(page: Path, quickstart: QuickStart, tally: Tally
                                     ) -> None:
    name = page.relative_to(ROOT).as_posix()
    blocks, problems = docblocks.parse(page.read_text(), name)
    failing = [(p.split(": ", 1)[0], p.split(": ", 1)[-1]) for p in problems]
    tally.pages += 1
    tally.skipped.extend(b for b in blocks if b.is_command and b.skip is not None)
    setup = quickstart_block(blocks)
    for shown in setup.shown() if setup is not None else ():
        found = docblocks.shape_problems(shown, quickstart.up_output)
        if found:
            failing.append((setup.where, "the quick start's output is not shaped as the "
                            f"page shows: {'; '.join(found)}"))
    runnable = [b for b in blocks if b.runnable]
    tally.runnable += len(runnable)
    if runnable:
        runs, out, rc = quickstart.run(runnable, name)
        print(out)  # the page's whole session: shown with a failure (or -rP)
        for block, ran in zip(runnable, runs, strict=True):
            why = docblocks.failure(block, ran, rc, SESSION_TIMEOUT_S)
            if why is None:
                tally.passed.append((block, ran.seconds))
            else:
                failing.append((block.where, why))
    tally.failing.extend(failing)
    assert not failing, "\n\n".join(f"{where}: {why}" for where, why in failing)
