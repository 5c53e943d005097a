#!/usr/bin/env bash
# The lock: uv.lock pins every Python package Argus and its tests install (with hashes,
# for every Python the project supports); images/argus-ray-node/requirements.txt is the
# image's slice of it. Nothing else resolves versions at install time.
#
#   scripts/lock.sh              re-lock after editing pyproject.toml (keeps other pins)
#   scripts/lock.sh --upgrade    move every package to the newest version pyproject allows
#   scripts/lock.sh --upgrade-package NAME   move one package
#   scripts/lock.sh --check      exit 1 when pyproject.toml, uv.lock and the image's
#                                requirements disagree (CI runs this first)
# After a change: scripts/test.sh, then commit uv.lock and the requirements file together.
set -euo pipefail
cd "$(dirname "$0")/.."

[ -x .tools/bin/uv ] || scripts/bootstrap.sh >/dev/null
UV=.tools/bin/uv
IMAGE_REQUIREMENTS=images/argus-ray-node/requirements.txt
IMAGE_PACKAGES=(supervisor jinja2)
PYTHON=${PYTHON:-python3}

image_requirements() {
    "$PYTHON" scripts/lock_export.py uv.lock "${IMAGE_PACKAGES[@]}"
}

case "${1:-}" in
    --check)
        if ! "$UV" lock --check --offline --quiet 2>/dev/null; then
            echo "lock: pyproject.toml and uv.lock disagree (a dependency was added, removed or" >&2
            echo "lock: its range changed without re-locking): run scripts/lock.sh, then" >&2
            echo "lock: scripts/test.sh, and commit uv.lock with pyproject.toml" >&2
            exit 1
        fi
        if ! diff -u "$IMAGE_REQUIREMENTS" <(image_requirements) >&2; then
            echo "lock: $IMAGE_REQUIREMENTS is not what uv.lock pins: run scripts/lock.sh" >&2
            exit 1
        fi
        echo "lock: uv.lock matches pyproject.toml; $IMAGE_REQUIREMENTS matches uv.lock"
        ;;
    ""|--upgrade|--upgrade-package)
        "$UV" lock "$@"
        image_requirements > "$IMAGE_REQUIREMENTS"
        git --no-pager diff --stat -- uv.lock "$IMAGE_REQUIREMENTS" || true
        ;;
    *)
        echo "usage: scripts/lock.sh [--check | --upgrade | --upgrade-package NAME]" >&2
        exit 2
        ;;
esac
