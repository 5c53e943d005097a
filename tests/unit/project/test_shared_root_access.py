"""Every place the code touches the file system, accounted for: under the shared root,
users' jobs write what they like, so the service touches users' trees only through
``service.cluster.sharedfs`` (no symlink followed, regular files only, reads capped).

The scan reads every module of ``service`` and ``raypool`` with ``ast`` and lists each
call that opens, stats, lists, creates, renames or removes a path: ``open()``, the
``os``/``os.path``/``shutil``/``tempfile``/``glob``/``sqlite3`` functions that do, and
``pathlib`` methods. Calls on a ``SharedTree`` (a receiver named ``tree``) are the safe
way and do not count; everything else must be in :data:`ELSEWHERE` with the reason its
path is not in a user's tree. A new file access fails this test until it either goes
through ``SharedTree`` or is listed here with its reason; a listed one that is gone
fails it too, so the list stays the truth. docs/security.md ("The trust boundary")
names the places.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SAFE_MODULE = "service/cluster/sharedfs.py"

OS_CALLS = {"open", "stat", "lstat", "listdir", "scandir", "walk", "mkdir", "makedirs",
            "remove", "unlink", "rmdir", "removedirs", "rename", "renames", "replace",
            "symlink", "link", "access", "chmod", "chown", "truncate", "mkfifo", "utime",
            "readlink"}
OS_PATH_CALLS = {"exists", "lexists", "isfile", "isdir", "islink", "getsize", "getmtime",
                 "realpath", "samefile"}
MODULE_CALLS = {"shutil", "tempfile", "glob", "sqlite3"}
# pathlib methods that touch the file system (``replace``/``resolve``/``open`` are left
# out: str.replace, the webhook resolver and a client session share the names, and
# ``os.replace``/``open()`` cover the real ones)
PATH_METHODS = {"read_text", "read_bytes", "write_text", "write_bytes", "mkdir", "exists",
                "is_file", "is_dir", "is_symlink", "iterdir", "glob", "rglob", "unlink",
                "rmdir", "stat", "lstat", "touch", "rename", "symlink_to", "hardlink_to",
                "chmod", "samefile"}
SAFE_RECEIVERS = {"tree", "self.tree"}  # a SharedTree

OPERATOR = "the operator's area, outside users' trees"
NODE = "the node runtime's own files (ray/ under the root, its run and log dirs)"
PROC = "/proc of this machine, not the shared root"
CODE = "the code's own files (SQL, static assets, templates)"

# (module, enclosing function, call) -> why its path is not in a user's tree
ELSEWHERE: dict[tuple[str, str, str], str] = {
    ("service/cluster/address.py", "read_file", "open"):
        f"head.json, written by the head under <root>/ray/discovery: {NODE}",
    ("service/cluster/address.py", "read_file", "os.open"):
        "head.json, opened O_NOFOLLOW | O_NONBLOCK, a regular file only: " + NODE,
    ("service/config_load.py", "load_settings", ".read_text"): "the service's config file",
    ("service/main.py", "scrub_secret", "open"): PROC,
    ("service/store/db.py", "migration_files", ".glob"): CODE,
    ("service/store/db.py", "initialize", ".read_text"): CODE,
    ("service/store/db.py", "_open", "sqlite3.connect"):
        f"the database (v2.sqlite.db_path, by default <root>/common/db): {OPERATOR}",
    ("service/store/db.py", "connect", ".mkdir"): "the database's directory: " + OPERATOR,
    ("service/store/sql/__init__.py", "<module>", ".read_text"): CODE,
    ("service/store/sql/__init__.py", "postgres_queries", ".read_text"): CODE,
    ("service/store/pg.py", "migration_files", ".glob"): CODE,
    ("service/store/pg_engine.py", "_initialize", ".read_text"): CODE,
    **dict.fromkeys([("service/store/backup.py", "backup", c) for c in (
        ".exists", ".is_symlink", ".is_dir", ".is_file", "os.link", ".unlink", ".stat")],
        "argus-api db backup: the database and the backup file the operator names: "
        + OPERATOR),
    ("service/store/backup.py", "_copy", "sqlite3.connect"):
        "the database and its backup (argus-api db backup): " + OPERATOR,
    ("service/store/backup.py", "_check", "sqlite3.connect"):
        "the backup just written, read-only: " + OPERATOR,
    ("service/store/backup.py", "_sync", "os.open"):
        "the backup just written and its directory, to fsync: " + OPERATOR,
    ("service/store/copy.py", "schema", "sqlite3.connect"):
        "an in-memory database of the code's schema (argus-api db copy): no file",
    ("service/store/copy.py", "_prepare_target", ".exists"):
        "the copy's target database, named by the operator (argus-api db copy): " + OPERATOR,
    **dict.fromkeys([("service/store/copy_sides.py", f, c) for f, c in (
        ("exists", ".is_file"), ("open", ".exists"), ("open", "sqlite3.connect"))],
        "argus-api db copy: the SQLite databases the operator names (--from, --to): "
        + OPERATOR),
    ("service/web/ui/__init__.py", "_static", ".read_bytes"): CODE,
    ("raypool/atomicfile.py", "write_atomic", "tempfile.mkstemp"): NODE,
    ("raypool/atomicfile.py", "write_atomic", "os.replace"): NODE,
    ("raypool/atomicfile.py", "write_atomic", "os.unlink"): NODE,
    ("raypool/atomicfile.py", "fsync_directory", "os.open"): NODE,
    ("raypool/cli.py", "supervisord_executable", "os.access"): "an executable's path",
    ("raypool/cli.py", "supervisord_executable", "shutil.which"): "an executable's path",
    ("raypool/cli.py", "cmd_backdate", "open"): NODE + " (a test hook on head.json)",
    ("raypool/cli.py", "cmd_backdate", "os.utime"): NODE + " (a test hook on head.json)",
    ("raypool/discovery.py", "write_record", "os.makedirs"): NODE,
    ("raypool/discovery.py", "read_record", "open"): NODE,
    ("raypool/discovery.py", "read_record", "os.open"):
        "head.json, opened O_NOFOLLOW | O_NONBLOCK, a regular file only: " + NODE,
    ("raypool/gcsstore.py", "_holder", "open"): NODE,
    ("raypool/gcsstore.py", "acquire", "os.makedirs"): NODE,
    ("raypool/gcsstore.py", "acquire", "open"): NODE,
    ("raypool/gcsstore.py", "wipe", "os.path.exists"): NODE,
    ("raypool/gcsstore.py", "wipe", "shutil.rmtree"): NODE,
    ("raypool/head.py", "read_generation", "open"): NODE,
    ("raypool/nodehealth.py", "publish", "os.makedirs"):
        "<head.json dir>/nodes, the node's health file beside head.json: " + NODE,
    ("raypool/nodehealth.py", "publish", "os.lstat"):
        "<head.json dir>/nodes, the node's health file beside head.json: " + NODE,
    ("raypool/head.py", "clear_bootstrap_record", "open"):
        "Ray's ray_current_cluster in the node's own Ray temp dir: " + NODE,
    ("raypool/head.py", "clear_bootstrap_record", "os.unlink"):
        "Ray's ray_current_cluster in the node's own Ray temp dir: " + NODE,
    ("raypool/head.py", "run_head_watchdog", "os.makedirs"): NODE,
    ("raypool/local/launcher.py", "pid_namespace_mode", "shutil.which"):
        "an executable's path",
    ("raypool/local/launcher.py", "start_node", "os.makedirs"): NODE,
    ("raypool/local/launcher.py", "start_node", "open"): NODE,
    ("raypool/local/launcher.py", "up", "os.path.exists"): NODE,
    ("raypool/local/launcher.py", "up", "shutil.which"): "an executable's path",
    ("raypool/local/launcher.py", "up", "os.makedirs"): NODE,
    ("raypool/local/launcher.py", "down", "shutil.rmtree"): NODE,
    ("raypool/local/launcher.py", "down", "os.unlink"): NODE,
    ("raypool/local/netns.py", "setup_bridge", "open"): "a lock file under /run",
    ("raypool/local/netns.py", "allow_bridge_forwarding", "shutil.which"):
        "an executable's path",
    ("raypool/local/netns.py", "drop_bridge_forwarding", "shutil.which"):
        "an executable's path",
    ("raypool/local/state.py", "load", "open"): NODE,
    ("raypool/logsetup.py", "setup_logging", "os.makedirs"): NODE,
    ("raypool/procs.py", "tagged_processes", "open"): PROC,
    ("raypool/supervisor.py", "render", "open"): CODE,
    ("raypool/supervisor.py", "write_config", "os.makedirs"): NODE,
    ("raypool/apiservice.py", "keep_token", "os.makedirs"):
        "the node's run dir (ARGUS_RUN_DIR, in the container), never the shared root",
    ("raypool/apiservice.py", "keep_store_secrets", "os.makedirs"):
        "the node's run dir (ARGUS_RUN_DIR, in the container), never the shared root",
    ("raypool/apiservice.py", "service_env", "open"):
        "the token and secrets files in the node's run dir (ARGUS_RUN_DIR, in the container)",
    ("raypool/watchdog.py", "ray_executable", "os.access"): "an executable's path",
    ("raypool/watchdog.py", "ray_executable", "shutil.which"): "an executable's path",
}


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def file_calls(source: str) -> list[tuple[str, str, int]]:
    """``(enclosing function, call, line)`` of every file-system call in ``source``."""
    found: list[tuple[str, str, int]] = []

    class Visitor(ast.NodeVisitor):
        def __init__(self) -> None:
            self.scope: list[str] = []

        def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
            self.scope.append(node.name)
            self.generic_visit(node)
            self.scope.pop()

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_Call(self, node: ast.Call) -> None:
            name = _call_name(node.func)
            if name is not None:
                found.append((self.scope[-1] if self.scope else "<module>", name,
                              node.lineno))
            self.generic_visit(node)

    Visitor().visit(ast.parse(source))
    return found


def _call_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return "open" if func.id == "open" else None
    if not isinstance(func, ast.Attribute):
        return None
    receiver = _dotted(func.value)
    if receiver == "os":
        return f"os.{func.attr}" if func.attr in OS_CALLS else None
    if receiver == "os.path":
        return f"os.path.{func.attr}" if func.attr in OS_PATH_CALLS else None
    if receiver in MODULE_CALLS:
        return f"{receiver}.{func.attr}" if not func.attr[0].isupper() else None
    if receiver in SAFE_RECEIVERS:
        return None
    return f".{func.attr}" if func.attr in PATH_METHODS else None


def scan() -> dict[tuple[str, str, str], list[int]]:
    hits: dict[tuple[str, str, str], list[int]] = {}
    for package in ("service", "raypool"):
        for path in sorted((ROOT / package).rglob("*.py")):
            module = path.relative_to(ROOT).as_posix()
            if module == SAFE_MODULE:
                continue
            for scope, name, line in file_calls(path.read_text(encoding="utf-8")):
                hits.setdefault((module, scope, name), []).append(line)
    return hits


def test_every_file_access_goes_through_sharedfs_or_says_why_not() -> None:
    hits = scan()
    unexplained = {key: lines for key, lines in hits.items() if key not in ELSEWHERE}
    assert not unexplained, (
        "file-system calls that bypass service.cluster.sharedfs.SharedTree; route them "
        "through it, or add them to ELSEWHERE with why the path is never in a user's "
        "tree:\n" + "\n".join(f"  {m}:{lines[0]} in {s}(): {n}"
                              for (m, s, n), lines in sorted(unexplained.items())))
    stale = sorted(set(ELSEWHERE) - set(hits))
    assert not stale, f"ELSEWHERE lists calls that are gone: {stale}"


@pytest.mark.parametrize("source,expected", [
    ("open('x')", [("<module>", "open", 1)]),
    ("def f(p):\n    return p.read_text()", [("f", ".read_text", 2)]),
    ("import os\ndef g():\n    os.path.isdir('/x')", [("g", "os.path.isdir", 3)]),
    ("def h(self):\n    self.tree.read('x', 1)", []),
    ("s = 'a'.upper()", []),
    ("import shutil\nshutil.rmtree('/x')", [("<module>", "shutil.rmtree", 2)]),
])
def test_the_scan_sees_each_kind_of_call(source: str, expected: list) -> None:
    assert file_calls(source) == expected
