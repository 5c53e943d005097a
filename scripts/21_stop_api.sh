#!/usr/bin/env bash
# Stop the Argus task service (argus-api) in the head container, or on this host.
set -euo pipefail
# shellcheck source=scripts/_api_common.sh
. "$(dirname "$0")/_api_common.sh"

USAGE="usage: $(basename "$0") [--local]

Stops the argus-api that 20_start_api.sh started (pid file): TERM, then KILL when it is
still there after ARGUS_API_STOP_TIMEOUT_S seconds (default 10). Same place and
environment rules as 20_start_api.sh."

parse_api_args "$USAGE" "$@"
container=$(api_container)
if [[ -n $container ]]; then
    run_in_container "$container" "$(basename "$0")"
fi

load_local_settings
stop_timeout=$(seconds_setting ARGUS_API_STOP_TIMEOUT_S 10)
if ! pid=$(running_pid); then
    rm -f "$PID_FILE"
    echo "argus-api: not running"
    exit 0
fi
stop_process_group "$pid" "$stop_timeout"
if proc_start_time "$pid" >/dev/null; then
    echo "argus-api: pid $pid survived KILL" >&2
    exit 1
fi
rm -f "$PID_FILE"
echo "argus-api: stopped (pid $pid)"
