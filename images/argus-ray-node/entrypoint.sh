#!/bin/sh
# argus-ray-node entrypoint (PID 1 of every Argus Ray node container).
#
# Fails fast, with a clear message, when ARGUS_ROLE is missing or not head|worker|api
# (api: the task service alone, no Ray; docs/image.md), then
# replaces itself with `argus-node run`, which validates the rest of the ARGUS_*
# environment, renders the supervisord config for the role and execs `supervisord -n`:
# supervisord ends up as PID 1, no shell in between.
#
# Given arguments, it runs them instead (`docker run --rm IMAGE ray --version`), so the
# image can be inspected without starting a node.
set -eu

if [ "$#" -gt 0 ]; then
    exec "$@"
fi

case "${ARGUS_ROLE:-}" in
    head | worker | api) ;;
    "")
        echo "argus-entrypoint: ARGUS_ROLE is not set; set it to 'head', 'worker' or 'api'" >&2
        exit 64
        ;;
    *)
        echo "argus-entrypoint: ARGUS_ROLE must be 'head', 'worker' or 'api', got '${ARGUS_ROLE}'" >&2
        exit 64
        ;;
esac

exec argus-node run
