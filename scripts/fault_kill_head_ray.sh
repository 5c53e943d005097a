#!/usr/bin/env bash
# SIGKILL the head's GCS; the head watchdog restarts Ray with a new generation on the same
# GCS store: the same cluster (head.json's cluster_id) comes back, workers keep their
# raylets and the runs on them (with ARGUS_GCS_STORE=memory: a new cluster, workers rejoin).
. "$(dirname "$0")/fault_lib.sh"
parse_target "$@"
if [ "$KIND" = local ]; then
  pids=$("$ARGUS_NODE" local pids --state-dir "$STATE_DIR" "$NAME" gcs) \
    || die "no GCS running on $NAME"
  kill -9 $pids
else
  docker exec "$NAME" pkill -9 -f gcs_server
fi
echo "killed GCS on $NAME"
