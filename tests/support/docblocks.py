"""The fenced blocks of the docs (README.md, docs/*.md) and what the docs tier does with
them (docs/development.md, "Docs that run"). Pure: the parse, the convention's checks, the
script of a page's session and the loose shape of shown output.

The convention lives in the Markdown itself:

* a fence in ``bash``, ``sh`` or ``console`` is commands, and the docs tier runs it (a
  ``console`` block's commands are its ``$ `` lines, the other lines their output);
* ``<!-- docs: skip (REASON) -->`` on the line right before such a fence: not run, listed
  with its reason (a GPU host, Docker, a destructive operator command, ...);
* a fence in ``text`` or with no language, or an indented block, is output (or a diagram):
  never run, and no line of it may read as a command; a fence shows the output of the
  command block right before it (only blank lines between), or of the last command block
  above it when the line right before it is ``<!-- docs: output -->``;
* any other language (``python``, ``yaml``, ``json``, ...) is code or a document: never run.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from service.domain.states import PipelineState, TaskState

COMMAND_LANGS = frozenset({"bash", "sh", "console"})
OUTPUT_LANGS = frozenset({"", "text"})

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[^\s`]*)")
_DIRECTIVE = re.compile(r"^\s*<!--\s*docs:\s*(?P<body>.*?)\s*-->\s*$")
_SKIP = re.compile(r"skip\s*\((?P<reason>.*)\)")
# A line of an output fence that a reader would type: a prompt, a program of this project
# or a tool the docs' commands use, as its first word.
_COMMAND_LINE = re.compile(
    r"^\s*(?:\$\s+\S|(?:sudo|export|curl|docker|pip3?|python3?|argus|argus-node|argus-api"
    r"|supervisorctl|ray|uv|git)\s+[-\w.$/\"']|\.venv/bin/\S|scripts/[\w.-]+\.sh\b)")
PORT = "8080"
_HOSTS = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it opens, its language, its body (dedented), a skip's
    reason, and the output blocks that show what it prints."""

    doc: str
    line: int
    lang: str
    body: str
    skip: str | None = None
    outputs: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def is_command(self) -> bool:
        return self.lang in COMMAND_LANGS

    @property
    def runnable(self) -> bool:
        return self.is_command and self.skip is None

    def commands(self) -> str:
        """What a reader types: the body, or a ``console`` block's ``$ `` lines (with
        their ``\\`` continuations)."""
        if self.lang != "console":
            return self.body
        out: list[str] = []
        going = False
        for line in self.body.splitlines():
            if line.startswith("$ ") or going:
                text = line[2:] if line.startswith("$ ") and not going else line
                out.append(text)
                going = text.endswith("\\")
        return "\n".join(out) + "\n"

    def shown(self) -> tuple[str, ...]:
        """Every output the docs show for it: the output blocks, and a ``console``
        block's own output lines."""
        if self.lang != "console":
            return self.outputs
        inline, going = [], False
        for line in self.body.splitlines():
            if line.startswith("$ ") or going:
                going = line.endswith("\\")
            else:
                inline.append(line)
        own = "\n".join(inline).strip()
        return (*self.outputs, own) if own else self.outputs


@dataclass
class _Draft:
    doc: str
    line: int
    lang: str
    body: str
    skip: str | None
    outputs: list[str] = field(default_factory=list)

    def freeze(self) -> Block:
        return Block(self.doc, self.line, self.lang, self.body, self.skip,
                     tuple(self.outputs))


