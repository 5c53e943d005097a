"""The layers of the code base, kept true by reading every import.

Rules:

(a) ``raypool`` (the node runtime, shipped alone in the node image) and ``service`` (the
    task service) import nothing of each other.
(b) A pure module (every module of :data:`PURE_PACKAGES`, and :data:`PURE_ELSEWHERE`)
    imports no I/O module, directly or through the project modules it imports, and touches
    no file itself.
(c) Within ``service``, only ``service/cluster/raycluster.py`` imports ``ray``.
(d) The client package (``clients/python/argus_client``, installed alone by users)
    imports only the standard library and itself, and neither server package imports it.
(e) Within ``service``, a module imports only its own layer or those below
    (:data:`LAYERS`, lowest first, each named: ``domain``, ``policy``, ``settings``,
    ``jobspec``, ``scheduling``, ``webhooks``, ``adapters``, ``engine and use cases``,
    ``web``, ``main``), and no modules import each other in a cycle, at any depth.
(f) Packages that share a layer import nothing of each other (:data:`SIBLINGS`: the
    engine and the use cases; the store and the cluster adapter).
(g) The web front ends import from the engine only what its loops leave for readers
    (:data:`ENGINE_FOR_READERS`); the loops themselves are started by ``service.main``.
(h) The console (``service.web.ui``) imports from the API only its shared plumbing
    (:data:`API_FOR_THE_CONSOLE`: the request's deps, auth, parameters, JSON views),
    never a handler module: what a user asks goes through ``service.usecases``. The API
    imports nothing of the console.

Imports are read with ``ast`` from the source of every module of both packages: every
``import``/``from ... import`` statement counts wherever it stands (top level, inside a
function, under ``if TYPE_CHECKING:``), relative imports are resolved, and
``importlib.import_module("name")`` / ``__import__("name")`` with a literal name count too.
Importing ``a.b.c`` of the project also runs ``a`` and ``a.b``: those count as imported.

What an I/O module is, precisely: a module named in :data:`IO_MODULES` (or a submodule of
one): it talks to SQLite, Ray, HTTP, other processes, sockets, the file system, threads or
signals; or a project module that imports one, at any depth. ``os``, ``io``, ``pathlib``
and ``glob`` (:data:`FILE_MODULES`) are used everywhere for paths and the environment, so
they do not make a module I/O, but a pure module may not import them nor call ``open()``:
it gets paths, settings and file contents passed in. Randomness (``secrets``, ``uuid``) and
clock types (``datetime``, ``time``) are not I/O here.
"""

from __future__ import annotations

import ast
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("service", "raypool")

# Packages whose every module decides from values only (the policy core), and the pure
# modules that live beside I/O in their package. Add a module here when you write one.
PURE_PACKAGES = ("service.domain", "service.jobspec", "service.policy", "service.scheduling")
PURE_ELSEWHERE = (
    "service.cluster.boundary",
    "service.cluster.mapping",
    "service.engine.tick_report",
    "service.web.ui.progress_text",
    "service.web.ui.event_text",
    "service.web.ui.slots",
    "service.web.api.views",
    "service.web.api.params",
    "service.webhooks.events",
    "service.webhooks.signing",
    "service.webhooks.policy",
    "service.webhooks.settings",
    "service.webhooks.schemas",
    "raypool.policy",
    "raypool.headrecord",
    "raypool.gpuparse",
    "raypool.healthpolicy",
)

# The service's layers, lowest first, each named: a module imports only modules of its own
# layer or below. A dotted entry inside a package (``service.cluster.boundary``) places that
# module apart from its package; the longest entry a module is in wins.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # the facts every layer shares: states, ids, rows, reasons, resources, progress values
    ("domain", ("service.domain",)),
    # decisions from values; the Ray boundary's protocol and value types; the webhooks'
    # retry policy; the bounded YAML reader (jobspec's, which pipeline documents use too)
    ("policy", ("service.policy", "service.cluster.boundary", "service.webhooks.policy",
                "service.jobspec.yamldoc")),
    # the settings values and their loading from the YAML file
    ("settings", ("service.config", "service.config_load", "service.config_scheduler",
                  "service.config_values", "service.webhooks.settings")),
    # the JobSpec front door: validation, overrides, the verl command
    ("jobspec", ("service.jobspec",)),
    # who runs next: admission, fair share, the plan, reservations, preemption
    ("scheduling", ("service.scheduling",)),
    # the webhooks' events, signing and HTTP transport
    ("webhooks", ("service.webhooks",)),
    # the store (SQLite) and the cluster (Ray, the shared file system)
    ("adapters", ("service.store", "service.cluster")),
    # the loops that act, and what a user asks for
    ("engine and use cases", ("service.engine", "service.usecases")),
    # the API and the console
    ("web", ("service.web",)),
    # the process wiring
    ("main", ("service.main",)),
)
LAYER_NAMES = tuple(name for name, _ in LAYERS)

