#!/usr/bin/env bash
# Drift check, opt-in (`scripts/test.sh --latest`): install the NEWEST versions that
# pyproject.toml allows into .venv-latest (ignoring uv.lock), show what moved against the
# lock, and run the unit and fuzz tiers on them. A failure here is a finding about an
# upcoming release, never a break on main: fix it (or narrow the range in pyproject.toml),
# then move the lock with `scripts/lock.sh --upgrade` and run scripts/test.sh.
# Extra arguments go to pytest (default: -m "unit or fuzz").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
PYTHON=${PYTHON:-python3}
VENV=.venv-latest
UV=.tools/bin/uv

echo "== latest: resolving the newest versions pyproject.toml allows into $VENV"
"$UV" venv --quiet --clear --python "$PYTHON" "$VENV"
"$UV" pip install --quiet --python "$VENV/bin/python" --upgrade --refresh -e '.[dev]'

echo "== latest: versions that differ from uv.lock"
"$UV" pip freeze --quiet --python "$VENV/bin/python" --exclude-editable \
    | "$PYTHON" scripts/lock_drift.py uv.lock

status=0
echo "== latest: pytest on the newest versions"
if [ $# -eq 0 ]; then
    set -- -m "unit or fuzz"
fi
"$VENV/bin/pytest" -p no:cacheprovider --timeout=600 -ra "$@" || status=$?
if [ "$status" -eq 0 ]; then
    echo "latest: green on the newest versions: 'scripts/lock.sh --upgrade' can move the lock"
else
    echo "latest: RED on the newest versions (pytest exit $status): a finding; main's lock is unaffected"
fi
exit "$status"
