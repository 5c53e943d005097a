#!/usr/bin/env bash
# Make head.json stale: stop the publisher and age the record by an hour. Workers keep a
# working connection but do not join anew. `--restore` starts the publisher again, which
# writes a fresh record within a second.
USAGE_EXTRA="[--restore]"
. "$(dirname "$0")/fault_lib.sh"
parse_target "$@"
if [ "${3:-}" = --restore ]; then
  if [ "$KIND" = local ]; then local_supervisorctl start argus_head_publisher
  else docker exec "$NAME" supervisorctl -c "$CONF_IN_CONTAINER" start argus_head_publisher
  fi
  exit 0
fi
if [ "$KIND" = local ]; then
  local_supervisorctl stop argus_head_publisher
  "$ARGUS_NODE" backdate-record 3600 --file "$(local_field head_file)"
else
  docker exec "$NAME" supervisorctl -c "$CONF_IN_CONTAINER" stop argus_head_publisher
  docker exec "$NAME" argus-node backdate-record 3600
fi
