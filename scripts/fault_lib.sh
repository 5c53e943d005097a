# Shared by scripts/fault_*.sh (sourced, not run). A target is either
#   local NODE      a node of `argus-node local up` (state dir: $ARGUS_LOCAL_DIR or
#                   /tmp/argus-local), e.g. `local w1`, `local head`
#   docker NAME     a compose container running the Argus node image
set -euo pipefail
ARGUS_NODE=${ARGUS_NODE:-argus-node}
STATE_DIR=${ARGUS_LOCAL_DIR:-/tmp/argus-local}
CONF_IN_CONTAINER=${ARGUS_RUN_DIR:-/run/argus-node}/supervisord.conf

die() { echo "$(basename "$0"): $*" >&2; exit 2; }

parse_target() {
  [ $# -ge 2 ] || die "usage: $(basename "$0") local NODE | docker CONTAINER ${USAGE_EXTRA:-}"
  KIND=$1; NAME=$2
  case "$KIND" in local|docker) ;; *) die "target kind must be local or docker, got '$KIND'";; esac
}

# local_field JSONPATH: a field of `argus-node local status`, e.g. nodes.w1.run_dir
local_field() {
  "$ARGUS_NODE" local status --state-dir "$STATE_DIR" | python3 -c '
import json, sys
value = json.load(sys.stdin)
for key in sys.argv[1].split("."):
    value = value[key]
print(value)' "$1"
}

local_supervisorctl() {
  supervisorctl -c "$(local_field "nodes.$NAME.run_dir")/supervisord.conf" "$@"
}

docker_role() { docker exec "$NAME" printenv ARGUS_ROLE; }
