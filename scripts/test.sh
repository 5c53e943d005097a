#!/usr/bin/env bash
# The whole test suite, the way CI runs it: bootstrap, lint, then every tier
# (unit, integration on real local Ray, docs: every command of README.md and docs/ on a
# quick start, node runtime with real supervisord + faults,
# container: the image and the compose cluster on Docker, which tests/container sets up
# with scripts/container_env.sh).
# Extra arguments go to pytest, e.g. `scripts/test.sh -m unit -x`.
# Installs come from uv.lock only; `scripts/test.sh --latest` instead runs the unit and
# fuzz tiers on the newest versions pyproject.toml allows (scripts/test_latest.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--latest" ]; then
    shift
    exec scripts/test_latest.sh "$@"
fi
scripts/bootstrap.sh
echo "== lock"
scripts/lock.sh --check
echo "== ruff"
.venv/bin/ruff check .
echo "== pytest"
exec .venv/bin/pytest -p no:cacheprovider --timeout=600 -ra "$@"
