#!/usr/bin/env bash
# Install everything Argus needs on a fresh machine: Debian tools the node runtime and its
# tests use (ip, unshare), chromium + chromium-driver for the browser tier, and a virtualenv
# at .venv with the project and its dev extras.
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
if [ ${#need_apt[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "bootstrap: installing Debian packages: ${need_apt[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
    else
        echo "bootstrap: missing Debian packages (${need_apt[*]}); install them as root" >&2
    fi
fi

stamp=.venv/.argus-installed
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "bootstrap: installing Argus and its dev dependencies into .venv"
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e '.[dev]'
    touch "$stamp"
fi
