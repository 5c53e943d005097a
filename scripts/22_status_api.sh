#!/usr/bin/env bash
# Is the Argus task service (argus-api) running, and what does /healthz say?
set -euo pipefail
# shellcheck source=scripts/_api_common.sh
. "$(dirname "$0")/_api_common.sh"

USAGE="usage: $(basename "$0") [--local]

Prints whether argus-api runs (pid file) and its /healthz JSON. Same place and
environment rules as 20_start_api.sh.
exit status: 0 running and healthy, 1 running but /healthz does not answer, 3 not running"

parse_api_args "$USAGE" "$@"
container=$(api_container)
if [[ -n $container ]]; then
    run_in_container "$container" "$(basename "$0")"
fi

load_local_settings
if ! pid=$(running_pid); then
    echo "argus-api: not running"
    exit 3
fi
if health=$(health_json); then
    echo "argus-api: running (pid $pid) at $API_URL"
    echo "health: $health"
else
    echo "argus-api: running (pid $pid) but $API_URL/healthz does not answer (log: $LOG_FILE)"
    exit 1
fi
