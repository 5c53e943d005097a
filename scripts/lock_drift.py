"""Which installed packages (`pip freeze` lines on stdin) differ from uv.lock's pins.

    uv pip freeze | python3 scripts/lock_drift.py uv.lock
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def drift(lock_text: str, freeze: str) -> list[str]:
    """'name: locked -> installed' for each package whose version moved, or was added."""
    locked = {normalize(p["name"]): p["version"] for p in tomllib.loads(lock_text)["package"]}
    moved = []
    for line in freeze.splitlines():
        name, sep, version = line.strip().partition("==")
        if not sep:
            continue
        was = locked.get(normalize(name))
        if was != version:
            moved.append(f"{normalize(name)}: {was or 'not in the lock'} -> {version}")
    return sorted(moved)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    moved = drift(Path(argv[0]).read_text(), sys.stdin.read())
    for line in moved:
        print(f"  {line}")
    print(f"{len(moved)} package(s) newer than (or missing from) the lock")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