def parse(text: str, doc: str) -> tuple[list[Block], list[str]]:
    """The fenced blocks of one page, and every way it breaks the convention (each a
    ``doc:line: what`` string)."""
    lines = text.splitlines()
    drafts: list[_Draft] = []
    problems: list[str] = []
    directive: tuple[int, str] | None = None  # (line, body) of the line right before
    last_end = -1  # index of the closing fence of the last block
    fenced: set[int] = set()  # indexes of the lines of fences, their own lines included
    i = 0
    while i < len(lines):
        found = _FENCE.match(lines[i])
        if found is None:
            said = _DIRECTIVE.match(lines[i])
            if directive is not None:
                problems.append(f"{doc}:{directive[0]}: a docs directive belongs on the "
                                "line right before a fence")
            directive = (i + 1, said.group("body")) if said else None
            i += 1
            continue
        indent, fence = len(found.group("indent")), found.group("fence")
        lang = found.group("lang").lower()
        close = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        end = i + 1
        while end < len(lines) and not close.match(lines[end]):
            end += 1
        if end == len(lines):
            problems.append(f"{doc}:{i + 1}: a fence that never closes")
        body = "".join(f"{_dedent(x, indent)}\n" for x in lines[i + 1:end])
        draft = _Draft(doc, i + 1, lang, body, None)
        fenced.update(range(i, end + 1))
        between = lines[last_end + 1:i]
        after_command = (bool(drafts) and drafts[-1].lang in COMMAND_LANGS
                         and not any(x.strip() for x in between))
        _place(draft, directive, drafts, after_command, problems)
        drafts.append(draft)
        directive, last_end, i = None, end, end + 1
    if directive is not None:
        problems.append(f"{doc}:{directive[0]}: a docs directive belongs on the line "
                        "right before a fence")
    blocks = [d.freeze() for d in drafts]
    problems.extend(_indented_commands(lines, fenced, doc))
    for b in blocks:
        if b.lang in OUTPUT_LANGS:
            problems.extend(f"{b.doc}:{b.line + 1 + n}: reads as a command in an output "
                            f"fence (mark the fence bash, sh or console): {line.strip()}"
                            for n, line in enumerate(b.body.splitlines())
                            if _COMMAND_LINE.match(line))
    return blocks, problems


def _indented_commands(lines: list[str], fenced: set[int], doc: str) -> list[str]:
    """Lines of indented code blocks (four spaces, after a blank line) that read as
    commands: never run, so they belong in a fence."""
    out, code, blank = [], False, True
    for n, line in enumerate(lines):
        if n in fenced:
            code, blank = False, False
            continue
        if line.startswith("    ") and (blank or code):
            code = True
            if _COMMAND_LINE.match(line[4:]):
                out.append(f"{doc}:{n + 1}: reads as a command in an indented block (put it "
                           f"in a bash, sh or console fence): {line.strip()}")
        elif line.strip():
            code = False
        blank = not line.strip()
    return out


def _dedent(line: str, indent: int) -> str:
    return line[indent:] if not line[:indent].strip() else line.lstrip()


def _place(draft: _Draft, directive: tuple[int, str] | None, drafts: list[_Draft],
           after_command: bool, problems: list[str]) -> None:
    """Apply the directive before a fence (if any) and attach an output block."""
    where = f"{draft.doc}:{draft.line}"
    body = None if directive is None else directive[1]
    skip = None if body is None else _SKIP.fullmatch(body)
    if body is not None and skip is None and body != "output":
        problems.append(f"{where}: unknown docs directive {body!r} (skip (REASON) or "
                        "output)")
    if skip is not None:
        reason = skip.group("reason").strip()
        if draft.lang not in COMMAND_LANGS:
            problems.append(f"{where}: docs: skip marks a command block (bash, sh, "
                            f"console), not {draft.lang or 'an output block'}")
        elif not reason:
            problems.append(f"{where}: docs: skip needs a reason in its parentheses")
        draft.skip = reason or "?"
    if draft.lang not in OUTPUT_LANGS:
        if body == "output":
            problems.append(f"{where}: docs: output marks an output block (text or no "
                            "language)")
        return
    commands = [d for d in drafts if d.lang in COMMAND_LANGS]
    if body == "output":
        if not commands:
            problems.append(f"{where}: docs: output with no command block above it")
            return
        commands[-1].outputs.append(draft.body)
    elif after_command:
        drafts[-1].outputs.append(draft.body)


# -- the session a page's blocks run in -------------------------------------------------------