# Packages of one layer that import nothing of each other.
SIBLINGS = (("service.engine", "service.usecases"), ("service.store", "service.cluster"))

# What the web front ends may import of the engine: what its loops leave for readers (the
# last observation, the samples, a tick's counts, the attempts' files), never a loop.
ENGINE_FOR_READERS = ("service.engine.artifacts", "service.engine.observed",
                      "service.engine.sampling", "service.engine.tick_report")

# What the console may import of the API package: its plumbing, no handler.
API_FOR_THE_CONSOLE = ("service.web.api.deps", "service.web.api.auth",
                       "service.web.api.params", "service.web.api.views")

# name -> what it touches (a submodule of a named module counts as the module)
IO_MODULES = {
    "sqlite3": "SQLite",
    "service.store.writer": "SQLite (the store)",
    "ray": "Ray",
    "service.cluster.raycluster": "Ray (the adapter)",
    "aiohttp": "HTTP",
    "requests": "HTTP",
    "urllib.request": "HTTP",
    "http.client": "HTTP",
    "http.server": "HTTP",
    "xmlrpc": "HTTP (XML-RPC)",
    "service.web.app": "HTTP (the API)",
    "socket": "sockets",
    "socketserver": "sockets",
    "ssl": "sockets",
    "select": "sockets",
    "selectors": "sockets",
    "asyncio": "the event loop",
    "subprocess": "processes",
    "multiprocessing": "processes",
    "psutil": "processes",
    "supervisor": "processes (supervisord)",
    "signal": "signals",
    "threading": "threads",
    "_thread": "threads",
    "concurrent.futures": "threads",
    "shutil": "the file system",
    "tempfile": "the file system",
    "fcntl": "the file system",
    "mmap": "the file system",
}
FILE_MODULES = {
    "os": "the file system and the environment",
    "io": "files",
    "pathlib": "the file system",
    "glob": "the file system",
}
RAY_ADAPTER = "service.cluster.raycluster"


