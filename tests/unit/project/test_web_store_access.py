"""The web code (``service/web/``: the API and the console) never reaches the store itself:
what a user asks goes through a use case (``service/usecases/``), which reads and writes
on the store's lanes. Beside the import rules of ``test_layering.py``, read with ``ast``:

- no attribute ``.store`` (``deps.store``, ``app[DEPS].store``, ``deps_of(r).store``), nor
  ``getattr(x, "store")``, in any web module;
- no import of the store's writer or its lanes (``service.store.writer``,
  ``service.store.aio``), at any place in a module (top level, a function,
  ``TYPE_CHECKING``), in either form (``import a.b``, ``from a import b``).

The store's value types and helpers (``store.pipelines.Edge``, ``store.offload.PARTY``,
``store.db.storage_fault``) are not access and stay allowed. ``/metrics``
(``service/web/metrics.py``) reads through the protocols it declares (``UserStatsSource``,
``QueueStatsSource``, a counts callable) that ``service.web.app`` hands it at wiring time:
it touches no store attribute and imports neither module, so it needs no entry below.

:data:`ALLOWED` names what truly must stay, each with its reason; an entry that matches
nothing any more fails the test (delete it).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
WEB = "service/web"
STORE_MODULES = ("service.store.writer", "service.store.aio")

# (file, what, where): what is ``.store`` or ``import <module>``; where is the enclosing
# function's dotted name (``<module>`` at top level).
ALLOWED: dict[tuple[str, str, str], str] = {
    # the deps container declares its ``store`` field's type: the lanes the use cases get
    ("service/web/api/deps.py", "import service.store.aio", "<module>"):
        "AppDeps types its store field (AsyncStore)",
    # the application's wiring: it wraps the Store in its lanes and closes them on cleanup
    ("service/web/app.py", "import service.store.aio", "<module>"):
        "create_app builds AsyncStore around the Store it is given",
    ("service/web/app.py", "import service.store.writer", "<module>"):
        "create_app's parameter is the Store (its owner opens and closes it)",
    ("service/web/app.py", ".store", "create_app._shutdown_pools"):
        "the app's cleanup stops the store's lanes (the lifecycle, not a request)",
}


@dataclass(frozen=True)
class Access:
    file: str
    what: str
    where: str
    line: int

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.file, self.what, self.where)


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    return [base, *(f"{base}.{a.name}" for a in node.names)]


def _names_store(node: ast.AST) -> bool:
    """``x.store``, or ``getattr(x, "store")`` / ``setattr(x, "store", ...)``."""
    if isinstance(node, ast.Attribute):
        return node.attr == "store"
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr") and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant) and node.args[1].value == "store")


def store_accesses(file: str, source: str) -> list[Access]:
    """Every access to the store in ``source`` (see the module's docstring)."""
    found: list[Access] = []

    def visit(node: ast.AST, where: list[str]) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            where = [*where, node.name]
        scope = ".".join(where) or "<module>"
        if _names_store(node):
            found.append(Access(file, ".store", scope, node.lineno))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = _imported(node)
            for module in STORE_MODULES:
                if any(n == module or n.startswith(module + ".") for n in names):
                    found.append(Access(file, f"import {module}", scope, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    visit(ast.parse(source), [])
    return found


def web_accesses(root: Path) -> list[Access]:
    return [a for path in sorted((root / WEB).rglob("*.py"))
            for a in store_accesses(path.relative_to(root).as_posix(), path.read_text())]


def problems(found: list[Access], allowed: dict[tuple[str, str, str], str]) -> list[str]:
    out = [f"{a.file}:{a.line} ({a.where}) {a.what}: web code reaches the store through a "
           "use case (service/usecases/)" for a in found if a.key not in allowed]
    seen = {a.key for a in found}
    out += [f"allowlist entry {key} matches nothing: delete it" for key in allowed
            if key not in seen]
    return out


def test_web_code_reaches_the_store_only_through_use_cases():
    found = web_accesses(ROOT)
    assert any(a.file == "service/web/api/deps.py" for a in found), "service/web not read"
    assert problems(found, ALLOWED) == []


# --- the checker itself, on small made-up sources -----------------------------------------

def test_checker_flags_each_form_of_access():
    source = (
        "import service.store.aio\n"
        "from service.store import writer\n"
        "from service.store.writer import Store\n"
        "async def page(request):\n"
        "    deps = deps_of(request)\n"
        "    row = await deps.store.read(lambda s: s.tasks.get_task('x'))\n"
        "    lanes = request.app[DEPS].store\n"
        "    def inner():\n"
        "        return getattr(deps, 'store')\n"
        "    if TYPE_CHECKING:\n"
        "        from service.store.aio import AsyncStore\n"
    )
    found = [(a.what, a.where, a.line) for a in store_accesses("m.py", source)]
    assert found == [
        ("import service.store.aio", "<module>", 1),
        ("import service.store.writer", "<module>", 2),
        ("import service.store.writer", "<module>", 3),
        (".store", "page", 6),
        (".store", "page", 7),
        (".store", "page.inner", 9),
        ("import service.store.aio", "page", 11),
    ]


def test_checker_passes_use_cases_and_the_store_value_types():
    source = (
        "from service.store.offload import PARTY\n"
        "from service.store.pipelines import Edge\n"
        "from service.usecases import reads\n"
        "async def page(request):\n"
        "    return await reads.task(deps_of(request), 'x')\n"
        "class Holder:\n"
        "    store: object\n"
    )
    assert store_accesses("m.py", source) == []


def test_an_allowlist_entry_that_matches_nothing_fails():
    found = store_accesses("m.py", "def f(deps):\n    return deps.store\n")
    assert problems(found, {("m.py", ".store", "f"): "why"}) == []
    assert problems([], {("m.py", ".store", "f"): "why"}) == [
        "allowlist entry ('m.py', '.store', 'f') matches nothing: delete it"]
    assert problems(found, {}) == [
        "m.py:2 (f) .store: web code reaches the store through a use case (service/usecases/)"]