def for_port(commands: str, port: int) -> str:
    """The commands with the quick start's documented address moved to the tier's port."""
    for host in _HOSTS:
        commands = commands.replace(f"{host}:{PORT}", f"{host}:{port}")
    return commands


_READ_ONLY = frozenset({"list", "queue", "status", "events", "attempts", "logs", "usage",
                        "me", "metrics", "pipeline list", "pipeline status", "webhook list",
                        "webhook deliveries", "token list", "user list", "user show"})
_VALUED = frozenset({"--url", "--token-env", "--http-timeout"})
# an argus command where a command starts (a line, after ; & | or "(", "$("), then one "|"
_PIPED = re.compile(r"(?:^|(?<=[;&|(]))\s*((?:\.venv/bin/)?argus\s[^|;&()#\n]*?)\s*\|(?!\|)",
                    re.MULTILINE)


def _subcommand(words: list[str]) -> str:
    names: list[str] = []
    skip = False
    for word in words[1:]:
        if skip:
            skip = False
        elif word.startswith("-"):
            skip = word in _VALUED
        else:
            names.append(word)
    return " ".join(names[:2]) if names[:1] in (["pipeline"], ["webhook"], ["token"],
                                                ["user"]) else " ".join(names[:1])


def piped_reads(commands: str) -> list[str]:
    """Every read-only ``argus ...`` on the left of a pipe: the tier runs each again alone
    to check that no hint line (``argus: ...``) reaches what it is piped into."""
    joined = re.sub(r"\\\n", " ", commands)
    out = []
    for left in _PIPED.findall(joined):
        try:
            words = shlex.split(left)
        except ValueError:
            continue
        if _subcommand(words) in _READ_ONLY:
            out.append(left.strip())
    return out


def session_script(blocks: list[Block], nonce: str, port: int) -> str:
    """One bash script for one page's runnable blocks, in order, in one shell (what one
    block exports or assigns, the next sees): ``set -eo pipefail``, so the first command
    that fails ends it; a marker line before and after each block (with the time), and
    after it every piped read again, its stdout's ``argus:`` lines marked as hints."""
    parts = ["set -eo pipefail"]
    for n, block in enumerate(blocks):
        parts.append(f"printf '\\n%s begin {n} %s\\n' {nonce} \"$EPOCHREALTIME\"")
        parts.append(for_port(block.commands(), port).rstrip("\n"))
        parts.append(f"printf '\\n%s end {n} %s\\n' {nonce} \"$EPOCHREALTIME\"")
        for left in piped_reads(block.commands()):
            parts.append(f"{{ {for_port(left, port)} ; }} 2>/dev/null | "
                         f"sed -n 's/^argus: /{nonce} hint {n} argus: /p' || true")
    return "\n".join(parts) + "\n"


@dataclass(frozen=True)
class Ran:
    """What one block of a session did: whether it began and ended (exit 0 of every
    command), its output (stdout and stderr as they interleave), the seconds it took and
    the hint lines its piped reads wrote to stdout."""

    began: bool
    ended: bool
    output: str
    seconds: float
    hints: tuple[str, ...]


def split_session(output: str, nonce: str, count: int) -> list[Ran]:
    lines = output.splitlines()
    begins: dict[int, tuple[int, float]] = {}
    ends: dict[int, tuple[int, float]] = {}
    hints: dict[int, list[str]] = {}
    for at, line in enumerate(lines):
        parts = line.split(" ", 3)
        if parts[0] != nonce or len(parts) < 3 or not parts[2].isdigit():
            continue
        n = int(parts[2])
        if parts[1] in ("begin", "end") and len(parts) == 4:
            (begins if parts[1] == "begin" else ends)[n] = (at, float(parts[3]))
        elif parts[1] == "hint":
            hints.setdefault(n, []).append(parts[3] if len(parts) == 4 else "")
    runs = []
    for n in range(count):
        if n not in begins:
            runs.append(Ran(False, False, "", 0.0, ()))
            continue
        start, t0 = begins[n]
        stop, t1 = ends.get(n, (len(lines), t0))
        text = "\n".join(x for x in lines[start + 1:stop] if not x.startswith(nonce + " "))
        runs.append(Ran(True, n in ends, text.strip("\n"), t1 - t0, tuple(hints.get(n, []))))
    return runs


