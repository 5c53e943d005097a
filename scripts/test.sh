#!/usr/bin/env bash
# The whole test suite, the way CI runs it: bootstrap, lint, then every tier
# (unit, integration on real local Ray, node runtime with real supervisord + faults,
# container: the image and the compose cluster on Docker, which tests/container sets up
# with scripts/container_env.sh).
# Extra arguments go to pytest, e.g. `scripts/test.sh -m unit -x`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
echo "== ruff"
.venv/bin/ruff check .
echo "== pytest"
exec .venv/bin/pytest -p no:cacheprovider --timeout=600 -ra "$@"
