# shellcheck shell=bash
# Shared by 20_start_api.sh, 21_stop_api.sh and 22_status_api.sh (sourced, never run).
#
# Where the task service runs:
#   - in the head container (`docker exec`): when ARGUS_API_CONTAINER is set, or when a
#     docker engine answers and the container `argus-ray-head` is running. The script
#     then re-runs itself inside the container with --local, from the repository that
#     docker-compose.yaml mounts at /workspace/argus (ARGUS_API_REPO_IN_CONTAINER).
#   - on this host (--local, or no docker engine / no head container).
#
# Local mode keeps, under ARGUS_API_RUN_DIR (default ${ARGUS_SHARED_ROOT:-./.argus}/common/run):
#   argus-api.pid  "<pid> <start time>" (the start time from /proc guards against pid reuse)
#   argus-api.log  the service's stdout and stderr
# Relative paths (ARGUS_CONFIG, ARGUS_SHARED_ROOT, ARGUS_API_RUN_DIR) are taken from the
# repository root, in both modes.

ARGUS_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly ARGUS_REPO
readonly DEFAULT_API_CONTAINER=argus-ray-head
# Passed into the container by name only (`docker exec -e NAME`): values, the token
# included, never appear on a command line.
readonly API_ENV_NAMES=(ARGUS_CONFIG ARGUS_API_HOST ARGUS_API_PORT ARGUS_API_RUN_DIR
    ARGUS_API_START_TIMEOUT_S ARGUS_API_STOP_TIMEOUT_S ARGUS_API_TOKEN_ENV)

die() {
    echo "$(basename "$0"): $*" >&2
    exit 2
}

# Absolute form of a path taken relative to the repository root.
repo_path() {
    case "$1" in
        /*) printf '%s\n' "$1" ;;
        *) printf '%s\n' "$ARGUS_REPO/$1" ;;
    esac
}

# A positive number of seconds from the environment, or the default.
seconds_setting() {
    local name=$1 default=$2 value
    value=${!name:-$default}
    if [[ ! $value =~ ^[0-9]+([.][0-9]+)?$ || $value =~ ^0+([.]0+)?$ ]]; then
        die "$name must be a positive number of seconds, got '$value'"
    fi
    printf '%s\n' "$value"
}

# Settings of the local mode, checked once (the globals are the sourcing scripts' to use).
# shellcheck disable=SC2034
load_local_settings() {
    API_PORT=${ARGUS_API_PORT:-8080}
    if [[ ! $API_PORT =~ ^[0-9]{1,5}$ ]] || ((10#$API_PORT < 1 || 10#$API_PORT > 65535)); then
        die "ARGUS_API_PORT must be a port number 1..65535, got '$API_PORT'"
    fi
    API_HOST=${ARGUS_API_HOST:-0.0.0.0}
    [[ -n $API_HOST ]] || die "ARGUS_API_HOST must not be empty"
    local shared_root
    shared_root=$(repo_path "${ARGUS_SHARED_ROOT:-.argus}")
    RUN_DIR=$(repo_path "${ARGUS_API_RUN_DIR:-$shared_root/common/run}")
    PID_FILE=$RUN_DIR/argus-api.pid
    LOG_FILE=$RUN_DIR/argus-api.log
    # 0.0.0.0 / :: listen everywhere; ask the loopback address then.
    case "$API_HOST" in
        0.0.0.0) API_URL="http://127.0.0.1:$API_PORT" ;;
        :: | "[::]") API_URL="http://[::1]:$API_PORT" ;;
        *:*) API_URL="http://[$API_HOST]:$API_PORT" ;;
        *) API_URL="http://$API_HOST:$API_PORT" ;;
    esac
}

# Parses the scripts' common options; sets API_LOCAL=1 for --local.
parse_api_args() {
    local usage=$1
    shift
    API_LOCAL=0
    while (($#)); do
        case "$1" in
            --local) API_LOCAL=1 ;;
            -h | --help)
                printf '%s\n' "$usage"
                exit 0
                ;;
            *) die "unknown argument '$1' (try --help)" ;;
        esac
        shift
    done
}

docker_usable() {
    command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1
}

container_running() {
    [[ $(timeout 10 docker inspect -f '{{.State.Running}}' "$1" 2>/dev/null) == true ]]
}

# Prints the container to exec into, or nothing for local mode.
api_container() {
    ((API_LOCAL)) && return 0
    if [[ -n ${ARGUS_API_CONTAINER:-} ]]; then
        docker_usable || die "ARGUS_API_CONTAINER=$ARGUS_API_CONTAINER but no docker engine answers"
        container_running "$ARGUS_API_CONTAINER" ||
            die "container '$ARGUS_API_CONTAINER' is not running (docker compose up -d?)"
        printf '%s\n' "$ARGUS_API_CONTAINER"
    elif docker_usable && container_running "$DEFAULT_API_CONTAINER"; then
        printf '%s\n' "$DEFAULT_API_CONTAINER"
    fi
}

# Runs this same script with --local inside the container; its exit status is ours.
run_in_container() {
    local container=$1 script=$2 name
    local args=(exec -i)
    for name in "${API_ENV_NAMES[@]}" "${ARGUS_API_TOKEN_ENV:-ARGUS_API_TOKEN}"; do
        [[ -n ${!name+set} ]] && args+=(-e "$name")
    done
    local repo=${ARGUS_API_REPO_IN_CONTAINER:-/workspace/argus}
    exec docker "${args[@]}" "$container" bash "$repo/scripts/$script" --local
}

# Start time of a live (non-zombie) process, from /proc/<pid>/stat field 22.
proc_start_time() {
    local stat fields
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    # Fields after the command name, which may itself hold spaces or parentheses.
    read -ra fields <<<"${stat##*) }"
    [[ ${fields[0]} != Z ]] || return 1
    printf '%s\n' "${fields[19]}"
}

# Prints the pid of the service this pid file describes if that process still lives.
running_pid() {
    local pid start
    [[ -f $PID_FILE ]] || return 1
    read -r pid start <"$PID_FILE" || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ $(proc_start_time "$pid") == "$start" ]] || return 1
    printf '%s\n' "$pid"
}

# GET /healthz; prints the body, fails when the service does not answer 200 in time.
health_json() {
    python3 - "$API_URL/healthz" <<'PY'
import sys
import urllib.request

try:
    with urllib.request.urlopen(sys.argv[1], timeout=2) as response:
        sys.stdout.write(response.read().decode())
except (OSError, ValueError):
    sys.exit(1)
PY
}

# Polls until pid is gone (or a zombie); fails after the given seconds.
wait_exit() {
    local pid=$1 deadline=$((SECONDS + ${2%.*} + 1))
    while proc_start_time "$pid" >/dev/null; do
        ((SECONDS < deadline)) || return 1
        sleep 0.1
    done
}

# TERM the process group of pid, wait up to timeout seconds for it to go, then KILL it.
stop_process_group() {
    local pid=$1 timeout=$2
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || return 0
    wait_exit "$pid" "$timeout" && return 0
    echo "argus-api: pid $pid still there after ${timeout}s; sending KILL" >&2
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    wait_exit "$pid" 5 || true
}
