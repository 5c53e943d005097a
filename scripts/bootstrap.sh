#!/usr/bin/env bash
# Install everything Argus needs on a fresh machine: Debian tools the node runtime and its
# tests use (ip, unshare), chromium + chromium-driver for the browser tier, prometheus (and
# its promtool) for the Prometheus tier, PostgreSQL's server binaries (initdb, pg_ctl: the
# store's tests start a throwaway server of their own), and a virtualenv at .venv with the project and
# its dev extras at the versions uv.lock pins.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
"$PYTHON" - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"Argus needs Python >= 3.11, found {sys.version.split()[0]}")
PY

need_apt=()
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
command -v unshare >/dev/null 2>&1 || need_apt+=(util-linux)
command -v ps >/dev/null 2>&1 || need_apt+=(procps)
command -v shellcheck >/dev/null 2>&1 || need_apt+=(shellcheck)
# the browser tier (tests/browser): headless Chromium and its WebDriver, from Debian
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
# the Prometheus tier (tests/prometheus) and promtool's checks in the unit tier
{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || need_apt+=(prometheus)
# the store on PostgreSQL (tests/support/postgres.py): Debian keeps initdb and pg_ctl off the
# PATH, under /usr/lib/postgresql/<version>/bin
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need_apt+=(postgresql)
if [ ${#need_apt[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "bootstrap: installing Debian packages: ${need_apt[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
    else
        echo "bootstrap: missing Debian packages (${need_apt[*]}); install them as root" >&2
    fi
fi

# Python packages: exactly the versions in uv.lock (hashes checked), never a fresh
# resolution. uv itself comes pinned by hash from scripts/uv-requirements.txt into .tools/.
# `uv sync --locked` refuses a lock that no longer matches pyproject.toml (run
# scripts/lock.sh to move it) and removes anything in .venv the lock does not name.
uv_pin=$(sed -n 's/^uv==\([0-9.]*\).*/\1/p' scripts/uv-requirements.txt)
if [ "$(.tools/bin/uv --version 2>/dev/null | cut -d' ' -f2)" != "$uv_pin" ]; then
    echo "bootstrap: installing uv (scripts/uv-requirements.txt) into .tools"
    "$PYTHON" -m venv --clear .tools
    .tools/bin/pip install -q --require-hashes --no-deps -r scripts/uv-requirements.txt
fi
if ! .tools/bin/uv lock --check --offline --quiet 2>/dev/null; then
    echo "bootstrap: uv.lock does not match pyproject.toml (a dependency or its range changed" >&2
    echo "bootstrap: without re-locking): run scripts/lock.sh, then scripts/test.sh, and commit" >&2
    echo "bootstrap: uv.lock with pyproject.toml" >&2
    exit 1
fi
# --compile-bytecode: every Ray driver and worker process imports Ray anew, and where
# PYTHONDONTWRITEBYTECODE is set (as in CI containers) nothing caches the compiled modules:
# without it a stand-in job's startup overhead on 2 cores was 43 s median against 16 s
# (bench_trace.py --real). Only missing .pyc files are written: a second run costs nothing.
echo "bootstrap: syncing .venv with uv.lock"
.tools/bin/uv sync --locked --extra dev --python "$PYTHON" --quiet --compile-bytecode
