#!/usr/bin/env bash
# `ray stop` (or `ray stop --force` with --force) on one node; its watchdog restarts Ray.
# Local targets must come from `--isolation netns`: only there is `ray stop` confined to
# one node (it runs inside that node's PID namespace).
USAGE_EXTRA="[--force]"
. "$(dirname "$0")/fault_lib.sh"
parse_target "$@"
force=()
[ "${3:-}" = --force ] && force=(--force)
if [ "$KIND" = local ]; then
  "$ARGUS_NODE" local exec --state-dir "$STATE_DIR" "$NAME" -- ray stop "${force[@]}"
else
  docker exec "$NAME" ray stop "${force[@]}"
fi
echo "ray stop ${force[*]} on $NAME"