# -- the loose shape of shown output ----------------------------------------------------------

STATES = tuple(dict.fromkeys(str(s) for s in [*TaskState, *PipelineState]))
_STATE = re.compile(r"(?<![\w-])(" + "|".join(STATES) + r")(?![\w-])")
_ID = re.compile(r"(?<![\w-])[a-z0-9]{1,32}-(?:[a-z0-9_-]+-)?(?P<kind>[a-z0-9]{1,32})"
                 r"-[0-9]{8}-[0-9]{6}-[0-9a-f]{4}(?![0-9a-f])")
_COLUMN = re.compile(r"[A-Z][A-Z0-9_]*(?: [A-Z][A-Z0-9_]*)*")
_API_ERROR = re.compile(r'\{\s*"error"\s*:\s*\{')


def _columns(line: str) -> tuple[str, ...]:
    return tuple(re.split(r"\s{2,}", line.strip()))


def headers(text: str) -> list[tuple[str, ...]]:
    """The table headers of an output: lines of two or more upper-case column names
    (two spaces apart), no state among them."""
    out = []
    for line in text.splitlines():
        cols = _columns(line)
        if (len(cols) >= 2 and all(_COLUMN.fullmatch(c) for c in cols)
                and not any(c in STATES for c in cols)):
            out.append(cols)
    return out


def id_kinds(text: str) -> set[str]:
    """Which ids an output holds: ``task`` and/or ``pipeline``."""
    return {"pipeline" if m.group("kind") == "pipeline" else "task"
            for m in _ID.finditer(text)}


def final_state(text: str) -> str | None:
    found = _STATE.findall(text)
    return found[-1] if found else None


def shape_problems(shown: str, actual: str) -> list[str]:
    """How ``actual`` output differs in shape from what the docs show: a table header
    the docs show and the output lacks, an id kind (task, pipeline) with none in the
    output, another final state. Loose on purpose: ids, times and numbers vary."""
    shown = "\n".join(x for x in shown.splitlines() if x.strip() not in ("...", "…"))
    problems = []
    have = {_columns(line) for line in actual.splitlines()}
    problems.extend(f"no header line {'  '.join(cols)!r}" for cols in headers(shown)
                    if cols not in have)
    problems.extend(f"no {kind} id" for kind in sorted(id_kinds(shown) - id_kinds(actual)))
    want, got = final_state(shown), final_state(actual)
    if want is not None and want != got:
        problems.append(f"final state {got}, the docs show {want}")
    return problems


def api_errors(output: str) -> list[str]:
    """Lines holding the API's error document (``{"error": {...}}``): a curl without
    ``-f`` exits 0 on a 4xx, so the answer itself is looked at."""
    return [line for line in output.splitlines() if _API_ERROR.search(line)]


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def failure(block: Block, ran: Ran, rc: int | None, timeout_s: float) -> str | None:
    """Why a block that was to run did not pass, or None; ``rc`` is its session's exit
    status (None: killed at ``timeout_s``)."""
    if not ran.began:
        return "not run: an earlier block of the page failed"
    if not ran.ended:
        how = f"killed after {timeout_s:g} s" if rc is None else f"exit status {rc}"
        return f"{how}; its output:\n{_tail(ran.output)}"
    errors = api_errors(ran.output)
    if errors:
        return f"the API answered an error: {errors[0]}"
    if ran.hints:
        return f"a piped argus command wrote a hint line to stdout: {ran.hints[0]}"
    for shown in block.shown():
        problems = shape_problems(shown, ran.output)
        if problems:
            return (f"its output is not shaped as the page shows ({'; '.join(problems)}):"
                    f"\n{_tail(ran.output)}")
    return None
