"""The docs stay a way in: the README gets a newcomer to their first own task early, every
section the README once held lives on in ``docs/``, every relative link resolves, and the
README's first JobSpec is one the service accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from service.config import Settings
from service.jobspec.spec import parse_jobspec

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))

# Where each section of the README before it became the way in (issue 23) lives now.
MOVED = {
    "Two commands on a fresh clone": "README.md",
    "Dependencies: the lock": "docs/development.md",
    "Real verl on a GPU host": "docs/real-verl.md",
    "Submitting work": "docs/cli.md",
    "Task life": "docs/scheduling.md",
    "Scheduling policy": "docs/scheduling.md",
    "Users": "docs/users.md",
    "HTTP API (`/api/v2`)": "docs/api.md",
    "Web console (`/ui/`)": "docs/console.md",
    "Prometheus and Grafana": "docs/operations.md",
    "Progress and training curves": "docs/progress.md",
    "Limits and hostile input": "docs/security.md",
    "The HTTP server (`service/web/http_server.py`, `v2.api`)": "docs/security.md",
    "One user cannot take the service from everyone": "docs/security.md",
    "Storage faults and durability": "docs/operations.md",
    "Running the service": "docs/operations.md",
    "Configuration (`configs/dev.yaml`)": "docs/operations.md",
    "Node runtime": "docs/node-runtime.md",
    "Containers on a CPU host: one command": "docs/node-runtime.md",
    "Benchmarks": "docs/benchmarks.md",
    "Layout": "docs/development.md",
}
LINK = re.compile(r"\]\(([^)\s]+)\)")


def headings(text: str) -> list[str]:
    out, fence = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            out.append(line.lstrip("#").strip())
    return out


def anchor(title: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


@pytest.mark.parametrize(("title", "page"), sorted(MOVED.items()))
def test_every_former_readme_section_lives_on(title: str, page: str) -> None:
    assert any(h.startswith(title) for h in headings((ROOT / page).read_text())), (title, page)


@pytest.mark.parametrize("doc", [README, *PAGES], ids=lambda p: p.name)
def test_every_relative_link_resolves(doc: Path) -> None:
    text = doc.read_text()
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, frag = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        assert file.exists(), f"{doc.name}: {target}"
        if frag and file.suffix == ".md":
            assert frag in {anchor(h) for h in headings(file.read_text())}, f"{doc.name}: {target}"


def test_the_readme_is_a_way_in() -> None:
    lines = README.read_text().splitlines()
    assert "scripts/quickstart.sh" in "\n".join(lines[:40])
    assert any(line.startswith("scripts/test.sh ") for line in lines)
    assert "exec scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    first = lines.index("## Your first own task")
    submit = next(i for i, line in enumerate(lines) if "argus submit my-first.yaml" in line)
    assert first < submit < 150
    assert 120 < len(lines) < 600
    linked = set(LINK.findall("\n".join(lines)))
    assert {f"docs/{p.name}" for p in PAGES} <= linked | {"docs/architecture.md"}


def test_the_readme_first_jobspec_is_accepted(tmp_path: Path) -> None:
    text = README.read_text()
    spec = text.split("cat > my-first.yaml <<EOF\n", 1)[1].split("\nEOF\n", 1)[0]
    shared = tmp_path / "shared"
    settings = Settings(shared_root=str(shared))
    parsed = parse_jobspec(spec.replace("$SHARED", str(shared)), settings, "alice")
    assert parsed.to_dict()["n_gpus_per_node"] == 2
