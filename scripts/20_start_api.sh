#!/usr/bin/env bash
# Start the Argus task service (argus-api) in the head container, or on this host.
set -euo pipefail
# shellcheck source=scripts/_api_common.sh
. "$(dirname "$0")/_api_common.sh"

USAGE="usage: $(basename "$0") [--local]

Starts argus-api --config \$ARGUS_CONFIG in the background, waits until /healthz answers
and prints the URL. Runs inside the head container (docker exec) when ARGUS_API_CONTAINER
is set or the container argus-ray-head runs; on this host with --local or without docker.

environment:
  ARGUS_API_TOKEN            required: the API's bearer token (the variable's name can be
                             changed with ARGUS_API_TOKEN_ENV, matching v2.auth.token_env)
  ARGUS_CONFIG               service config (default configs/dev.yaml, from the repo root)
  ARGUS_API_HOST/PORT        listen address (default 0.0.0.0:8080)
  ARGUS_API_RUN_DIR          pid and log files (default \${ARGUS_SHARED_ROOT:-./.argus}/common/run)
  ARGUS_API_START_TIMEOUT_S  how long to wait for /healthz (default 60)
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
config=$(repo_path "${ARGUS_CONFIG:-configs/dev.yaml}")
[[ -f $config ]] || die "config file not found: $config (set ARGUS_CONFIG)"

if pid=$(running_pid); then
    echo "argus-api: already running (pid $pid) at $API_URL"
    exit 0
fi
if health_json >/dev/null; then
    die "something else already answers on $API_URL/healthz; set ARGUS_API_PORT"
fi

# The installed console script when there is one; else the service straight from this
# repository (the head container: the repo is mounted, its dependencies come with Ray).
if command -v argus-api >/dev/null 2>&1; then
    api_cmd=(argus-api)
elif [[ -x $ARGUS_REPO/.venv/bin/argus-api ]] && "$ARGUS_REPO/.venv/bin/python" -c 'import service.main' 2>/dev/null; then
    api_cmd=("$ARGUS_REPO/.venv/bin/argus-api")
else
    api_cmd=(python3 -m service.main)
    export PYTHONPATH="$ARGUS_REPO${PYTHONPATH:+:$PYTHONPATH}"
fi

mkdir -p "$RUN_DIR"
echo "== $(date -Is) starting: ${api_cmd[*]} --config $config --host $API_HOST --port $API_PORT" >>"$LOG_FILE"
# setsid: its own session and process group, so the service outlives this shell and the
# stop script can signal everything it started.
setsid "${api_cmd[@]}" --config "$config" --host "$API_HOST" --port "$API_PORT" \
    </dev/null >>"$LOG_FILE" 2>&1 &
pid=$!
start=$(proc_start_time "$pid") || start=
printf '%s %s\n' "$pid" "$start" >"$PID_FILE"

deadline=$((SECONDS + ${start_timeout%.*} + 1))
# Healthy only counts while our process lives (not another service on the same port).
until health=$(health_json) && running_pid >/dev/null; do
    if ! running_pid >/dev/null; then
        rm -f "$PID_FILE"
        echo "argus-api: exited during start-up; last lines of $LOG_FILE:" >&2
        tail -n 20 "$LOG_FILE" >&2
        exit 1
    fi
    if ((SECONDS >= deadline)); then
        stop_process_group "$pid" "$(seconds_setting ARGUS_API_STOP_TIMEOUT_S 10)"
        rm -f "$PID_FILE"
        echo "argus-api: no answer on $API_URL/healthz within ${start_timeout}s; stopped it." \
            "Last lines of $LOG_FILE:" >&2
        tail -n 20 "$LOG_FILE" >&2
        exit 1
    fi
    sleep 0.2
done
echo "argus-api: running (pid $pid) at $API_URL (log: $LOG_FILE)"
echo "health: $health"
