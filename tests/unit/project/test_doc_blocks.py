"""The docs' blocks follow the convention the docs tier runs them by (docs/development.md,
"Docs that run"): the parse, the marks, the session script and the loose shape of shown
output by table, and every page of README.md and docs/ parsed without a problem. The docs
tier (tests/docs) runs the blocks; this checks, without a cluster, that it can."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import docblocks
from support.docblocks import Block, Ran

ROOT = Path(__file__).resolve().parents[3]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
F = "```"


def page(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def test_a_command_block_runs_and_an_adjacent_output_block_is_its_output() -> None:
    blocks, problems = docblocks.parse(page(
        "intro", F + "bash", "argus list", F, "", F + "text", "TASK_ID  STATE", F), "p.md")
    assert problems == []
    assert [(b.line, b.lang, b.runnable) for b in blocks] == [(2, "bash", True),
                                                              (6, "text", False)]
    assert blocks[0].outputs == ("TASK_ID  STATE\n",)


def test_prose_between_detaches_an_output_unless_marked() -> None:
    text = page(F + "sh", "scripts/quickstart.sh", F, "it prints:", "{mark}",
                F, "mvp2-a-ppo-20260101-000000-abcd  SUCCEEDED", F)
    plain, _ = docblocks.parse(text.replace("{mark}\n", ""), "p.md")
    marked, problems = docblocks.parse(text.replace("{mark}", "<!-- docs: output -->"),
                                       "p.md")
    assert plain[0].outputs == ()
    assert problems == [] and len(marked[0].outputs) == 1


def test_skip_takes_a_reason_and_is_listed() -> None:
    blocks, problems = docblocks.parse(page(
        "<!-- docs: skip (needs a GPU host) -->", F + "bash", "scripts/gpu_smoke.sh", F),
        "p.md")
    assert problems == [] and blocks[0].skip == "needs a GPU host"
    assert not blocks[0].runnable


@pytest.mark.parametrize(("text", "says"), [
    (page("<!-- docs: skip () -->", F + "bash", "x", F), "needs a reason"),
    (page("<!-- docs: skip (why) -->", F + "yaml", "a: 1", F), "marks a command block"),
    (page("<!-- docs: output -->", F + "bash", "x", F), "marks an output block"),
    (page("<!-- docs: output -->", F, "out", F), "no command block above"),
    (page("<!-- docs: run it twice -->", F + "bash", "x", F), "unknown docs directive"),
    (page("<!-- docs: skip (why) -->", "", F + "bash", "x", F), "right before a fence"),
    (page(F + "bash", "x"), "never closes"),
    (page(F, "scripts/quickstart.sh head-fault", F), "reads as a command"),
    (page(F + "text", "$ argus me", F), "reads as a command"),
    (page(F, ".venv/bin/argus me", F), "reads as a command"),
    (page("run", "", "    .venv/bin/python scripts/openapi_export.py", ""), "indented block"),
])
def test_a_broken_convention_is_a_problem(text: str, says: str) -> None:
    _, problems = docblocks.parse(text, "p.md")
    assert len(problems) == 1 and says in problems[0], problems


@pytest.mark.parametrize("line", [
    "scripts/     quickstart.sh, test.sh (--latest: test_latest.sh)",  # a layout listing
    "TIME                      EVENT             DETAILS",
    "HTTP (web/app.py + api/) -> usecases.tasks.submit",
    "step:12 - actor/pg_loss:0.031",
])
def test_output_that_is_no_command_is_no_problem(line: str) -> None:
    assert docblocks.parse(page(F, line, F), "p.md")[1] == []


@pytest.mark.parametrize("text", [
    page("a synopsis:", "", "    argus [--url URL] [--json] COMMAND ...", ""),
    page("- a list item", "    argus me goes on the item's line, no blank before"),
    page(F + "bash", "    .venv/bin/argus me", F),  # indented inside a fence: the fence's
])
def test_indented_lines_that_are_no_command_block(text: str) -> None:
    assert docblocks.parse(text, "p.md")[1] == []


def test_a_console_block_runs_its_prompts_and_shows_the_rest() -> None:
    blocks, _ = docblocks.parse(page(
        F + "console", "$ argus submit a.yaml \\", "    --wait", "mvp2-x  SUCCEEDED",
        "$ argus me", "name  alice", F), "p.md")
    assert blocks[0].commands() == "argus submit a.yaml \\\n    --wait\nargus me\n"
    assert blocks[0].shown() == ("mvp2-x  SUCCEEDED\nname  alice",)


def test_fences_in_a_list_are_dedented() -> None:
    blocks, _ = docblocks.parse(page("- step:", "  " + F + "bash", "  argus me", "  " + F),
                                "p.md")
    assert blocks[0].body == "argus me\n"


@pytest.mark.parametrize(("commands", "reads"), [
    (".venv/bin/argus list --no-header | awk '{print $1}'", [".venv/bin/argus list --no-header"]),
    ("argus --json queue --user all | python3 -c 'x'", ["argus --json queue --user all"]),
    ("ID=$(argus pipeline status \"$ID\" | awk '$1 == 1')", ['argus pipeline status "$ID"']),
    ("argus webhook list --no-header | \\\n  awk 'NR == 1'", ["argus webhook list --no-header"]),
    ("argus user create alice | tail -1", []),  # creates: not run twice
    ("argus list || true", []),
    ("echo argus list | cat", []),
])
def test_piped_reads(commands: str, reads: list[str]) -> None:
    assert docblocks.piped_reads(commands) == reads


def test_the_documented_port_becomes_the_tiers() -> None:
    assert docblocks.for_port("curl http://127.0.0.1:8080/healthz localhost:8080", 18123) \
        == "curl http://127.0.0.1:18123/healthz localhost:18123"


def test_a_session_is_split_back_into_its_blocks() -> None:
    blocks = [Block("p.md", 1, "bash", "argus list | tail -1\n"),
              Block("p.md", 5, "bash", "false\n"), Block("p.md", 9, "bash", "true\n")]
    script = docblocks.session_script(blocks, "@@n", 18000)
    assert script.startswith("set -eo pipefail\n")
    assert "{ argus list ; } 2>/dev/null | sed -n 's/^argus: /@@n hint 0 argus: /p'" in script
    out = ("@@n begin 0 10.0\nTASK_ID  STATE\n@@n end 0 10.5\n@@n hint 0 argus: more\n"
           "@@n begin 1 11.0\nboom\n")
    assert docblocks.split_session(out, "@@n", 3) == [
        Ran(True, True, "TASK_ID  STATE", 0.5, ("argus: more",)),
        Ran(True, False, "boom", 0.0, ()),
        Ran(False, False, "", 0.0, ()),
    ]


@pytest.mark.parametrize(("shown", "actual", "problems"), [
    ("TASK_ID  STATE\nmvp2-alice-ppo-20261124-163055-d8f2  SUCCEEDED",
     "TASK_ID                              STATE\nmvp2-bob-sft-20270101-000000-0a1b  SUCCEEDED",
     []),
    ("TIME  EVENT  DETAILS\n...", "TIME  EVENT\nx", ["no header line 'TIME  EVENT  DETAILS'"]),
    ("mvp2-alice-pipeline-20261124-163055-d8f2  SUCCEEDED",
     "mvp2-alice-ppo-20261124-163055-d8f2  SUCCEEDED", ["no pipeline id"]),
    ("mvp2-a-ppo-20261124-163055-d8f2  RUNNING\nmvp2-a-ppo-20261124-163055-d8f2  SUCCEEDED",
     "mvp2-a-ppo-20261124-163055-d8f2  RUNNING\nmvp2-a-ppo-20261124-163055-d8f2  FAILED",
     ["final state FAILED, the docs show SUCCEEDED"]),
    ("sft SUCCEEDED, ppo PENDING_RESOURCES", "sft SUCCEEDED, ppo PENDING_RESOURCES", []),
])
def test_the_shape_of_shown_output(shown: str, actual: str, problems: list[str]) -> None:
    assert docblocks.shape_problems(shown, actual) == problems


def test_an_api_error_answer_is_seen() -> None:
    assert docblocks.api_errors('{"task_id": "x"}\n{"error": {"code": "not_found"}}') == [
        '{"error": {"code": "not_found"}}']


@pytest.mark.parametrize("doc", PAGES, ids=lambda p: p.name)
def test_every_page_follows_the_convention(doc: Path) -> None:
    _, problems = docblocks.parse(doc.read_text(), doc.relative_to(ROOT).as_posix())
    assert problems == []
