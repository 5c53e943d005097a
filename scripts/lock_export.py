"""Pinned, hashed requirement lines for a few packages of uv.lock and what they need.

The node image installs supervisor and Jinja2 on top of a base that brings its own Ray
(verl's image, or the local debootstrap base); those two must be the versions the lock
holds, not a second list that drifts. `scripts/lock.sh` writes
images/argus-ray-node/requirements.txt with this, and `scripts/lock.sh --check` (in CI)
fails when the file and the lock disagree.

    python3 scripts/lock_export.py uv.lock supervisor jinja2
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

HEADER = (
    "# Generated from uv.lock by scripts/lock.sh: do not edit by hand.\n"
    "# The node image's own Python packages (Ray comes from the base image).\n"
)


def closure(packages: dict[str, dict], roots: list[str]) -> list[str]:
    """The roots and every package they depend on (markers ignored: --no-deps installs)."""
    seen: set[str] = set()
    todo = [r.lower() for r in roots]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        if name not in packages:
            raise SystemExit(f"lock_export: {name} is not in the lock")
        seen.add(name)
        todo.extend(d["name"] for d in packages[name].get("dependencies", []))
    return sorted(seen)


def hashes(package: dict) -> list[str]:
    files = [package["sdist"]] if "sdist" in package else []
    files += package.get("wheels", [])
    return sorted({f["hash"] for f in files})


def export(lock_text: str, roots: list[str]) -> str:
    lock = tomllib.loads(lock_text)
    packages = {p["name"]: p for p in lock["package"]}
    lines = [HEADER]
    for name in closure(packages, roots):
        package = packages[name]
        lines.append(f"{name}=={package['version']}")
        lines.extend(f" \\\n    --hash={h}" for h in hashes(package))
        lines.append("\n")
    return "".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    sys.stdout.write(export(Path(argv[0]).read_text(), argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
