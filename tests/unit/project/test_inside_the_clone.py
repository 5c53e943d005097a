"""The tests, scripts and benchmarks read nothing outside the repository: a user's clone
has no team folder beside it, nor the team's work folder. Every code file under
``tests/``, ``scripts/`` and ``bench/`` is scanned for

* the team's folder beside the checkout (``shared`` one level up) or an absolute path
  into the team's work folder;
* in Python, a path climbed up from ``__file__`` (``Path(__file__).parents[k]``,
  ``.parent``, ``os.path.dirname``, ``".."`` joined on), directly or through a name bound
  to one, past the repository root (``REPO.parent / "shared"``);
* in shell, ``$(dirname "$0")`` or ``${BASH_SOURCE[0]}`` followed by more ``..`` than
  the script is deep.

Documentation (``.md``) may say where a copy came from; captured logs and data files are
data. A test data file that must come from elsewhere is copied in, with a README saying
from where and when (``tests/unit/data/seed_jobspecs/``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCANNED = ("tests", "scripts", "bench")
CODE = {".py", ".sh", ".bash", ".yaml", ".yml", ".toml", ".cfg", ".ini", ".json", ".txt"}
SKIPPED_DIRS = {"__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis", "node_modules"}
# spelled in two halves so that this file does not name them itself
TEXT_RULES = (("../" + "shared", "the team's folder beside the checkout"),
              ("/" + "work/", "an absolute /work path"))
_SHELL_CLIMB = re.compile(
    r'\$\(dirname\s+"?(?:\$0|\$\{BASH_SOURCE\[0\]\})"?\)"?((?:/\.\.)+)')
_PATH_CALLS = {"Path", "PurePath", "abspath", "realpath", "normpath", "expanduser", "str"}
_SAME_LEVEL_METHODS = {"resolve", "absolute", "expanduser"}


def _call_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _walk(node: ast.expr) -> tuple[int, int] | None:
    """A joined string part as (net, peak) levels: ``".."`` climbs one, a name descends
    one; ``peak`` is the highest it climbs on the way (``"../x"``: net 0, peak 1). None:
    not a constant string."""
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return None
    net = peak = 0
    for part in node.value.split("/"):
        if part == "..":
            net += 1
            peak = max(peak, net)
        elif part not in ("", "."):
            net -= 1
    return net, peak


class _Climbs:
    """How many levels above the file each ``__file__``-anchored expression points:
    ``__file__`` is 0, its folder 1, the repository root the file's ``depth``; every
    expression (or string part on the way) above ``depth`` is kept in ``escapes``."""

    def __init__(self, tree: ast.AST, depth: int) -> None:
        self.depth = depth
        self.escapes: dict[int, str] = {}
        self.names: dict[str, int] = {}
        assigns = [n for n in ast.walk(tree) if isinstance(n, ast.Assign)]
        for _ in range(3):  # names bound to names bound to __file__
            for node in assigns:
                level = self.level(node.value)
                if level is not None:
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            self.names[target.id] = level

    def _seen(self, node: ast.expr, level: int) -> int:
        if level > self.depth:
            self.escapes.setdefault(node.lineno, f"{ast.unparse(node)} climbs "
                                                 f"{level - self.depth} level(s) above "
                                                 "the repository")
        return level

    def _joined(self, node: ast.expr, base: int | None, parts: list[ast.expr]) -> int | None:
        level = base
        for part in parts:
            walked = _walk(part)
            if level is None or walked is None:
                return None
            self._seen(node, level + walked[1])
            level += walked[0]
        return level

    def level(self, node: ast.expr) -> int | None:
        if isinstance(node, ast.Name):
            return 0 if node.id == "__file__" else self.names.get(node.id)
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            inner = self.level(node.value)
            return None if inner is None else self._seen(node, inner + 1)
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
                and node.value.attr == "parents" and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, int)):
            inner = self.level(node.value.value)
            return None if inner is None else self._seen(node, inner + node.slice.value + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return self._joined(node, self.level(node.left), [node.right])
        if isinstance(node, ast.Call):
            return self._call_level(node)
        return None

    def _call_level(self, node: ast.Call) -> int | None:
        name = _call_name(node.func)
        if name in _SAME_LEVEL_METHODS and isinstance(node.func, ast.Attribute) \
                and not node.args:
            return self.level(node.func.value)
        if not node.args:
            return None
        first = self.level(node.args[0])
        if first is None:
            return None
        if name == "dirname":
            return self._seen(node, first + 1)
        if name == "join":
            return self._joined(node, first, node.args[1:])
        return first if name in _PATH_CALLS else None


def python_escapes(source: str, depth: int) -> list[tuple[int, str]]:
    """``(line, what)`` of each ``__file__``-anchored path in ``source`` that reaches above
    the repository root, for a file ``depth`` levels under it (``tests/x.py``: 2)."""
    tree = ast.parse(source)
    climbs = _Climbs(tree, depth)
    for node in ast.walk(tree):
        if isinstance(node, ast.expr):
            climbs.level(node)
    return sorted(climbs.escapes.items())


def shell_escapes(text: str, depth: int) -> list[tuple[int, str]]:
    """``(line, what)`` of each ``$(dirname "$0")/..`` that climbs above the root."""
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for match in _SHELL_CLIMB.finditer(line):
            level = 1 + match.group(1).count("..")
            if level > depth:
                out.append((lineno, f"{match.group(0)} climbs {level - depth} level(s) "
                                    "above the repository"))
    return out


def problems(path: Path, text: str, depth: int) -> list[tuple[int, str]]:
    """Every way the file at ``path`` (``depth`` levels under the root) reaches out."""
    found = [(lineno, f"{what} ({needle})")
             for lineno, line in enumerate(text.splitlines(), 1)
             for needle, what in TEXT_RULES if needle in line]
    if path.suffix == ".py":
        found += python_escapes(text, depth)
    elif path.suffix in (".sh", ".bash"):
        found += shell_escapes(text, depth)
    return sorted(found)


def scanned_files() -> list[Path]:
    return sorted(
        path for top in SCANNED for path in (REPO / top).rglob("*")
        if path.is_file() and path.suffix in CODE
        and not SKIPPED_DIRS.intersection(path.relative_to(REPO).parts))


def test_nothing_under_tests_scripts_or_bench_reaches_outside_the_repository() -> None:
    files = scanned_files()
    assert len(files) > 100, "the scan found too few files: is REPO right?"
    found = []
    for path in files:
        relative = path.relative_to(REPO)
        text = path.read_text(encoding="utf-8", errors="replace")
        found += [f"{relative}:{lineno}: {what}"
                  for lineno, what in problems(path, text, len(relative.parts))]
    assert not found, "paths outside the repository:\n" + "\n".join(found)


OUT = "../" + "shared"


@pytest.mark.parametrize(("source", "depth", "lines"), [
    # the repository root itself, however it is spelled, is fine
    ("from pathlib import Path\nROOT = Path(__file__).resolve().parents[3]\n", 4, []),
    ("import os\nROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))\n",
     2, []),
    ("from pathlib import Path\nHERE = Path(__file__).parent\nROOT = HERE.parent\n", 2, []),
    ("from pathlib import Path\nX = Path(__file__).with_name('serve.py')\n", 2, []),
    # one level too far
    ("from pathlib import Path\nROOT = Path(__file__).resolve().parents[3]\n"
     "SEEDS = ROOT.parent / 'shared' / 'seeds'\n", 4, [3]),
    ("from pathlib import Path\nROOT = Path(__file__).resolve().parents[3]\n"
     f"SEEDS = ROOT / '{OUT}/seeds'\n", 4, [3]),
    # down into the repository and up again, inside it
    ("from pathlib import Path\nD = Path(__file__).resolve().parents[4] / 'deploy' / 'g.json'\n"
     "P = D.parents[1] / 'prometheus'\n", 5, []),
    ("from pathlib import Path\nREPO = Path(__file__).resolve().parents[2]\n"
     "TOOL = REPO.parent / 'shared' / 'tools' / 'make.py'\n", 3, [3]),
    ("from pathlib import Path\nX = Path(__file__).resolve().parents[4]\n", 4, [2]),
    ("from pathlib import Path\nX = Path(__file__).parent.parent.parent\n", 2, [2]),
    ("from pathlib import Path\nX = Path(__file__).parents[1] / '..' / 'shared'\n", 2, [2]),
    ("import os\nX = os.path.join(os.path.dirname(__file__), '../..', 'shared')\n", 2, [2]),
    ("import os\nR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))\n"
     "X = os.path.dirname(R)\n", 2, [3]),
])
def test_python_escapes(source: str, depth: int, lines: list[int]) -> None:
    assert [line for line, _ in python_escapes(source, depth)] == lines


@pytest.mark.parametrize(("text", "depth", "lines"), [
    ('cd "$(dirname "$0")/.."\n', 2, []),
    ('ARGUS_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)\n', 2, []),
    ('. "$(dirname "$0")/fault_lib.sh"\n', 2, []),
    ('cd "$(dirname "$0")/../.."\n', 2, [1]),
    (f'echo\nTOOL="$(dirname "$0")/../{OUT}/tools"\n', 2, [2]),
])
def test_shell_escapes(text: str, depth: int, lines: list[int]) -> None:
    assert [line for line, _ in shell_escapes(text, depth)] == lines


def test_text_rules() -> None:
    assert [line for line, _ in problems(Path("x.yaml"), f"a: {OUT}/seeds\nb: 1\n", 2)] == [1]
    assert [line for line, _ in problems(Path("x.txt"), "ok\n/" + "work/main\n", 2)] == [2]
