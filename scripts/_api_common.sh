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
# Who supervises it (restarts it when it exits, a kill -9 included):
#   - the node's own supervisord (PID 1 of the head container), when the head runs the
#     program argus_api (ARGUS_API_CONFIG set on the head: docs/image.md); the scripts then
#     start, stop and ask that program, and a `docker restart` of the head brings it back;
#   - else a supervisord of its own, started by 20_start_api.sh (the quick start, a host,
#     a head container without the program), with one program, argus_api.
#
# Local mode keeps, under ARGUS_API_RUN_DIR (default ${ARGUS_SHARED_ROOT:-./.argus}/common/run):
#   argus-api.pid  "<pid> <start time>" of that supervisord (the start time from /proc
#                  guards against pid reuse)
#   argus-api.log  the service's stdout and stderr (rotated by supervisord)
#   argus-api-supervisord.conf / .log / .sock   the supervisord's config, log and socket
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
    SUP_CONF=$RUN_DIR/argus-api-supervisord.conf
    SUP_LOG=$RUN_DIR/argus-api-supervisord.log
    SUP_SOCK=$RUN_DIR/argus-api-supervisord.sock
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

# --- supervision ---------------------------------------------------------------------------

readonly API_PROGRAM=argus_api
# The head's supervisord (raypool: <ARGUS_RUN_DIR>/supervisord.conf, default /run/argus-node).
NODE_SUP_CONF=${ARGUS_RUN_DIR:-/run/argus-node}/supervisord.conf

# A supervisor tool (supervisord, supervisorctl): on PATH (the node image), else the venv's.
supervisor_tool() {
    if command -v "$1" >/dev/null 2>&1; then
        command -v "$1"
    elif [[ -x $ARGUS_REPO/.venv/bin/$1 ]]; then
        printf '%s\n' "$ARGUS_REPO/.venv/bin/$1"
    else
        die "$1 not found (pip install supervisor, or scripts/bootstrap.sh)"
    fi
}

# supervisorctl against the node's supervisord (node) or our own (own).
ctl() {
    local which=$1
    shift
    local conf=$SUP_CONF
    [[ $which == node ]] && conf=$NODE_SUP_CONF
    timeout 30 "$(supervisor_tool supervisorctl)" -c "$conf" "$@"
}

# True when the node's supervisord runs and has the program argus_api (the head container
# with ARGUS_API_CONFIG set).
node_supervised() {
    [[ -f $NODE_SUP_CONF ]] || return 1
    local out
    out=$(ctl node status "$API_PROGRAM" 2>&1) || true
    [[ $out == "$API_PROGRAM "* ]]
}

# The program's state word (RUNNING, STARTING, BACKOFF, STOPPED, FATAL, EXITED, ...).
program_state() {
    local out words
    out=$(ctl "$1" status "$API_PROGRAM" 2>/dev/null) || true
    read -ra words <<<"$out"
    [[ ${words[0]:-} == "$API_PROGRAM" ]] || return 1
    printf '%s\n' "${words[1]}"
}

# The service's pid under supervisord (nothing when it does not run).
program_pid() {
    local pid
    pid=$(ctl "$1" pid "$API_PROGRAM" 2>/dev/null) || true
    [[ $pid =~ ^[0-9]+$ && $pid != 0 ]] && printf '%s\n' "$pid"
}

# The service's last log lines, on stderr.
show_log() {
    if [[ $1 == node ]]; then
        ctl node tail -4000 "$API_PROGRAM" 2>&1 | tail -n 20 >&2 || true
    else
        tail -n 20 "$LOG_FILE" >&2 || true
    fi
}

# Our own supervisord's config: one program, the service. Rendered with Python's shlex
# (supervisord splits command= the same way) and %-escaped (supervisord expands %(x)s).
# It inherits this script's environment (the token included), so the token is written
# nowhere. Restarts: at once after a crash of a service that ran startsecs; a start that
# fails sooner is retried with a growing pause (1 s, 2 s, ... supervisord's BACKOFF), up
# to startretries times, then FATAL.
write_supervisord_conf() {
    local stop_timeout=$1
    shift
    ((${#SUP_SOCK} < 100)) ||
        die "ARGUS_API_RUN_DIR is too long for a unix socket in it ($SUP_SOCK); pick a shorter one"
    python3 - "$SUP_CONF" "$SUP_SOCK" "$SUP_LOG" "$LOG_FILE" "$RUN_DIR" "$ARGUS_REPO" \
        "$stop_timeout" "$API_PROGRAM" "$@" <<'PY'
import os, pwd, shlex, sys

conf, sock, sup_log, log, run_dir, repo, stop_timeout, program, *command = sys.argv[1:]
ini = lambda value: value.replace("%", "%%")
text = f"""; Written by scripts/20_start_api.sh: argus-api under its own supervisord.
[unix_http_server]
file={ini(sock)}
chmod=0700

[supervisord]
nodaemon=true
silent=true
user={pwd.getpwuid(os.getuid()).pw_name}
logfile={ini(sup_log)}
logfile_maxbytes=10MB
logfile_backups=2
pidfile={ini(os.path.join(run_dir, "argus-api-supervisord.pid"))}
directory={ini(repo)}

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://{ini(sock)}

[program:{program}]
command={ini(shlex.join(command))}
directory={ini(repo)}
autostart=true
autorestart=true
startsecs=3
startretries=100
stopsignal=TERM
stopwaitsecs={max(1, round(float(stop_timeout)))}
stopasgroup=true
killasgroup=true
redirect_stderr=true
stdout_logfile={ini(log)}
stdout_logfile_maxbytes=50MB
stdout_logfile_backups=3
"""
tmp = conf + ".tmp"
with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
    f.write(text)
os.replace(tmp, conf)
PY
}