@dataclass(frozen=True)
class Import:
    name: str  # absolute dotted name (``from a import b``: ``a.b``)
    line: int


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    imports: tuple[Import, ...]
    calls_open: tuple[int, ...]  # lines of open(...) calls


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name of ``from <level dots><target> import ...`` inside ``module``."""
    if level == 0:
        return target or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def read_module(root: Path, path: Path) -> Module:
    name = module_name(root, path)
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    imports: list[Import] = []
    opens: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports += [Import(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            # ``from a import b`` is read as ``a.b`` (b may be a submodule; a name that is
            # not a module still matches ``a`` and its parents below)
            base = _resolve(name, is_package, node.level, node.module)
            imports += [Import(base if alias.name == "*" else f"{base}.{alias.name}",
                               node.lineno) for alias in node.names]
        elif isinstance(node, ast.Call):
            func = node.func
            called = (func.id if isinstance(func, ast.Name)
                      else func.attr if isinstance(func, ast.Attribute) else "")
            first = node.args[0] if node.args else None
            if called in ("import_module", "__import__") and isinstance(first, ast.Constant) \
                    and isinstance(first.value, str):
                imports.append(Import(first.value, node.lineno))
            if isinstance(func, ast.Name) and func.id == "open":
                opens.append(node.lineno)
    return Module(name, path, tuple(imports), tuple(opens))


def load_modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Module]:
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            module = read_module(root, path)
            modules[module.name] = module
    return modules


def matches(name: str, table: dict[str, str]) -> str | None:
    """The entry of ``table`` that ``name`` is, or is a submodule of."""
    for entry in table:
        if name == entry or name.startswith(entry + "."):
            return entry
    return None


def project_targets(name: str, modules: dict[str, Module]) -> list[str]:
    """Project modules that importing ``name`` runs: it and its parent packages."""
    parts = name.split(".")
    return [p for p in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if p in modules]


def io_chain(start: str, modules: dict[str, Module]) -> list[str] | None:
    """The shortest import chain from project module ``start`` to an I/O module (ending with
    that module and what it touches), or None when there is none."""
    parent: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        current = queue.popleft()
        for imp in modules[current].imports:
            entry = matches(imp.name, IO_MODULES)
            if entry is not None:
                chain = [entry, current]
                while (up := parent[chain[-1]]) is not None:
                    chain.append(up)
                return [*reversed(chain[1:]), f"{entry} ({IO_MODULES[entry]})"]
            for target in project_targets(imp.name, modules):
                if target not in parent:
                    parent[target] = current
                    queue.append(target)
    return None


def pure_violations(pure: tuple[str, ...], modules: dict[str, Module]) -> list[str]:
    problems = []
    for name in pure:
        module = modules.get(name)
        if module is None:
            problems.append(f"{name} is listed as pure but no such module exists")
            continue
        chain = io_chain(name, modules)
        if chain is not None:
            problems.append(f"{name} imports an I/O module: {' -> '.join(chain)}")
        for imp in module.imports:
            entry = matches(imp.name, FILE_MODULES)
            if entry is not None:
                problems.append(f"{name} imports {entry} ({FILE_MODULES[entry]}) at line "
                                f"{imp.line}: a pure module gets paths and contents passed in")
        problems += [f"{name} calls open() at line {line}" for line in module.calls_open]
    return problems


def cross_package_violations(modules: dict[str, Module]) -> list[str]:
    problems = []
    for module in modules.values():
        own = module.name.split(".")[0]
        for imp in module.imports:
            top = imp.name.split(".")[0]
            if top in PACKAGES and top != own:
                problems.append(f"{module.name} (line {imp.line}) imports {imp.name}: "
                                f"{own} and {top} import nothing of each other")
    return problems


def ray_violations(modules: dict[str, Module]) -> list[str]:
    return [f"{m.name} (line {imp.line}) imports {imp.name}: only {RAY_ADAPTER} imports ray"
            for m in modules.values() if m.name.split(".")[0] == "service"
            and m.name != RAY_ADAPTER
            for imp in m.imports if matches(imp.name, {"ray": ""})]


# --- the rules on this repository --------------------------------------------------------

@pytest.fixture(scope="module")
def modules() -> dict[str, Module]:
    found = load_modules(ROOT)
    assert {"service.store.writer", "raypool.policy"} <= set(found), "packages not found"
    return found


def test_raypool_and_service_import_nothing_of_each_other(modules):
    assert cross_package_violations(modules) == []


def pure_modules(modules: dict[str, Module]) -> tuple[str, ...]:
    in_packages = [name for name in modules if matches(name, dict.fromkeys(PURE_PACKAGES))]
    return (*sorted(in_packages), *PURE_ELSEWHERE)


def test_pure_modules_import_no_io(modules):
    pure = pure_modules(modules)
    assert "service.scheduling.planner" in pure and "service.domain.states" in pure
    assert pure_violations(pure, modules) == []


def layer_of(name: str) -> int | None:
    """The index in :data:`LAYERS` of the longest entry ``name`` is (or is inside)."""
    best: tuple[int, int] | None = None
    for index, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            if within(name, entry) and (best is None or len(entry) > best[1]):
                best = (index, len(entry))
    return None if best is None else best[0]


def within(name: str, entry: str) -> bool:
    return name == entry or name.startswith(entry + ".")


def layer_violations(modules: dict[str, Module]) -> list[str]:
    problems = []
    for module in modules.values():
        own = layer_of(module.name)
        if own is None:
            if module.name.startswith("service."):
                problems.append(f"{module.name} is in no layer: add its package to LAYERS")
            continue
        for imp in module.imports:
            target = layer_of(imp.name)
            if target is not None and target > own:
                problems.append(f"{module.name} (line {imp.line}) imports {imp.name}: "
                                f"layer {LAYER_NAMES[target]} is above its own, "
                                f"{LAYER_NAMES[own]}")
    return problems


def _imports(modules: dict[str, Module], importer: str, imported: str):
    """(module, import) pairs where a module inside ``importer`` imports ``imported``."""
    return [(m, imp) for m in modules.values() if within(m.name, importer)
            for imp in m.imports if within(imp.name, imported)]


def sibling_violations(modules: dict[str, Module]) -> list[str]:
    return [f"{m.name} (line {imp.line}) imports {imp.name}: {a} and {b} share a layer "
            "and import nothing of each other"
            for a, b in SIBLINGS for x, y in ((a, b), (b, a))
            for m, imp in _imports(modules, x, y)]


def front_end_violations(modules: dict[str, Module]) -> list[str]:
    """(g) and (h): the web front ends against the engine's loops and each other."""
    problems = [f"{m.name} (line {imp.line}) imports {imp.name}: the web imports of the "
                f"engine only {', '.join(ENGINE_FOR_READERS)}"
                for m, imp in _imports(modules, "service.web", "service.engine")
                if not any(within(imp.name, ok) for ok in ENGINE_FOR_READERS)]
    problems += [f"{m.name} (line {imp.line}) imports {imp.name}: the console imports of "
                 f"the API only {', '.join(API_FOR_THE_CONSOLE)}; a user's request goes "
                 "through service.usecases"
                 for m, imp in _imports(modules, "service.web.ui", "service.web.api")
                 if imp.name != "service.web.api"
                 and not any(within(imp.name, ok) for ok in API_FOR_THE_CONSOLE)]
    problems += [f"{m.name} (line {imp.line}) imports {imp.name}: the API imports nothing "
                 "of the console"
                 for m, imp in _imports(modules, "service.web.api", "service.web.ui")]
    return problems


