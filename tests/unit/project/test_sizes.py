"""Sizes: no function over :data:`MAX_FUNCTION_LINES` lines and no module over
:data:`MAX_MODULE_LINES` lines anywhere in ``service/``.

A function counts from its ``def`` line to its last line (its docstring, comments and blank
lines included; its decorators not); a nested function counts on its own and inside the
function around it. A module counts every line of its file.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 450

# TEMPORARY, to be emptied at the merge: ``build_openapi`` is deleted on the branch that
# replaces the hand-written OpenAPI modules with pydantic declarations (issue 53), so it
# is not split here. An entry that no longer exceeds a limit fails the test below: remove
# it then.
def oversized(root: Path, package: str = "service") -> list[str]:
    """Every module and function of ``root/package`` over its limit, as
    ``path (N lines)`` / ``path::name (N lines)``."""
    found = []
    for path in sorted((root / package).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{rel} ({lines} lines)")
        for node in ast.walk(ast.parse(text, filename=rel)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{rel}::{node.name} ({length} lines)")
    return found


def test_no_function_or_module_of_the_service_is_over_its_limit() -> None:
    found = oversized(ROOT)
    assert found == [], (f"functions over {MAX_FUNCTION_LINES} lines or modules over "
                         f"{MAX_MODULE_LINES}: split them along a real seam")


def test_the_checker_counts_modules_and_nested_functions(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    inner = "".join(f"        y{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "service").mkdir()
    (tmp_path / "service" / "ok.py").write_text(f"def f():\n{body}")
    (tmp_path / "service" / "big.py").write_text(
        f"async def g():\n    def h():\n{inner}" + "\n" * MAX_MODULE_LINES)
    assert oversized(tmp_path) == [
        f"service/big.py ({MAX_FUNCTION_LINES + 2 + MAX_MODULE_LINES} lines)",
        f"service/big.py::g ({MAX_FUNCTION_LINES + 2} lines)",
        f"service/big.py::h ({MAX_FUNCTION_LINES + 1} lines)",
    ]
