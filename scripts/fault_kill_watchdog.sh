#!/usr/bin/env bash
# SIGKILL a node's watchdog; supervisord restarts it and the node rejoins.
. "$(dirname "$0")/fault_lib.sh"
parse_target "$@"
if [ "$KIND" = local ]; then
  pids=$("$ARGUS_NODE" local pids --state-dir "$STATE_DIR" "$NAME" watchdog) \
    || die "no watchdog running on $NAME"
  kill -9 $pids
else
  program=argus_$(docker_role)_watchdog
  docker exec "$NAME" sh -c 'kill -9 "$(supervisorctl -c "$1" pid "$2")"' sh \
    "$CONF_IN_CONTAINER" "$program"
fi
echo "killed watchdog on $NAME"
