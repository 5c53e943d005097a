#!/usr/bin/env bash
# Move the head to a new address; workers follow the new head.json.
#   local NODE: restart the local head on a new IP (netns) or new ports (ports mode)
#   docker NAME NETWORK NEW_IP: reconnect the head container to NETWORK with NEW_IP
USAGE_EXTRA="[NETWORK NEW_IP for docker]"
. "$(dirname "$0")/fault_lib.sh"
parse_target "$@"
if [ "$KIND" = local ]; then
  [ "$NAME" = head ] || die "only the node named head can move"
  "$ARGUS_NODE" local move-head --state-dir "$STATE_DIR"
else
  [ $# -ge 4 ] || die "docker needs NETWORK and NEW_IP"
  docker network disconnect "$3" "$NAME"
  docker network connect --ip "$4" "$3" "$NAME"
  docker restart "$NAME"
fi