def import_cycles(modules: dict[str, Module]) -> list[list[str]]:
    """Groups of project modules that import each other, at any depth (Tarjan)."""
    graph = {name: {t for imp in m.imports for t in project_targets(imp.name, modules)[-1:]
                    if t != name} for name, m in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while (w := stack.pop()) != v:
                group.append(w)
            if group:
                cycles.append(sorted([v, *group]))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return cycles


def test_each_layer_imports_only_its_own_and_below(modules):
    assert layer_violations(modules) == []


def test_every_layer_holds_a_module(modules):
    for index, (name, entries) in enumerate(LAYERS):
        for entry in entries:
            assert any(within(m, entry) for m in modules), f"{entry} ({name}): no module"
            assert layer_of(entry) == index, f"{entry} is named twice"


def test_siblings_import_nothing_of_each_other(modules):
    assert sibling_violations(modules) == []


def test_the_web_reaches_the_engine_and_the_api_as_the_rules_say(modules):
    assert front_end_violations(modules) == []


def test_no_import_cycle(modules):
    assert import_cycles(modules) == []


def test_checker_flags_an_upward_import_and_a_cycle(tmp_path):
    modules = make_tree(tmp_path, {
        "service/__init__.py": "",
        "service/store/__init__.py": "",
        "service/store/a.py": "import service.web.b\n",
        "service/web/__init__.py": "",
        "service/web/b.py": "from service.store import a\n",
    })
    assert layer_violations(modules) == [
        "service.store.a (line 1) imports service.web.b: layer web is above its own, "
        "adapters"]
    assert import_cycles(modules) == [["service.store.a", "service.web.b"]]


def test_checker_flags_upward_arrows_among_the_low_layers(tmp_path):
    modules = make_tree(tmp_path, {
        "service/__init__.py": "",
        "service/domain/rows.py": "from service.policy.progress import Progress\n",
        "service/policy/retry.py": "from service.config import SchedulerSettings\n",
        "service/policy/pipelines.py": "from service.jobspec import yamldoc\n",
        "service/config.py": "from service.policy.quotas import Limits\n",
        "service/jobspec/spec.py": "from service.scheduling.admission import Driver\n",
    })
    assert sorted(p.split(":")[0] for p in layer_violations(modules)) == [
        "service.domain.rows (line 1) imports service.policy.progress.Progress",
        "service.jobspec.spec (line 1) imports service.scheduling.admission.Driver",
        "service.policy.retry (line 1) imports service.config.SchedulerSettings",
    ]


def test_checker_flags_siblings_and_the_front_ends(tmp_path):
    modules = make_tree(tmp_path, {
        "service/__init__.py": "",
        "service/usecases/a.py": "from service.engine import scheduler_loop\n",
        "service/web/ui/page.py": "from service.web.api import handlers, views, deps\n",
        "service/web/api/x.py": "import service.engine.observed\nimport service.web.ui.page\n",
        "service/web/metrics.py": "from service.engine.scheduler import Scheduler\n",
    })
    assert [p.split(":")[0] for p in sibling_violations(modules)] == [
        "service.usecases.a (line 1) imports service.engine.scheduler_loop"]
    assert sorted(p.split(":")[0] for p in front_end_violations(modules)) == [
        "service.web.api.x (line 2) imports service.web.ui.page",
        "service.web.metrics (line 1) imports service.engine.scheduler.Scheduler",
        "service.web.ui.page (line 1) imports service.web.api.handlers",
    ]


def test_only_the_ray_adapter_imports_ray(modules):
    assert RAY_ADAPTER in modules
    assert io_chain(RAY_ADAPTER, modules) is not None  # it does import ray
    assert ray_violations(modules) == []


CLIENT_ROOT = ROOT / "clients" / "python"
CLIENT = "argus_client"


def client_violations(client: dict[str, Module], server: dict[str, Module]) -> list[str]:
    """(d): what the client imports beyond the standard library, and who imports it."""
    problems = [f"{m.name} (line {imp.line}) imports {imp.name}: the client package uses "
                "the standard library only"
                for m in client.values() for imp in m.imports
                if imp.name.split(".")[0] not in (*sys.stdlib_module_names, CLIENT)]
    problems += [f"{m.name} (line {imp.line}) imports {imp.name}: the server never imports "
                 "the client" for m in server.values() for imp in m.imports
                 if imp.name.split(".")[0] == CLIENT]
    return problems


def test_the_client_package_stands_alone(modules):
    client = load_modules(CLIENT_ROOT, (CLIENT,))
    assert f"{CLIENT}.cli.main" in client
    assert client_violations(client, modules) == []


def test_checker_flags_a_client_importing_the_server(tmp_path):
    make_tree(tmp_path, {"argus_client/__init__.py": "import service.jobspec.spec\n",
                         "argus_client/x.py": "import json, yaml\n",
                         "service/__init__.py": "from argus_client import x\n"})
    tree = load_modules(tmp_path, (CLIENT, "service"))
    client = {k: v for k, v in tree.items() if k.startswith(CLIENT)}
    server = {k: v for k, v in tree.items() if not k.startswith(CLIENT)}
    found = client_violations(client, server)
    assert [p.split(" imports ")[1].split(":")[0] for p in found] == [
        "service.jobspec.spec", "yaml", "argus_client.x"]


# --- the checker itself, on small made-up trees ------------------------------------------

def make_tree(root: Path, files: dict[str, str]) -> dict[str, Module]:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return load_modules(root)


def test_checker_finds_a_function_level_import_through_a_chain(tmp_path):
    modules = make_tree(tmp_path, {
        "service/__init__.py": "",
        "service/pure.py": "from . import helper\n",
        "service/helper.py": "def f():\n    from service.store.db import q\n",
        "service/store/db.py": "import sqlite3\n",
        "raypool/__init__.py": "",
    })
    assert pure_violations(("service.pure",), modules) == [
        "service.pure imports an I/O module: service.pure -> service.helper -> service.store.db"
        " -> sqlite3 (SQLite)"]


@pytest.mark.parametrize("source,words", [
    ("import os.path\n", "imports os (the file system and the environment) at line 1"),
    ("from pathlib import Path\n", "imports pathlib"),
    ("def f(p):\n    return open(p).read()\n", "calls open() at line 2"),
    ("from concurrent import futures\n", "concurrent.futures (threads)"),
    ("import importlib\nimportlib.import_module('ray.util')\n", "ray (Ray)"),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import aiohttp\n", "HTTP"),
])
def test_checker_flags_each_kind_of_io(tmp_path, source, words):
    modules = make_tree(tmp_path, {"service/__init__.py": "", "service/p.py": source})
    problems = pure_violations(("service.p",), modules)
    assert len(problems) == 1 and words in problems[0], problems


def test_checker_passes_a_pure_module_and_flags_a_missing_one(tmp_path):
    modules = make_tree(tmp_path, {
        "service/__init__.py": "",
        "service/p.py": "import re, secrets\nfrom datetime import UTC\nfrom .q import X\n",
        "service/q.py": "import os\nfrom dataclasses import dataclass\nX = os.sep\n",
    })
    assert pure_violations(("service.p",), modules) == []
    assert pure_violations(("service.gone",), modules) == [
        "service.gone is listed as pure but no such module exists"]


def test_checker_flags_io_in_a_parent_package(tmp_path):
    modules = make_tree(tmp_path, {
        "service/__init__.py": "import threading\n",
        "service/p.py": "import service.domain.states\n",
        "service/domain/states.py": "",
    })
    assert pure_violations(("service.p",), modules) == [
        "service.p imports an I/O module: service.p -> service -> threading (threads)"]


def test_checker_flags_cross_package_and_ray_imports(tmp_path):
    modules = make_tree(tmp_path, {
        "service/__init__.py": "",
        "service/a.py": "def f():\n    from raypool import discovery\n",
        "service/cluster/raycluster.py": "import ray\n",
        "service/b.py": "from ray.job_submission import JobSubmissionClient\n",
        "raypool/__init__.py": "",
        "raypool/c.py": "import service.domain.states\n",
    })
    assert cross_package_violations(modules) == [
        "service.a (line 2) imports raypool.discovery: service and raypool import nothing "
        "of each other",
        "raypool.c (line 1) imports service.domain.states: raypool and service import nothing of "
        "each other",
    ]
    assert ray_violations(modules) == [
        "service.b (line 1) imports ray.job_submission.JobSubmissionClient: only "
        "service.cluster.raycluster imports ray"]
