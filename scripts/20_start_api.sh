#!/usr/bin/env bash
# Start the Argus task service (argus-api) in the head container, or on this host.
set -euo pipefail
# shellcheck source=scripts/_api_common.sh
. "$(dirname "$0")/_api_common.sh"

USAGE="usage: $(basename "$0") [--local]

Starts argus-api --config \$ARGUS_CONFIG under supervision, waits until /healthz answers
and prints the URL. The service runs under a supervisord of its own (in ARGUS_API_RUN_DIR),
or, in a head container that runs the program argus_api (ARGUS_API_CONFIG set on the
head), under the head's supervisord; either restarts it whenever it exits. Runs inside
the head container (docker exec) when ARGUS_API_CONTAINER is set or the container
argus-ray-head runs; on this host with --local or without docker.

environment:
  ARGUS_API_TOKEN            required: the API's bearer token (the variable's name can be
                             changed with ARGUS_API_TOKEN_ENV, matching v2.auth.token_env)
  ARGUS_CONFIG               service config (default configs/dev.yaml, from the repo root)
  ARGUS_API_HOST/PORT        listen address (default 0.0.0.0:8080)
  ARGUS_API_RUN_DIR          pid and log files (default \${ARGUS_SHARED_ROOT:-./.argus}/common/run)
  ARGUS_API_START_TIMEOUT_S  how long to wait for /healthz (default 60)
  ARGUS_API_STOP_TIMEOUT_S   how long a stop waits before KILL (default 10)
  ARGUS_API_CONTAINER        head container to exec into (default argus-ray-head if running)"

parse_api_args "$USAGE" "$@"

token_env=${ARGUS_API_TOKEN_ENV:-ARGUS_API_TOKEN}
[[ $token_env =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] ||
    die "ARGUS_API_TOKEN_ENV must be an environment variable name, got '$token_env'"
[[ -n ${!token_env:-} ]] || die "$token_env is not set; the API refuses to run without a token"

container=$(api_container)
if [[ -n $container ]]; then
    run_in_container "$container" "$(basename "$0")"
fi

load_local_settings
start_timeout=$(seconds_setting ARGUS_API_START_TIMEOUT_S 60)
stop_timeout=$(seconds_setting ARGUS_API_STOP_TIMEOUT_S 10)

# Healthy: /healthz answers while the program runs under its supervisord (STARTING: up
# for less than its startsecs).
wait_healthy() {
    local which=$1 deadline=$((SECONDS + ${start_timeout%.*} + 1)) state
    until health=$(health_json) && [[ $(program_state "$which") =~ ^(RUNNING|STARTING)$ ]]; do
        state=$(program_state "$which") || state=unknown
        if [[ $which == own ]] && ! running_pid >/dev/null; then
            state=gone  # supervisord itself exited (its log: $SUP_LOG)
        fi
        case $state in
            BACKOFF | FATAL | EXITED | gone)
                echo "argus-api: exited during start-up ($state); its last lines:" >&2
                show_log "$which"
                return 1
                ;;
        esac
        if ((SECONDS >= deadline)); then
            echo "argus-api: no answer on $API_URL/healthz within ${start_timeout}s;" \
                "stopped it. Its last lines:" >&2
            show_log "$which"
            return 1
        fi
        sleep 0.2
    done
}

if node_supervised; then
    # The head's supervisord runs the program (ARGUS_API_CONFIG on the head): start it
    # there, with the config and token the head was given.
    if [[ $(program_state node) != RUNNING ]]; then
        ctl node start "$API_PROGRAM" >/dev/null || true
    fi
    if ! wait_healthy node; then
        ctl node stop "$API_PROGRAM" >/dev/null 2>&1 || true
        exit 1
    fi
    echo "argus-api: running (pid $(program_pid node)) at $API_URL," \
        "supervised by the head's supervisord (program $API_PROGRAM; its log:" \
        "supervisorctl -c $NODE_SUP_CONF tail $API_PROGRAM)"
    echo "health: $health"
    exit 0
fi

config=$(repo_path "${ARGUS_CONFIG:-configs/dev.yaml}")
[[ -f $config ]] || die "config file not found: $config (set ARGUS_CONFIG)"

if pid=$(running_pid); then
    echo "argus-api: already running (pid $(program_pid own || echo "?")) at $API_URL," \
        "supervised by supervisord (pid $pid)"
    exit 0
fi
if health_json >/dev/null; then
    die "something else already answers on $API_URL/healthz; set ARGUS_API_PORT"
fi

# The installed console script when there is one; else the service straight from this
# repository (the head container: the repo is mounted, its dependencies come with Ray).
if command -v argus-api >/dev/null 2>&1; then
    api_cmd=("$(command -v argus-api)")
elif [[ -x $ARGUS_REPO/.venv/bin/argus-api ]] && "$ARGUS_REPO/.venv/bin/python" -c 'import service.main' 2>/dev/null; then
    api_cmd=("$ARGUS_REPO/.venv/bin/argus-api")
else
    api_cmd=(python3 -m service.main)
    export PYTHONPATH="$ARGUS_REPO${PYTHONPATH:+:$PYTHONPATH}"
fi

mkdir -p "$RUN_DIR"
api_cmd+=(--config "$config" --host "$API_HOST" --port "$API_PORT")
echo "== $(date -Is) starting under supervisord: ${api_cmd[*]}" >>"$LOG_FILE"
write_supervisord_conf "$stop_timeout" "${api_cmd[@]}"
# setsid: its own session and process group, so supervisord (and the service it keeps
# running) outlive this shell; the stop script signals supervisord, which stops the service.
setsid "$(supervisor_tool supervisord)" -c "$SUP_CONF" </dev/null >>"$SUP_LOG" 2>&1 &
pid=$!
start=$(proc_start_time "$pid") || start=
printf '%s %s\n' "$pid" "$start" >"$PID_FILE"

if ! wait_healthy own; then
    stop_process_group "$pid" "$stop_timeout"
    rm -f "$PID_FILE"
    exit 1
fi
echo "argus-api: running (pid $(program_pid own)) at $API_URL (log: $LOG_FILE)," \
    "supervised by supervisord (pid $pid; it restarts the service when it exits)"
echo "health: $health"
