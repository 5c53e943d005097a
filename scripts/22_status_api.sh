#!/usr/bin/env bash
# Is the Argus task service (argus-api) running, what supervises it, what does /healthz say?
set -euo pipefail
# shellcheck source=scripts/_api_common.sh
. "$(dirname "$0")/_api_common.sh"

USAGE="usage: $(basename "$0") [--local]

Prints whether argus-api runs, what supervises it (its own supervisord, pid file; or the
head's supervisord, program argus_api) and its /healthz JSON. Same place and environment
rules as 20_start_api.sh.
exit status: 0 running and healthy, 1 supervised but not (yet) answering, 3 not running"

parse_api_args "$USAGE" "$@"
container=$(api_container)
if [[ -n $container ]]; then
    run_in_container "$container" "$(basename "$0")"
fi

load_local_settings
if node_supervised; then
    which=node
    supervisor="the head's supervisord (program $API_PROGRAM)"
    state=$(program_state node) || state=unknown
    if [[ $state == STOPPED ]]; then
        echo "argus-api: not running (stopped in $supervisor)"
        exit 3
    fi
else
    which=own
    if ! pid=$(running_pid); then
        echo "argus-api: not running"
        exit 3
    fi
    supervisor="supervisord (pid $pid)"
    state=$(program_state own) || state=unknown
fi
service=$(program_pid "$which") || service=
if [[ $state =~ ^(RUNNING|STARTING)$ ]] && health=$(health_json); then
    echo "argus-api: running (pid $service) at $API_URL, supervised by $supervisor"
    echo "health: $health"
else
    echo "argus-api: $state under $supervisor${service:+ (pid $service)}, $API_URL/healthz" \
        "does not answer (it is restarted with a growing pause; log: $LOG_FILE)"
    exit 1
fi
