"""docs/architecture.md names only what exists: every module path (``service/engine/watch.py``,
``service/web/api/``, ``engine/reconcile``, ``policy/retry.plan``), every dotted module name
(``service.usecases.tasks.submit``), every short one (``retry.plan``: a module ``retry`` of
the packages defines ``plan``; or the standard library's, a settings section, a file) and
every module file (``rows.py``) it writes in backticks outside code blocks is a file or
folder of the tree, and a name after the module (``.plan``, ``.Scheduler``) is defined in it.

A path is looked up from the repository's root and from every folder of the packages
(the page writes ``api/auth.py`` inside the ``service/web`` section); one that starts with
``/`` is an HTTP route and one with ``<``, ``*`` or a space a pattern, neither checked.
"""

from __future__ import annotations

import ast
import re
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "architecture.md"
PACKAGES = ("service", "raypool", "clients/python/argus_client")
TOP_PACKAGES = {"service": ROOT, "raypool": ROOT, "argus_client": ROOT / "clients" / "python"}

SPAN = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"[a-z0-9_.][\w.-]*(/[\w.-]+)*/?")
DOTTED = re.compile(r"(service|raypool|argus_client)(\.\w+)+")
MODULE_FILE = re.compile(r"\w+\.py")
SHORT = re.compile(r"[a-z_][a-z0-9_]*(\.\w+)+")
# what else a short dotted name may start with: the settings' sections (``v2.api``)
CONFIG_SECTIONS = ("v2", "ray")


def spans(text: str) -> list[str]:
    """The backticked spans of ``text`` outside fenced code blocks."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return SPAN.findall(prose)


@cache
def defined(path: Path) -> frozenset[str]:
    """The names a module defines or imports at its top level."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(names)


def _module(base: Path, parts: list[str]) -> tuple[Path | None, list[str]]:
    """The longest module (a ``.py`` file, or a package's ``__init__.py``) that ``parts``
    start with under ``base``, and the parts after it."""
    found: tuple[Path | None, list[str]] = (None, parts)
    for i in range(1, len(parts) + 1):
        stem = base.joinpath(*parts[:i])
        if stem.with_suffix(".py").is_file():
            found = (stem.with_suffix(".py"), parts[i:])
        elif (stem / "__init__.py").is_file() or stem.is_dir():
            found = (stem / "__init__.py" if (stem / "__init__.py").is_file() else stem,
                     parts[i:])
        else:
            break
    return found


def _names_ok(module: Path | None, rest: list[str]) -> bool:
    """Whether the first name after the module is defined in it (or a submodule)."""
    if module is None:
        return False
    if not rest:
        return True
    if module.is_dir() or module.suffix != ".py":
        return False
    return rest[0] in defined(module)


def dotted_ok(name: str) -> bool:
    parts = name.split(".")
    module, rest = _module(TOP_PACKAGES[parts[0]], parts)
    return _names_ok(module, rest)


@cache
def bases(root: Path) -> tuple[Path, ...]:
    """The root and every folder of the packages, where a relative path may start."""
    out = [root]
    for package in PACKAGES:
        top = root / package
        if top.is_dir():
            out += [top, *sorted(p for p in top.rglob("*") if p.is_dir()
                                 and "__pycache__" not in p.parts)]
    return tuple(out)


def path_ok(span: str, root: Path = ROOT) -> bool:
    """``span`` (``a/b.py``, ``a/b/``, ``a/b``, ``a/b.name``) names something in the tree."""
    *folders, last = span.rstrip("/").split("/")
    for base in bases(root):
        if base.joinpath(*folders, last).exists():
            return True
        stem, _, attr = last.partition(".")
        if attr and attr != "py":
            module, rest = _module(base, [*folders, stem, *attr.split(".")])
            if module is not None and module.suffix == ".py" and _names_ok(module, rest):
                return True
        elif base.joinpath(*folders, stem + ".py").is_file():
            return True
    return False


@cache
def module_files(root: Path) -> frozenset[str]:
    return frozenset(p.name for package in PACKAGES for p in (root / package).rglob("*.py"))


def short_ok(span: str, root: Path = ROOT) -> bool:
    """``a.b``: a file of the packages (``queries.sql``), a module ``a`` of the packages
    that defines ``b`` (``retry.plan``, ``store.reads.task_row``), a module of the
    standard library, or a settings section (``v2.api``)."""
    if any(True for package in PACKAGES for _ in (root / package).rglob(span)):
        return True
    parts = span.split(".")
    first = parts[0]
    homes = {p.parent for package in PACKAGES for p in (root / package).rglob(f"{first}.py")}
    homes |= {p.parent for package in PACKAGES for p in (root / package).rglob(first)
              if (p / "__init__.py").is_file()}
    if homes:
        return any(_names_ok(*_module(home, parts)) for home in homes)
    return first in sys.stdlib_module_names or first in CONFIG_SECTIONS


def missing(text: str, root: Path = ROOT) -> list[str]:
    """The module paths and names ``text`` writes in backticks that do not exist."""
    out = []
    for span in spans(text):
        if DOTTED.fullmatch(span):
            ok = dotted_ok(span) if root == ROOT else path_ok(span.replace(".", "/"), root)
        elif "/" in span and PATH.fullmatch(span) and not span.startswith("/"):
            ok = path_ok(span, root)
        elif MODULE_FILE.fullmatch(span):
            ok = span in module_files(root)
        elif SHORT.fullmatch(span):
            ok = short_ok(span, root)
        else:
            continue
        if not ok:
            out.append(span)
    return out


def test_the_architecture_page_names_only_modules_that_exist() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert len(spans(text)) > 300  # the page is read
    assert missing(text) == []


def test_the_page_names_every_package_of_the_service() -> None:
    text = PAGE.read_text(encoding="utf-8")
    packages = sorted(p.name for p in (ROOT / "service").iterdir()
                      if (p / "__init__.py").is_file())
    assert [p for p in packages if f"`service/{p}/`" not in text] == []


def test_the_checker_flags_what_moved(tmp_path: Path) -> None:
    (tmp_path / "service" / "engine").mkdir(parents=True)
    (tmp_path / "service" / "engine" / "watch.py").write_text("def watch():\n    pass\n")
    text = ("`service/engine/watch.py`, `engine/watch.watch`, `service/engine/`, `watch.py`"
            " `/api/v2/tasks` `<root>/users/` `v2.api`\n"
            "`service/store_async.py` `engine/watch.gone` `ray_logtail.py` `store/`\n"
            "`watch.watch` `store_async.AsyncStore` `watch.nothing` `json.dumps` `v2.ui`\n"
            "```\n`service/inside/a/block.py`\n```\n")
    assert missing(text, tmp_path) == [
        "service/store_async.py", "engine/watch.gone", "ray_logtail.py", "store/",
        "store_async.AsyncStore", "watch.nothing"]


def test_dotted_names_resolve_to_a_module_and_a_name_in_it() -> None:
    assert dotted_ok("service.usecases.tasks.submit")
    assert dotted_ok("service.engine.webhook_delivery")
    assert not dotted_ok("service.webhooks.worker")
    assert not dotted_ok("service.store_async.AsyncStore")
    assert not dotted_ok("service.policy.retry.no_such_name")
