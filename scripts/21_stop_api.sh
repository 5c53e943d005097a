#!/usr/bin/env bash
# Stop the Argus task service (argus-api) in the head container, or on this host.
set -euo pipefail
# shellcheck source=scripts/_api_common.sh
. "$(dirname "$0")/_api_common.sh"

USAGE="usage: $(basename "$0") [--local]

Stops the argus-api that 20_start_api.sh started, with its supervision: the supervisord of
its own (pid file) is sent TERM and stops the service (TERM, then KILL after
ARGUS_API_STOP_TIMEOUT_S seconds, default 10) before it exits; KILL follows when either is
still there after that. Under the head's supervisord (program argus_api) the program is
stopped and stays stopped until 20_start_api.sh or a restart of the head container.
Same place and environment rules as 20_start_api.sh."

parse_api_args "$USAGE" "$@"
container=$(api_container)
if [[ -n $container ]]; then
    run_in_container "$container" "$(basename "$0")"
fi

load_local_settings
stop_timeout=$(seconds_setting ARGUS_API_STOP_TIMEOUT_S 10)
if node_supervised; then
    service=$(program_pid node) || service=
    ctl node stop "$API_PROGRAM" >/dev/null || die "the head's supervisord could not stop $API_PROGRAM"
    echo "argus-api: stopped${service:+ (pid $service)}; the head's supervisord keeps the" \
        "program $API_PROGRAM stopped until 20_start_api.sh or a restart of the head"
    exit 0
fi
if ! pid=$(running_pid); then
    rm -f "$PID_FILE"
    echo "argus-api: not running"
    exit 0
fi
service=$(program_pid own) || service=
# supervisord stops the service first (stopwaitsecs = the stop timeout), then exits.
stop_process_group "$pid" "$((${stop_timeout%.*} + 5))"
if [[ -n $service ]] && proc_start_time "$service" >/dev/null; then
    echo "argus-api: pid $service still there after its supervisord; sending KILL" >&2
    kill -KILL -- "-$service" 2>/dev/null || kill -KILL "$service" 2>/dev/null || true
    wait_exit "$service" 5 || true
fi
if proc_start_time "$pid" >/dev/null || { [[ -n $service ]] && proc_start_time "$service" >/dev/null; }; then
    echo "argus-api: pid $pid or $service survived KILL" >&2
    exit 1
fi
rm -f "$PID_FILE"
echo "argus-api: stopped (pid ${service:-?}) and its supervisord (pid $pid)"
